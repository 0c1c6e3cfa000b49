"""The data of the lm-evaluation-harness tasks Lineage ships (`train/configs/tasks/`), drawn from the embedded corpus's
test split (`train.data.corpus`), so they run offline and never overlap what the tiny recipes train on.

Each function is a task's `custom_dataset` (`!function train.data.harness_tasks.<name>` in its YAML), called with
keywords the data does not depend on, returning a `DatasetDict` with one `test` split. The tasks:
docs/evaluation.md ("The shipped tasks").
"""

from __future__ import annotations

import datasets

from train.data.corpus import CITIES, generate_records

DRAWN = 1000  # test-split documents drawn; about a fifth are travel diaries


def _test(rows: list[dict]) -> datasets.DatasetDict:
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def cloze(**_harness_arguments) -> datasets.DatasetDict:
    """Rows {context, choices, label}: a diary up to its last word, its cities in alphabetical order, the answer's
    index."""
    rows = []
    for document in generate_records("documents", "test", size=DRAWN):
        if document["kind"] != "travel":
            continue
        text = document["text"].removesuffix(".")
        context, _, answer = text.rpartition(" returned home to ")
        context += " returned home to"
        choices = sorted(city for city in CITIES if city in text)
        rows.append({"context": context, "choices": choices, "label": choices.index(answer)})
    return _test(rows)


def translation(**_harness_arguments) -> datasets.DatasetDict:
    """Rows {source, target}: English number phrases and their German translations."""
    return _test(generate_records("translation", "test", size=DRAWN))


def documents(**_harness_arguments) -> datasets.DatasetDict:
    """Rows {text}: whole documents."""
    return _test([{"text": d["text"]} for d in generate_records("documents", "test", size=DRAWN // 5)])


__all__ = ["cloze", "documents", "translation"]
