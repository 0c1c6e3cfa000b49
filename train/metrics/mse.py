"""Mean squared error of scores (the loss a regression head trains on), or its root with `squared=False`: the offline
twin of the Hub's `mse`."""

import math

import datasets
import evaluate


class Mse(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Mean squared error between predicted and reference scores.",
            citation="",
            inputs_description="predictions: list of float; references: list of float; squared: bool (default True; "
                               "False: the root)",
            features=datasets.Features({"predictions": datasets.Value("float64"),
                                        "references": datasets.Value("float64")}),
        )

    def _compute(self, predictions, references, squared=True):
        if not references:
            raise ValueError("mse: predictions and references are empty; it needs one example")
        error = math.fsum((p - r) ** 2 for p, r in zip(predictions, references)) / len(references)
        return {"mse": error if squared else math.sqrt(error)}
