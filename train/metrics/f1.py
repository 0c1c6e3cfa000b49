"""F1 over class ids, `average` = "binary" (pos_label), "macro" or "micro" (offline twin of the Hub `f1`)."""

import datasets
import evaluate


class F1(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Harmonic mean of precision and recall per class, averaged.",
            citation="",
            inputs_description="predictions, references: list of int; average: binary|macro|micro; pos_label: int",
            features=datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions, references, average="binary", pos_label=1, labels=None):
        classes = sorted(set(references) | set(predictions)) if labels is None else list(labels)
        if average == "binary":
            classes = [pos_label]
        counts = {c: [0, 0, 0] for c in classes}  # tp, fp, fn
        for p, r in zip(predictions, references):
            if p == r and p in counts:
                counts[p][0] += 1
            else:
                if p in counts:
                    counts[p][1] += 1
                if r in counts:
                    counts[r][2] += 1

        def f1(tp, fp, fn):
            return 2 * tp / (2 * tp + fp + fn) if tp else 0.0

        if average == "micro":
            tp, fp, fn = (sum(c[i] for c in counts.values()) for i in range(3))
            return {"f1": f1(tp, fp, fn)}
        if average not in ("binary", "macro"):
            raise ValueError(f"average must be binary, macro or micro, got {average!r}")
        scores = [f1(*c) for c in counts.values()]
        return {"f1": sum(scores) / max(len(scores), 1)}
