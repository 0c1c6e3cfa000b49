"""Local `evaluate` metric modules (accuracy, f1, matthews_correlation, entity_f1, pearsonr, spearmanr, mse, bleu, chrf,
perplexity, squad) that load offline: `evaluate.load(metric_path("bleu"))`, or `load_metric("bleu")`. A bare
`evaluate.load("bleu")` would fetch the module from the Hub; these files carry the same interface and need no network.
Imports nothing of `train` but itself: the commands load the metrics and hand the engine a `metrics_fn`
(docs/design.md, "Layers")."""

from importlib.resources import files

METRICS = ("accuracy", "f1", "matthews_correlation", "entity_f1", "pearsonr", "spearmanr", "mse", "bleu", "chrf",
           "perplexity", "squad")


def metric_path(name: str) -> str:
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; local metrics: {', '.join(METRICS)}")
    return str(files(__name__) / f"{name}.py")  # a file of this package: evaluate loads it by path


def load_metric(name: str):
    """The local `evaluate` module `name`, loaded without the network; it keeps its inputs in memory (no cache file
    and lock in the user's Hugging Face cache, none left behind by a refused input)."""
    import evaluate

    return evaluate.load(metric_path(name), keep_in_memory=True)


__all__ = ["METRICS", "load_metric", "metric_path"]
