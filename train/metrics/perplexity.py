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
        weights = [1.0] * len(losses) if weights is None else weights
        mean = sum(loss * weight for loss, weight in zip(losses, weights)) / max(sum(weights), 1e-12)
        return {"perplexity": math.exp(min(mean, 700.0)), "mean_nll": mean}
