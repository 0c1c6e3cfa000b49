"""SQuAD's exact match and F1 of answer texts, as its official scripts score them (v1.1; v2.0's unanswerable questions:
no gold answer is scored against the empty answer, and the figures of the answerable and unanswerable questions apart,
`has_answer_*` and `no_answer_*`), as fractions: the offline twin of the Hub's `squad_v2` figures."""

import collections
import re
import string

import datasets
import evaluate

_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (the official `normalize_answer`)."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return " ".join(_ARTICLES.sub(" ", text).split())


def token_f1(prediction: str, gold: str) -> float:
    """F1 of the normalized words; 1 when both are empty, 0 when only one is."""
    predicted, wanted = normalize(prediction).split(), normalize(gold).split()
    if not predicted or not wanted:
        return float(predicted == wanted)
    same = sum((collections.Counter(predicted) & collections.Counter(wanted)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(wanted)
    return 2 * precision * recall / (precision + recall)


class Squad(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="SQuAD exact match and F1 of answer texts, the best over each question's gold answers.",
            citation="Rajpurkar et al. 2016, 2018",
            inputs_description="predictions: list of str (empty: no answer); references: list of lists of str "
                               "(empty: unanswerable)",
            features=datasets.Features({"predictions": datasets.Value("string"),
                                        "references": datasets.Sequence(datasets.Value("string"))}),
        )

    def _compute(self, predictions, references):
        if not references:
            raise ValueError("squad: predictions and references are empty; the scores need at least one question")
        scored = {True: [], False: []}  # answerable or not -> (exact, f1) of each such question
        for prediction, answers in zip(predictions, references):
            golds = [answer for answer in answers if normalize(answer)]
            scored[bool(golds)].append((max(float(normalize(prediction) == normalize(gold)) for gold in golds or [""]),
                                        max(token_f1(prediction, gold) for gold in golds or [""])))
        figures = {"exact_match": _mean(scored[True] + scored[False], 0), "f1": _mean(scored[True] + scored[False], 1)}
        if scored[False]:  # v2.0's breakdown, as its official script gives it (HasAns_*, NoAns_*)
            for name, questions in (("has_answer", scored[True]), ("no_answer", scored[False])):
                figures.update({f"{name}_exact_match": _mean(questions, 0), f"{name}_f1": _mean(questions, 1)}
                               if questions else {})
        return figures


def _mean(pairs: list[tuple[float, float]], which: int) -> float:
    return sum(pair[which] for pair in pairs) / len(pairs)
