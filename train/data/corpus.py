"""The embedded default corpus: readable English (and German) generated from a seed, so that every
training script runs offline and a small model shows real learning within minutes on a CPU.

``default_corpus(task, split="train", seed=0, size=None) -> datasets.Dataset`` builds one task;
``generate_records(...)`` returns the same rows as plain dicts. The same (task, split, seed, size) always gives the
same rows, on any machine and Python hash seed. Splits are disjoint: each candidate row's key (its text, or the number
translated) goes by CRC-32 to exactly one of train (80%), validation (10%) or test (10%).
The tasks, what there is to learn in each and what small models reached: docs/training.md, "The embedded corpus".
"""

from __future__ import annotations

import random
import string
import zlib
from collections.abc import Callable

import datasets

TASKS = ("documents", "translation", "sentiment", "nli", "ner", "qa")
SPLITS = ("train", "validation", "test")


class UnknownCorpusTaskError(ValueError):
    """`embedded:<task>` names no task of the embedded corpus."""


DEFAULT_SIZES = {
    "documents": {"train": 4000, "validation": 200, "test": 200},
    "translation": {"train": 20000, "validation": 1000, "test": 1000},
    "sentiment": {"train": 10000, "validation": 1000, "test": 1000},
    "nli": {"train": 20000, "validation": 1000, "test": 1000},
    "ner": {"train": 8000, "validation": 500, "test": 500},
    "qa": {"train": 8000, "validation": 500, "test": 500},
}
SENTIMENT_LABELS = ["negative", "positive"]
NLI_LABELS = ["entailment", "neutral", "contradiction"]
NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]

# ----------------------------------------------------------------------------- word lists

FEMALE = ["Anna", "Maria", "Sofia", "Lena", "Amara", "Yuki", "Ines", "Nadia", "Clara", "Zoe",
          "Ingrid", "Chioma", "Elena", "Mei", "Hannah", "Florence", "Sydney", "Victoria"]
MALE = ["Jonas", "Omar", "Luca", "Kenji", "Mateo", "Tomas", "Kwame", "Felix", "Ivan", "Arjun",
        "Pablo", "Erik", "Samuel", "David", "Noah", "Austin", "Lincoln", "Jordan"]
SURNAMES = ["Berg", "Novak", "Okafor", "Silva", "Tanaka", "Keller", "Moreau", "Rossi", "Jensen",
            "Kowalski", "Haddad", "Larsen", "Fischer", "Costa", "Nakamura", "Dubois", "Lindqvist",
            "Mensah", "Ortega", "Petrov"]
CITIES = ["Lisbon", "Oslo", "Cairo", "Lima", "Nairobi", "Kyoto", "Dublin", "Vienna", "Krakow",
          "Porto", "Quito", "Accra", "Hanoi", "Tunis", "Bergen", "Florence", "Sydney", "Austin",
          "Victoria", "Lincoln", "Buenos Aires", "Cape Town", "New Delhi", "Rio de Janeiro",
          "Kuala Lumpur", "San Diego"]
ORGS = ["Northwind Bank", "Atlas Shipping", "Blue River Mills", "Kestrel Airlines", "Orion Labs",
        "Harbor Glassworks", "Pinecrest Hospital", "Granite Press", "Lumen Energy", "Silver Oak School"]
JOBS = ["teacher", "baker", "nurse", "engineer", "architect", "farmer", "pilot", "doctor", "carpenter",
        "librarian", "chemist", "journalist", "musician", "painter", "lawyer", "tailor", "gardener",
        "mechanic", "photographer", "editor"]
SUBJECTS = ["chemistry", "history", "music", "law", "medicine", "physics", "architecture",
            "mathematics", "biology", "painting", "economics", "literature"]
PETS = ["cat", "dog", "parrot", "rabbit", "tortoise", "goat", "horse"]
PET_NAMES = ["Biscuit", "Pepper", "Ziggy", "Mango", "Olive", "Rusty", "Clover", "Pip", "Luna", "Toffee"]
SHOPS = ["bakery", "bookshop", "cafe", "flower shop", "bicycle shop", "music school", "small hotel"]
COLOURS = ["red", "blue", "green", "yellow", "purple", "orange", "black", "white"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
VEHICLES = ["train", "bus", "ferry", "night train", "plane"]
SIGHTS = ["old harbour", "cathedral", "market", "botanical garden", "castle", "museum", "old bridge"]
FOODS = ["fresh fish", "spicy noodles", "grilled corn", "a bowl of soup", "sweet pastries", "rice cakes"]
DISHES = [("tomato soup", ["tomatoes", "onions", "basil"]), ("apple pie", ["apples", "eggs", "cinnamon"]),
          ("bean stew", ["beans", "carrots", "garlic"]), ("pancakes", ["eggs", "cups of milk", "sugar"]),
          ("fish curry", ["fish fillets", "onions", "coconut milk"]), ("potato salad", ["potatoes", "eggs", "herbs"])]
PREP_VERBS = ["wash", "chop", "peel", "slice", "rinse", "dice"]

EN_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
           "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
EN_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
DE_ONES = ["null", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun", "zehn",
           "elf", "zwölf", "dreizehn", "vierzehn", "fünfzehn", "sechzehn", "siebzehn", "achtzehn", "neunzehn"]
DE_TENS = ["", "", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig"]
NOUNS_EN_DE = [("cats", "Katzen"), ("dogs", "Hunde"), ("birds", "Vögel"), ("apples", "Äpfel"),
               ("books", "Bücher"), ("houses", "Häuser"), ("trees", "Bäume"), ("cars", "Autos"),
               ("children", "Kinder"), ("chairs", "Stühle"), ("stars", "Sterne"), ("boats", "Boote"),
               ("horses", "Pferde"), ("flowers", "Blumen"), ("coins", "Münzen")]
PLACES_EN_DE = [("garden", "Im Garten"), ("house", "Im Haus"), ("city", "In der Stadt"),
                ("forest", "Im Wald"), ("village", "Im Dorf"), ("park", "Im Park"),
                ("harbour", "Im Hafen"), ("school", "In der Schule")]

POSITIVE = ["good", "great", "excellent", "wonderful", "pleasant", "superb", "fantastic", "lovely",
            "enjoyable", "charming"]
NEGATIVE = ["bad", "terrible", "awful", "boring", "dull", "poor", "disappointing", "horrible",
            "unpleasant", "mediocre"]
REVIEW_NOUNS = ["film", "plot", "acting", "music", "ending", "soup", "service", "dessert", "room",
                "view", "staff", "book", "concert", "hotel", "museum", "game", "meal", "trip"]
INTENSIFIERS = ["", "", "very ", "really ", "quite ", "extremely ", "rather "]


# ----------------------------------------------------------------------------- helpers

def _split_of(key: str) -> str:
    """Assign a row key to one split, stably across machines and Python hash seeds."""
    bucket = zlib.crc32(key.encode("utf-8")) % 10
    return "test" if bucket == 0 else "validation" if bucket == 1 else "train"


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _fill(template: str, **slots: str) -> tuple[str, dict[str, tuple[int, int]]]:
    """Format ``template`` and return the character span of every slot it filled."""
    out, spans = [], {}
    for literal, field, _, _ in string.Formatter().parse(template):
        out.append(literal)
        if field is not None:
            start = sum(map(len, out))
            out.append(slots[field])
            spans[field] = (start, start + len(slots[field]))
    return "".join(out), spans


def english_number(n: int) -> str:
    """0 <= n < 1_000_000 in English words, hyphenated tens, no "and" ("three hundred five")."""
    if n < 20:
        return EN_ONES[n]
    if n < 100:
        return EN_TENS[n // 10] + ("-" + EN_ONES[n % 10] if n % 10 else "")
    if n < 1000:
        head, rest = divmod(n, 100)
        return EN_ONES[head] + " hundred" + (" " + english_number(rest) if rest else "")
    head, rest = divmod(n, 1000)
    return english_number(head) + " thousand" + (" " + english_number(rest) if rest else "")


def _german_below_1000(n: int, final: bool) -> str:
    hundreds, rest = divmod(n, 100)
    text = ("ein" if hundreds == 1 else DE_ONES[hundreds]) + "hundert" if hundreds else ""
    if rest == 1:
        return text + ("eins" if final else "ein")
    if rest < 20:
        return text + (DE_ONES[rest] if rest else "")
    unit = "ein" if rest % 10 == 1 else DE_ONES[rest % 10]
    return text + (unit + "und" if rest % 10 else "") + DE_TENS[rest // 10]


def german_number(n: int) -> str:
    """0 <= n < 1_000_000 as one German word: units before tens ("zweiundsiebzig")."""
    if n == 0:
        return "null"
    thousands, rest = divmod(n, 1000)
    text = _german_below_1000(thousands, final=False) + "tausend" if thousands else ""
    return text + (_german_below_1000(rest, final=True) if rest else "")


# ----------------------------------------------------------------------------- documents

def _person(rng: random.Random) -> dict:
    female = rng.random() < 0.5
    return {"first": rng.choice(FEMALE if female else MALE), "last": rng.choice(SURNAMES),
            "pron": "she" if female else "he", "poss": "her" if female else "his"}


def biography(rng: random.Random) -> tuple[list[str], dict]:
    """A chronological life story; returns sentences and facts with character spans (for QA)."""
    p, spouse = _person(rng), _person(rng)
    name, pron, poss = f"{p['first']} {p['last']}", p["pron"], p["poss"]
    born, study_age, work = rng.randint(1900, 1975), rng.randint(17, 21), rng.randint(2, 15)
    married = born + study_age + rng.randint(4, 12)
    moved = married + rng.randint(2, 12)
    job, spouse_job, cities = rng.choice(JOBS), rng.choice(JOBS), rng.sample(CITIES, 4)
    facts = {"name": name, "born_in": cities[0], "birth_year": str(born), "studied_in": cities[1],
             "subject": rng.choice(SUBJECTS), "job": job, "org": rng.choice(ORGS),
             "spouse": f"{spouse['first']} {spouse['last']}", "pet_name": rng.choice(PET_NAMES),
             "pet": rng.choice(PETS), "later_city": cities[2], "shop": rng.choice(SHOPS)}
    opened = rng.random() < 0.7
    plan = [("{name} was born in {born_in} in {birth_year}.", True),
            (f"As a child, {pron} had a {{pet}} called {{pet_name}}.", rng.random() < 0.6),
            (f"At the age of {english_number(study_age)}, {pron} moved to {{studied_in}} to study {{subject}}.", True),
            (f"After {poss} studies, {pron} worked as {_article(job)} {{job}} at {{org}} for "
             f"{english_number(work)} years.", True),
            (f"In {married}, {pron} married {{spouse}}, {_article(spouse_job)} {spouse_job} from {cities[3]}.",
             rng.random() < 0.7),
            (f"In {moved}, {pron} moved to {{later_city}} and opened a {{shop}}.", opened)]
    sentences, spans = _render(plan, facts)
    youngest, oldest = moved - born + 1, min(moved - born + 30, 2024 - born)
    if youngest > oldest or rng.random() < 0.3:
        home = cities[2] if opened else cities[1]
        sentences.append(f"{pron.capitalize()} still lives in {home} today.")
    else:
        age = rng.randint(youngest, oldest)
        sentences.append(f"{pron.capitalize()} died in {born + age} at the age of {english_number(age)}.")
    return sentences, {"facts": facts, "spans": spans}


def _render(plan: list[tuple[str, bool]], facts: dict) -> tuple[list[str], dict]:
    sentences, spans, offset = [], {}, 0
    for template, keep in plan:
        if keep:
            text, local = _fill(template, **facts)
            spans.update({k: (offset + a, offset + b) for k, (a, b) in local.items()})
            sentences.append(text)
            offset += len(text) + 1  # sentences are joined with one space
    return sentences, spans


def travel_diary(rng: random.Random) -> list[str]:
    p = _person(rng)
    days = rng.randint(3, 6)
    stops = rng.sample(CITIES, days)
    sentences = [f"{p['first']} {p['last']} travelled for {english_number(days)} days."]
    for i in range(days - 1):
        sentences.append(f"On {DAYS[i]}, {p['pron']} took the {rng.choice(VEHICLES)} from {stops[i]} "
                         f"to {stops[i + 1]}.")
        if rng.random() < 0.6:
            sentences.append(f"In {stops[i + 1]}, {p['pron']} visited the {rng.choice(SIGHTS)} and ate "
                             f"{rng.choice(FOODS)}.")
    sentences.append(f"On {DAYS[days - 1]}, {p['pron']} returned home to {stops[0]}.")
    return sentences


def recipe(rng: random.Random) -> list[str]:
    dish, (a, b, c) = rng.choice(DISHES)
    verb_a, verb_b = rng.sample(PREP_VERBS, 2)
    return [f"This is how {rng.choice(FEMALE + MALE)} makes {dish}.",
            f"You need {english_number(rng.randint(2, 9))} {a}, {english_number(rng.randint(2, 9))} {b} "
            f"and some {c}.",
            f"First, {verb_a} the {a}.",
            f"Then {verb_b} the {b} and put everything in a large pot.",
            f"Cook it for {english_number(5 * rng.randint(2, 9))} minutes.",
            f"Finally, add the {c} and serve the {dish} {rng.choice(['hot', 'warm', 'at once'])}."]


def _document(rng: random.Random) -> dict:
    draw = rng.random()
    if draw < 0.6:
        sentences, kind = biography(rng)[0], "biography"
    elif draw < 0.8:
        sentences, kind = travel_diary(rng), "travel"
    else:
        sentences, kind = recipe(rng), "recipe"
    text = " ".join(sentences)
    return {"key": text, "text": text, "sentences": sentences, "kind": kind}


# ----------------------------------------------------------------------------- translation

def _number(rng: random.Random) -> int:
    digits = rng.choice([1, 2, 2, 3, 3, 4, 5, 6])
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10 ** digits - 1)


def _translation(rng: random.Random) -> dict:
    n, form = _number(rng), rng.randrange(5)
    en, de = english_number(n), german_number(n)
    if n < 2 or n % 100 == 1:
        form = 0  # bare numbers only: German would inflect "ein" before a noun
    noun_en, noun_de = rng.choice(NOUNS_EN_DE)
    place_en, place_de = rng.choice(PLACES_EN_DE)
    source, target = [(en, de), (f"{en} {noun_en}", f"{de} {noun_de}"),
                      (f"I have {en} {noun_en}.", f"Ich habe {de} {noun_de}."),
                      (f"There are {en} {noun_en} in the {place_en}.", f"{place_de} gibt es {de} {noun_de}."),
                      (f"We saw {en} {noun_en} yesterday.", f"Wir haben gestern {de} {noun_de} gesehen.")][form]
    if form in (2, 3, 4):
        source = source[0].upper() + source[1:]
    return {"key": f"n{n}" if n >= 100 else "", "source": source, "target": target}


# ----------------------------------------------------------------------------- sentiment

LIKE_VERBS = {True: ["liked", "loved", "enjoyed"], False: ["hated", "disliked"]}
NEGATED_VERBS = {"liked": "did not like", "loved": "did not love", "enjoyed": "did not enjoy",
                 "hated": "did not hate", "disliked": "did not dislike"}


def _clause(rng: random.Random, positive: bool) -> str:
    """One clause whose polarity is ``positive``; half are negated, which flips the word's polarity."""
    noun, negate = rng.choice(REVIEW_NOUNS), rng.random() < 0.5
    word_positive = positive != negate
    if rng.random() < 0.3:
        verb = rng.choice(LIKE_VERBS[word_positive])
        return f"I {NEGATED_VERBS[verb] if negate else verb} the {noun}"
    adjective = rng.choice(POSITIVE if word_positive else NEGATIVE)
    # "not very good" reads naturally, "not extremely awful" does not
    intensifier = rng.choice(INTENSIFIERS[:4] if word_positive else [""]) if negate else rng.choice(INTENSIFIERS)
    return f"the {noun} was {'not ' if negate else ''}{intensifier}{adjective}"


def _sentiment(rng: random.Random) -> dict:
    label = rng.randrange(2)
    if rng.random() < 0.3:
        text = f"{_clause(rng, not label)}, but {_clause(rng, bool(label))}."
    else:
        text = _clause(rng, bool(label)) + rng.choice([".", ".", "!"])
    text = text[0].upper() + text[1:]
    return {"key": text, "text": text, "label": label}


# ----------------------------------------------------------------------------- nli

NLI_SLOTS: dict[str, tuple[list[str], list[str], str, str]] = {
    # slot: (values, premise clauses, hypothesis, negated hypothesis)
    "city": (CITIES, ["{n} lives in {v}", "{n}'s home is in {v}"],
             "{n} lives in {v}.", "{n} does not live in {v}."),
    "job": (JOBS, ["{n} works as {a} {v}", "{n} is {a} {v}"], "{n} is {a} {v}.", "{n} is not {a} {v}."),
    "colour": (COLOURS, ["{n}'s favourite colour is {v}", "{n} likes {v} best"],
               "{n}'s favourite colour is {v}.", "{n}'s favourite colour is not {v}."),
    "age": ([english_number(a) for a in range(18, 90)], ["{n} is {v} years old", "{n} turned {v} this year"],
            "{n} is {v} years old.", "{n} is not {v} years old."),
    "birthplace": (CITIES, ["{n} was born in {v}", "{n} comes from {v}"],
                   "{n} was born in {v}.", "{n} was not born in {v}."),
}


def _nli_facts(rng: random.Random, people: list[str], person: str, slot: str, value: str, label: int) -> list:
    """2-3 (person, slot, value) facts; only entailment / contradiction state (person, slot)."""
    others = [(p, s) for p in people for s in NLI_SLOTS if (p, s) != (person, slot)]
    count = rng.randint(1, 2) + (label == 1)
    facts = [(p, s, rng.choice(NLI_SLOTS[s][0])) for p, s in rng.sample(others, count)]
    same_values = [(p, s) for p, s in others if NLI_SLOTS[s][0] is NLI_SLOTS[slot][0]]
    if label == 1 and same_values and rng.random() < 0.5:  # the value appears, about another slot or person
        facts[0] = (*rng.choice(same_values), value)
    return facts


def _nli(rng: random.Random) -> dict:
    label = rng.randrange(3)
    people = rng.sample(FEMALE + MALE, rng.choice([1, 2]))
    person, slot, negated = people[0], rng.choice(list(NLI_SLOTS)), rng.random() < 0.5
    values, _, positive, negative = NLI_SLOTS[slot]
    value = rng.choice(values)
    facts = _nli_facts(rng, people, person, slot, value, label)
    if label != 1:  # state the hypothesis's fact: the same value when the labels agree with the polarity
        same = (label == 0) != negated
        stated = value if same else rng.choice([v for v in values if v != value])
        facts.insert(rng.randrange(len(facts) + 1), (person, slot, stated))
    clauses = [rng.choice(NLI_SLOTS[s][1]).format(n=p, v=v, a=_article(v)) for p, s, v in facts]
    premise = ", ".join(clauses[:-1]) + " and " + clauses[-1] + "."
    hypothesis = (negative if negated else positive).format(n=person, v=value, a=_article(value))
    return {"key": premise + hypothesis, "premise": premise, "hypothesis": hypothesis, "label": label}


# ----------------------------------------------------------------------------- ner

def _entity(rng: random.Random, kind: str) -> list[tuple[str, str]]:
    if kind == "PER":
        p = _person(rng)
        text = rng.choice([p["first"], f"{p['first']} {p['last']}", p["last"]])
    else:
        text = rng.choice(CITIES if kind == "LOC" else ORGS)
    words = text.split()
    return [(w, ("B-" if i == 0 else "I-") + kind) for i, w in enumerate(words)]


NER_TEMPLATES = [
    "PER was born in LOC in {year} .", "PER moved from LOC to LOC .", "PER works for ORG in LOC .",
    "In {year} , PER joined ORG .", "ORG opened a new office in LOC .", "PER met PER in LOC .",
    "According to PER , ORG will hire {num} new workers .", "Flights from LOC to LOC are run by ORG .",
    "PER and PER visited LOC last spring .", "The mayor of LOC thanked PER for the new park .",
    "ORG moved its headquarters to LOC after {num} years .", "PER told reporters in LOC that ORG is growing .",
]


def _ner(rng: random.Random) -> dict:
    pairs: list[tuple[str, str]] = []
    for word in rng.choice(NER_TEMPLATES).split():
        if word in ("PER", "LOC", "ORG"):
            pairs.extend(_entity(rng, word))
        else:
            word = word.format(year=rng.randint(1950, 2024), num=english_number(rng.randint(2, 90)))
            pairs.extend((w, "O") for w in word.split())
    tokens = [w for w, _ in pairs]
    return {"key": " ".join(tokens), "tokens": tokens, "ner_tags": [NER_LABELS.index(t) for _, t in pairs]}


# ----------------------------------------------------------------------------- qa

QA_QUESTIONS = {"born_in": "Where was {name} born?", "birth_year": "In which year was {name} born?",
                "studied_in": "Where did {name} study?", "subject": "What did {name} study?",
                "job": "What did {name} work as?", "org": "Where did {name} work as {a} {job}?",
                "spouse": "Whom did {name} marry?", "pet_name": "What was the name of {name}'s pet?",
                "shop": "What did {name} open in {later_city}?"}


def _qa(rng: random.Random) -> list[dict]:
    sentences, info = biography(rng)
    context, facts, spans = " ".join(sentences), info["facts"], info["spans"]
    rows = []
    for slot in rng.sample(list(QA_QUESTIONS), 3):
        name = facts["name"] if rng.random() < 0.75 else f"{rng.choice(FEMALE + MALE)} {rng.choice(SURNAMES)}"
        question = QA_QUESTIONS[slot].format(**{**facts, "name": name, "a": _article(facts["job"])})
        answerable = slot in spans and name == facts["name"]
        start = spans[slot][0] if answerable else None
        answers = {"text": [facts[slot]] if answerable else [], "answer_start": [start] if answerable else []}
        rows.append({"key": context, "title": facts["name"], "context": context, "question": question,
                     "answers": answers})
    return rows


# ----------------------------------------------------------------------------- datasets

def task_features(task: str) -> datasets.Features:
    if task == "documents":
        return datasets.Features({"text": datasets.Value("string"), "kind": datasets.Value("string"),
                                  "sentences": datasets.Sequence(datasets.Value("string"))})
    if task == "translation":
        return datasets.Features({"source": datasets.Value("string"), "target": datasets.Value("string")})
    if task == "sentiment":
        return datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=SENTIMENT_LABELS)})
    if task == "nli":
        return datasets.Features({"premise": datasets.Value("string"), "hypothesis": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=NLI_LABELS)})
    if task == "ner":
        return datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "ner_tags": datasets.Sequence(datasets.ClassLabel(names=NER_LABELS))})
    answers = {"text": datasets.Sequence(datasets.Value("string")),
               "answer_start": datasets.Sequence(datasets.Value("int32"))}
    return datasets.Features({"id": datasets.Value("string"), "title": datasets.Value("string"),
                              "context": datasets.Value("string"), "question": datasets.Value("string"),
                              "answers": answers})


_GENERATORS: dict[str, Callable[[random.Random], dict | list[dict]]] = {
    "documents": _document, "translation": _translation, "sentiment": _sentiment,
    "nli": _nli, "ner": _ner, "qa": _qa}


def generate_records(task: str, split: str = "train", seed: int = 0, size: int | None = None) -> list[dict]:
    """The rows of one task and split as plain dicts (columns as in ``default_corpus``)."""
    if task not in TASKS:
        raise UnknownCorpusTaskError(f"unknown embedded corpus task {task!r}; choose one of {', '.join(TASKS)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    size = DEFAULT_SIZES[task][split] if size is None else size
    rng, rows, tries = random.Random(f"lineage/{task}/{split}/{seed}"), [], 0
    while len(rows) < size:
        tries += 1
        if tries > 100 * size + 1000:
            raise RuntimeError(f"could not draw {size} {split} rows for {task!r}")
        made = _GENERATORS[task](rng)
        for row in made if isinstance(made, list) else [made]:
            key = row.pop("key")
            if (split == "train" and not key) or (key and _split_of(key) == split):
                rows.append(row)
    rows = rows[:size]
    if task == "qa":
        for i, row in enumerate(rows):
            row["id"] = f"{split}-{seed}-{i}"
    return rows


def default_corpus(task: str, split: str = "train", seed: int = 0, size: int | None = None) -> datasets.Dataset:
    """One task of the embedded corpus as a ``datasets.Dataset`` with typed features (ClassLabel
    labels, so ``dataset.features["label"].names`` gives the label names)."""
    features = task_features(task)
    rows = generate_records(task, split, seed, size)
    return datasets.Dataset.from_list([{k: row[k] for k in features} for row in rows], features=features)


def default_corpus_dict(task: str, seed: int = 0, sizes: dict[str, int] | None = None) -> datasets.DatasetDict:
    """All three splits of one task."""
    sizes = sizes or {}
    return datasets.DatasetDict({s: default_corpus(task, s, seed, sizes.get(s)) for s in SPLITS})


def tokenizer_training_texts(seed: int = 0, size: int | None = None) -> list[str]:
    """Text covering every task's vocabulary (documents, both languages, reviews, NLI, NER), for
    training one tokenizer that serves all the embedded tasks."""
    texts = [r["text"] for r in generate_records("documents", "train", seed, size)]
    for row in generate_records("translation", "train", seed, size and size * 4):
        texts += [row["source"], row["target"]]
    texts += [r["text"] for r in generate_records("sentiment", "train", seed, size)]
    texts += [f"{r['premise']} {r['hypothesis']}" for r in generate_records("nli", "train", seed, size)]
    texts += [" ".join(r["tokens"]) for r in generate_records("ner", "train", seed, size)]
    return texts


__all__ = ["TASKS", "SPLITS", "UnknownCorpusTaskError", "DEFAULT_SIZES", "SENTIMENT_LABELS", "NLI_LABELS", "NER_LABELS",
           "default_corpus", "default_corpus_dict", "generate_records", "tokenizer_training_texts",
           "english_number", "german_number", "biography"]
