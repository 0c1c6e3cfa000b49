"""Perplexity from per-token (or per-batch mean) negative log-likelihoods in nats: exp(weighted mean).

Unlike the Hub `perplexity` module, which downloads a model, this one takes the losses a training run
already computed, so it runs offline and on any model."""

import math

import datasets
import evaluate


class Perplexity(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="exp of the mean negative log-likelihood (natural log), optionally token-weighted.",
            citation="",
            inputs_description="losses: list of float (nats); weights: optional list of float (e.g. token counts)",
            features=datasets.Features({"losses": datasets.Value("float64")}),
        )

    def _compute(self, losses, weights=None):
        if not losses:
            raise ValueError("perplexity: losses is empty; perplexity needs at least one loss")
        weights = [1.0] * len(losses) if weights is None else list(weights)
        if len(weights) != len(losses):
            raise ValueError(f"perplexity: weights has {len(weights)} values for {len(losses)} losses; give one weight "
                             "per loss, or leave weights out")
        if min(weights) < 0 or sum(weights) <= 0:
            raise ValueError(f"perplexity: weights must be non-negative with a positive sum; got a smallest weight of "
                             f"{min(weights)} and a sum of {sum(weights)}")
        mean = sum(loss * weight for loss, weight in zip(losses, weights, strict=True)) / sum(weights)
        return {"perplexity": math.exp(min(mean, 700.0)), "mean_nll": mean}
