"""Entity-level precision, recall and F1 of IOB tag sequences as CoNLL's `conlleval` (and `seqeval`'s default)
counts them: an entity starts at B-X, or at I-X after O or another type, and ends where the next tag does not continue
it; an entity counts when type, start and end all match. The offline twin of the Hub's `seqeval` overall figures."""

import datasets
import evaluate


def entities(tags: list[str]) -> set[tuple[str, int, int]]:
    """The (type, first, last) of each entity of one sentence's tags."""
    found, start, kind = set(), None, None
    for position, tag in enumerate([*tags, "O"]):
        prefix, _, label = tag.partition("-") if tag != "O" else ("O", "", "")
        if start is not None and (prefix != "I" or label != kind):
            found.add((kind, start, position - 1))
            start = None
        if prefix in ("B", "I") and start is None:
            start, kind = position, label
    return found


class EntityF1(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Entity-level precision, recall and F1 over IOB-tagged sentences (conlleval).",
            citation="Tjong Kim Sang and De Meulder 2003",
            inputs_description="predictions: list of lists of tags (str); references: the same shape",
            features=datasets.Features({"predictions": datasets.Sequence(datasets.Value("string")),
                                        "references": datasets.Sequence(datasets.Value("string"))}),
        )

    def _compute(self, predictions, references):
        if not references:
            raise ValueError("entity_f1: predictions and references are empty; it needs one sentence")
        hits = guessed = wanted = 0
        for predicted, gold in zip(predictions, references):
            if len(predicted) != len(gold):
                raise ValueError(f"entity_f1: a sentence has {len(predicted)} predicted tags and {len(gold)} gold ones")
            found, true = entities(predicted), entities(gold)
            hits, guessed, wanted = hits + len(found & true), guessed + len(found), wanted + len(true)
        precision, recall = hits / guessed if guessed else 0.0, hits / wanted if wanted else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"entity_precision": precision, "entity_recall": recall, "entity_f1": f1}
