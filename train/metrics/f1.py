"""F1 over class ids, `average` = "binary" (pos_label), "macro" or "micro" (offline twin of the Hub `f1`). As the
reference (sklearn's `f1_score`), the default "binary" refuses more than two classes instead of scoring one of them."""

import datasets
import evaluate

AVERAGES = ("binary", "macro", "micro")


class F1(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Harmonic mean of precision and recall per class, averaged.",
            citation="",
            inputs_description="predictions, references: list of int; average: binary|macro|micro; pos_label: int",
            features=datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions, references, average="binary", pos_label=1, labels=None):
        if average not in AVERAGES:
            raise ValueError(f"f1: average must be one of {', '.join(AVERAGES)}; got {average!r}")
        if not references:
            raise ValueError("f1: predictions and references are empty; F1 needs at least one example")
        if labels is not None and not len(labels):
            raise ValueError("f1: labels is empty; give the classes to average over, or leave labels out")
        present = sorted(set(references) | set(predictions))
        if average == "binary":
            classes = [binary_class(present, pos_label)]
        else:
            classes = present if labels is None else list(labels)
        counts = {c: [0, 0, 0] for c in classes}  # tp, fp, fn
        for p, r in zip(predictions, references):
            if p == r and p in counts:
                counts[p][0] += 1
            else:
                if p in counts:
                    counts[p][1] += 1
                if r in counts:
                    counts[r][2] += 1
        if average == "micro":
            tp, fp, fn = (sum(c[i] for c in counts.values()) for i in range(3))
            return {"f1": f1(tp, fp, fn)}
        scores = [f1(*c) for c in counts.values()]
        return {"f1": sum(scores) / len(scores)}


def f1(tp: int, fp: int, fn: int) -> float:
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def binary_class(present: list[int], pos_label: int) -> int:
    """`pos_label`, checked as the reference (sklearn's `f1_score`) checks it: at most two classes, one of them it."""
    if len(present) > 2:
        raise ValueError(f"f1: average='binary' (the default) takes at most two classes, and predictions and "
                         f"references hold {len(present)} ({', '.join(map(str, present))}); pass average='macro' or "
                         f"'micro' (allowed: {', '.join(AVERAGES)})")
    if len(present) == 2 and pos_label not in present:
        raise ValueError(f"f1: pos_label={pos_label!r} is not one of the classes {present[0]}, {present[1]}")
    return pos_label
