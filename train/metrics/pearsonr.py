"""Pearson's correlation coefficient of scores (STS-B's GLUE figure, with `spearmanr`): the offline twin of the Hub's
`pearsonr` (scipy's `pearsonr` without its p-value). NaN where r is undefined: a side that is constant (a predictor
that says one score; one pair) or a value that is not finite, as scipy answers."""

import math

import datasets
import evaluate


class Pearsonr(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Pearson correlation coefficient between predicted and reference scores.",
            citation="Pearson 1895",
            inputs_description="predictions: list of float; references: list of float",
            features=datasets.Features({"predictions": datasets.Value("float64"),
                                        "references": datasets.Value("float64")}),
        )

    def _compute(self, predictions, references):
        if not references:
            raise ValueError("pearsonr: predictions and references are empty; it needs one example")
        return {"pearsonr": pearson(predictions, references)}


def pearson(x: list[float], y: list[float]) -> float:
    """r of two sequences of one length, within [-1, 1]; NaN where it is undefined (module docstring)."""
    if not all(map(math.isfinite, [*x, *y])) or len(set(x)) == 1 or len(set(y)) == 1:
        return math.nan
    mean_x, mean_y = math.fsum(x) / len(x), math.fsum(y) / len(y)
    dx, dy = [v - mean_x for v in x], [v - mean_y for v in y]
    spread = math.sqrt(math.fsum(a * a for a in dx) * math.fsum(b * b for b in dy))
    r = math.fsum(a * b for a, b in zip(dx, dy)) / spread
    return max(-1.0, min(1.0, r))  # rounding may step past the bounds
