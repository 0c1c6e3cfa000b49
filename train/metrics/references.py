"""The reference streams sacrebleu scores against, shared by the `bleu` and `chrf` metric modules."""


def reference_streams(metric: str, predictions: list[str], references: list[list[str]]) -> list[list[str]]:
    """`references` (one list per prediction) as sacrebleu's streams (one list per reference position), or a
    `ValueError` naming `metric` and the argument: no predictions, a prediction without a reference, or predictions
    with different numbers of references."""
    if not predictions:
        raise ValueError(f"{metric}: predictions and references are empty; {metric} needs at least one prediction")
    widths = sorted({len(r) for r in references})
    if widths[0] == 0:
        raise ValueError(f"{metric}: references holds an empty list; every prediction needs at least one reference")
    if len(widths) > 1:
        raise ValueError(f"{metric}: references holds lists of {', '.join(map(str, widths))} references; every "
                         "prediction needs the same number (sacrebleu's reference streams)")
    return [[r[i] for r in references] for i in range(widths[0])]
