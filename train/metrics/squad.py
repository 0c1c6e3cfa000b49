"""SQuAD's exact match and F1 of answer texts, as its official scripts score them (v1.1; v2.0's unanswerable questions:
no gold answer is scored against the empty answer, and the figures of the answerable and unanswerable questions apart,
`has_answer_*` and `no_answer_*`; with each question's no-answer score, its `best_*` over thresholds), as fractions: the
offline twin of the Hub's `squad_v2` figures."""

import collections
import math
import re
import string
from fractions import Fraction

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
                               "(empty: unanswerable); no_answer_scores: list of float (optional), "
                               "null_score_diff_threshold: float",
            features=datasets.Features({"predictions": datasets.Value("string"),
                                        "references": datasets.Sequence(datasets.Value("string"))}),
        )

    def _compute(self, predictions, references, no_answer_scores=None, null_score_diff_threshold=0.0):
        """`no_answer_scores`: each question's null minus best span score (the official script's na-prob file, in
        logits); with them a question scored above `null_score_diff_threshold` gets the empty answer, and data with
        unanswerable questions also gets `best_exact` and `best_f1` over every threshold, with the threshold."""
        if not references:
            raise ValueError("squad: predictions and references are empty; the scores need at least one question")
        if no_answer_scores is not None and len(no_answer_scores) != len(predictions):
            raise ValueError(f"squad: {len(no_answer_scores)} no_answer_scores for {len(predictions)} predictions")
        if math.isnan(null_score_diff_threshold):
            raise ValueError("squad: null_score_diff_threshold must be a number, got nan")
        golds = [[answer for answer in answers if normalize(answer)] for answers in references]
        spans = [_score(prediction, gold) for prediction, gold in zip(predictions, golds)]
        scored = spans if no_answer_scores is None else [  # the official apply_no_ans_threshold
            _score("", gold) if difference > null_score_diff_threshold else span
            for span, gold, difference in zip(spans, golds, no_answer_scores)]
        apart = {answerable: [pair for pair, gold in zip(scored, golds) if bool(gold) == answerable]
                 for answerable in (True, False)}
        figures = {"exact_match": _mean(apart[True] + apart[False], 0), "f1": _mean(apart[True] + apart[False], 1)}
        if not apart[False]:
            return figures
        for name, questions in (("has_answer", apart[True]), ("no_answer", apart[False])):  # v2.0's HasAns_*, NoAns_*
            figures.update({f"{name}_exact_match": _mean(questions, 0), f"{name}_f1": _mean(questions, 1)}
                           if questions else {})
        if no_answer_scores is not None:
            for name, which in (("exact", 0), ("f1", 1)):
                figures[f"best_{name}"], figures[f"best_{name}_thresh"] = best_threshold(
                    [span[which] for span in spans], [float(not gold) for gold in golds], no_answer_scores)
        return figures


def _score(prediction: str, golds: list[str]) -> tuple[float, float]:
    """Exact match and F1 of `prediction`, each the best over the gold answers (none: the empty answer)."""
    return (max(float(normalize(prediction) == normalize(gold)) for gold in golds or [""]),
            max(token_f1(prediction, gold) for gold in golds or [""]))


def best_threshold(answered: list[float], empty: list[float], differences: list[float]) -> tuple[float, float]:
    """The official script's `find_best_thresh`: the best mean score and its threshold t, each question scoring
    `answered` where its difference is at most t, else `empty`; questions of one difference switch together (so
    the rule at t gives the score), and the lowest best t is kept (below every difference: all empty); summed exactly.
    NaN where a difference is NaN."""
    if any(math.isnan(difference) for difference in differences):
        return math.nan, math.nan
    order = sorted(range(len(differences)), key=differences.__getitem__)
    current = best = sum(map(Fraction, empty))
    threshold = math.nextafter(differences[order[0]], -math.inf)
    for place, question in enumerate(order):
        current += Fraction(answered[question]) - Fraction(empty[question])
        last = place + 1 == len(order) or differences[order[place + 1]] != differences[question]
        if last and current > best:
            best, threshold = current, differences[question]
    return float(best / len(differences)), threshold


def _mean(pairs: list[tuple[float, float]], which: int) -> float:
    return sum(pair[which] for pair in pairs) / len(pairs)
