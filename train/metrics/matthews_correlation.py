"""Matthews correlation coefficient of class ids (Gorodkin's multi-class form; CoLA's GLUE metric): the offline twin
of the Hub's `matthews_correlation`, 0 where it is undefined (one class predicted or present), as sklearn answers."""

import collections
import math

import datasets
import evaluate


class MatthewsCorrelation(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Matthews correlation coefficient between predicted and reference class ids.",
            citation="Matthews 1975; Gorodkin 2004",
            inputs_description="predictions: list of int; references: list of int",
            features=datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions, references):
        if not references:
            raise ValueError("matthews_correlation: predictions and references are empty; it needs one example")
        total, correct = len(references), sum(int(p == r) for p, r in zip(predictions, references))
        predicted, true = collections.Counter(predictions), collections.Counter(references)
        covariance = correct * total - sum(predicted[k] * true[k] for k in predicted.keys() | true.keys())
        spread = ((total ** 2 - sum(v * v for v in predicted.values()))
                  * (total ** 2 - sum(v * v for v in true.values())))
        return {"matthews_correlation": covariance / math.sqrt(spread) if spread else 0.0}
