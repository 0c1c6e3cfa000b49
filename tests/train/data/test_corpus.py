"""The embedded corpus: determinism, disjoint splits, correct German numbers, and labels that a rule
reading the text recovers exactly (so the tasks are learnable and free of label noise)."""

import re
import time
from collections import Counter

import pytest

from train.data.corpus import (
    NER_LABELS,
    NLI_LABELS,
    SPLITS,
    TASKS,
    default_corpus,
    default_corpus_dict,
    english_number,
    generate_records,
    german_number,
)


def test_number_words():
    cases = {0: ("zero", "null"), 1: ("one", "eins"), 16: ("sixteen", "sechzehn"), 17: ("seventeen", "siebzehn"),
             21: ("twenty-one", "einundzwanzig"), 30: ("thirty", "dreißig"), 72: ("seventy-two", "zweiundsiebzig"),
             101: ("one hundred one", "einhunderteins"), 345: ("three hundred forty-five", "dreihundertfünfundvierzig"),
             1001: ("one thousand one", "eintausendeins"), 21000: ("twenty-one thousand", "einundzwanzigtausend"),
             999999: ("nine hundred ninety-nine thousand nine hundred ninety-nine",
                      "neunhundertneunundneunzigtausendneunhundertneunundneunzig")}
    for n, (en, de) in cases.items():
        assert (english_number(n), german_number(n)) == (en, de)


def test_deterministic_and_seeded():
    for task in TASKS:
        first = generate_records(task, "validation", seed=3, size=20)
        assert first == generate_records(task, "validation", seed=3, size=20)
        assert first != generate_records(task, "validation", seed=4, size=20)


def test_splits_are_disjoint():
    keys = {"sentiment": lambda r: r["text"], "nli": lambda r: r["premise"] + r["hypothesis"],
            "documents": lambda r: r["text"], "qa": lambda r: r["context"]}
    for task, key in keys.items():
        seen = {s: {key(r) for r in generate_records(task, s, size=300)} for s in SPLITS}
        assert not seen["train"] & seen["test"] and not seen["train"] & seen["validation"]
    numbers = {s: {english_to_int(r["source"]) for r in generate_records("translation", s, size=2000)}
               for s in SPLITS}
    assert not numbers["train"] & numbers["test"] and not numbers["train"] & numbers["validation"] - set(range(100))
    assert min(numbers["test"]) >= 100 and min(numbers["train"]) < 100


WORD_VALUES = {w: i for i, w in enumerate(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
                                            "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen",
                                            "sixteen", "seventeen", "eighteen", "nineteen"])}
WORD_VALUES.update({w: 10 * i for i, w in enumerate(["twenty", "thirty", "forty", "fifty", "sixty", "seventy",
                                                      "eighty", "ninety"], 2)})


def english_to_int(text: str) -> int:
    """The number written in words inside an English source sentence."""
    total = current = 0
    for word in re.split(r"[ -]", text.lower().rstrip(".")):
        if word in WORD_VALUES:
            current += WORD_VALUES[word]
        elif word == "hundred":
            current *= 100
        elif word == "thousand":
            total, current = (total + current) * 1000, 0
    return total + current


def test_translation_targets_hold_the_german_number():
    for row in generate_records("translation", "train", size=1000):
        n = english_to_int(row["source"])
        assert german_number(n) in row["target"].rstrip(".").split(), row


def test_documents_are_coherent():
    rows = generate_records("documents", "train", size=300)
    assert {r["kind"] for r in rows} == {"biography", "travel", "recipe"}
    for row in rows:
        assert " ".join(row["sentences"]) == row["text"] and len(row["sentences"]) >= 4
        if row["kind"] == "biography":
            years = [int(y) for y in re.findall(r"\b(1[89]\d\d|20\d\d)\b", row["text"])]
            assert years == sorted(years), row["text"]
        if row["kind"] == "travel":
            legs = re.findall(r"from (.+?) to (.+?)\.", row["text"])
            assert all(a[1] == b[0] for a, b in zip(legs, legs[1:])), row["text"]
        if row["kind"] == "recipe":
            assert row["sentences"][2].startswith("First") and row["sentences"][-1].startswith("Finally")


POSITIVE_WORDS = {"good", "great", "excellent", "wonderful", "pleasant", "superb", "fantastic", "lovely",
                  "enjoyable", "charming", "liked", "loved", "enjoyed", "like", "love", "enjoy"}


def sentiment_rule(text: str) -> int:
    """Polarity of the last clause: its word's polarity, flipped by 'not'."""
    clause = text.lower().rstrip(".!").split(", but ")[-1].split()
    word_positive = any(w in POSITIVE_WORDS for w in clause)
    return int(word_positive != ("not" in clause))


def test_sentiment_labels_follow_negation_and_contrast():
    rows = generate_records("sentiment", "train", size=3000)
    assert all(sentiment_rule(r["text"]) == r["label"] for r in rows)
    assert 0.45 < sum(r["label"] for r in rows) / len(rows) < 0.55
    assert any(", but " in r["text"] for r in rows) and any(" not " in r["text"] for r in rows)


NLI_CLAUSES = [(r"(\w+) lives in (.+)", "city"), (r"(\w+)'s home is in (.+)", "city"),
               (r"(\w+) works as an? (.+)", "job"), (r"(\w+) is an? (.+)", "job"),
               (r"(\w+)'s favourite colour is (.+)", "colour"), (r"(\w+) likes (.+) best", "colour"),
               (r"(\w+) is (.+) years old", "age"), (r"(\w+) turned (.+) this year", "age"),
               (r"(\w+) was born in (.+)", "birthplace"), (r"(\w+) comes from (.+)", "birthplace")]
NLI_HYPOTHESES = [(r"(\w+) (does not live|lives) in (.+)", "city"), (r"(\w+) is (not )?an? (.+)", "job"),
                  (r"(\w+)'s favourite colour is (not )?(.+)", "colour"), (r"(\w+) is (not )?(.+) years old", "age"),
                  (r"(\w+) was (not )?born in (.+)", "birthplace")]


def nli_rule(premise: str, hypothesis: str) -> int:
    facts = {}
    for clause in re.split(r", | and ", premise.rstrip(".")):
        for pattern, slot in NLI_CLAUSES:
            if m := re.fullmatch(pattern, clause):
                facts[(m.group(1), slot)] = m.group(2)
                break
        else:
            raise AssertionError(f"unparsed clause {clause!r}")
    for pattern, slot in NLI_HYPOTHESES:
        if m := re.fullmatch(pattern, hypothesis.rstrip(".")):
            person, negated, value = m.group(1), bool(m.group(2)) and m.group(2) != "lives", m.group(3)
            if (person, slot) not in facts:
                return NLI_LABELS.index("neutral")
            holds = (facts[(person, slot)] == value) != negated
            return NLI_LABELS.index("entailment" if holds else "contradiction")
    raise AssertionError(f"unparsed hypothesis {hypothesis!r}")


def test_nli_labels_follow_from_the_facts_and_hypotheses_alone_say_nothing():
    rows = generate_records("nli", "train", size=6000)
    assert all(nli_rule(r["premise"], r["hypothesis"]) == r["label"] for r in rows)
    counts = Counter(r["label"] for r in rows)
    assert all(abs(counts[label] / len(rows) - 1 / 3) < 0.03 for label in range(3))
    for negated in (True, False):  # hypothesis-only cue: negation
        labels = Counter(r["label"] for r in rows if (" not " in r["hypothesis"]) == negated)
        assert max(labels.values()) / sum(labels.values()) < 0.40
    premise_lengths = {label: sum(len(r["premise"]) for r in rows if r["label"] == label) / counts[label]
                       for label in range(3)}
    assert max(premise_lengths.values()) - min(premise_lengths.values()) < 3


def test_ner_tags_are_well_formed():
    rows = generate_records("ner", "train", size=2000)
    tags_seen = set()
    for row in rows:
        tags = [NER_LABELS[t] for t in row["ner_tags"]]
        assert len(tags) == len(row["tokens"])
        for previous, tag in zip(["O"] + tags, tags):
            assert not tag.startswith("I-") or previous[2:] == tag[2:]
        tags_seen.update(tags)
    assert tags_seen == set(NER_LABELS)
    as_person = {r["tokens"][i] for r in rows for i, t in enumerate(r["ner_tags"]) if NER_LABELS[t] == "B-PER"}
    as_place = {r["tokens"][i] for r in rows for i, t in enumerate(r["ner_tags"]) if NER_LABELS[t] == "B-LOC"}
    assert {"Florence", "Sydney"} <= as_person & as_place  # only context tells them apart


def test_qa_spans_match_and_some_are_unanswerable():
    rows = generate_records("qa", "train", size=900)
    unanswerable = 0
    for row in rows:
        texts, starts = row["answers"]["text"], row["answers"]["answer_start"]
        unanswerable += not texts
        for text, start in zip(texts, starts):
            assert row["context"][start:start + len(text)] == text
    assert 0.2 < unanswerable / len(rows) < 0.45
    assert len({r["id"] for r in rows}) == len(rows)


def test_datasets_have_typed_features_and_are_fast():
    start = time.perf_counter()
    splits = default_corpus_dict("nli")
    assert time.perf_counter() - start < 20
    assert splits["train"].features["label"].names == NLI_LABELS
    assert [len(splits[s]) for s in SPLITS] == [20000, 1000, 1000]
    ner = default_corpus("ner", "test", size=10)
    assert ner.features["ner_tags"].feature.names == NER_LABELS
    qa = default_corpus("qa", "validation", size=5)
    assert set(qa.column_names) == {"id", "title", "context", "question", "answers"}


def test_unknown_task_and_split():
    with pytest.raises(ValueError, match="unknown embedded corpus task 'poetry'"):
        default_corpus("poetry")
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        default_corpus("nli", "dev")
