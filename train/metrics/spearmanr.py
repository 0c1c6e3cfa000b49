"""Spearman's rank correlation of scores (STS-B's GLUE figure, with `pearsonr`): Pearson's r of the ranks, ties given
the mean of the ranks they span (scipy's `spearmanr`, its p-value aside); the offline twin of the Hub's `spearmanr`.
NaN where it is undefined: a side that is constant, or a NaN (which has no rank; infinities rank as the largest and
smallest values)."""

import itertools
import math

import datasets
import evaluate

from train.metrics.pearsonr import pearson


class Spearmanr(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Spearman rank correlation coefficient between predicted and reference scores.",
            citation="Spearman 1904",
            inputs_description="predictions: list of float; references: list of float",
            features=datasets.Features({"predictions": datasets.Value("float64"),
                                        "references": datasets.Value("float64")}),
        )

    def _compute(self, predictions, references):
        if not references:
            raise ValueError("spearmanr: predictions and references are empty; it needs one example")
        if any(math.isnan(v) for v in [*predictions, *references]):  # NaN has no rank
            return {"spearmanr": math.nan}
        return {"spearmanr": pearson(average_ranks(predictions), average_ranks(references))}


def average_ranks(values: list[float]) -> list[float]:
    """Each value's rank from 1, values that tie sharing the mean of their ranks (scipy's `rankdata`, "average")."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks, below = [0.0] * len(values), 0
    for _, tied in itertools.groupby(order, key=values.__getitem__):
        tied = list(tied)
        for index in tied:
            ranks[index] = below + (len(tied) + 1) / 2
        below += len(tied)
    return ranks
