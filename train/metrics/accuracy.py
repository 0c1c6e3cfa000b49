"""Accuracy: the fraction of predictions equal to their reference (offline twin of the Hub `accuracy`)."""

import datasets
import evaluate


class Accuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Fraction of predictions equal to the reference label.",
            citation="",
            inputs_description="predictions: list of int; references: list of int; normalize: bool (default True)",
            features=datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions, references, normalize=True):
        if not references:
            raise ValueError("accuracy: predictions and references are empty; accuracy needs at least one example")
        correct = sum(int(p == r) for p, r in zip(predictions, references))
        return {"accuracy": correct / len(references) if normalize else float(correct)}
