"""Class labels as users have them, checked once before training across the training and validation data.

`class_labels(train, validation, column, sources)` returns the label names and both splits with the label column as
class ids:

- a `ClassLabel` column keeps its names;
- strings (`pos` / `neg`) become class ids in sorted order, as `datasets`' `ClassLabel` would number them; the names
  go into the model config's `id2label` / `label2id`;
- integers are class ids `0..max` of the training data;
- a float, a negative id, a value of another type than the rest, or a validation label the training data never
  shows is refused naming the file, the line as an editor counts it (`train.core.data.row_location`), the column
  and the value; `-1` (GLUE's unlabelled test rows) is skipped with a count when the recipe sets `skip_unlabeled`.
"""

from __future__ import annotations

from collections import Counter

import datasets

from train.core.data import DataError, row_location


class LabelError(DataError):
    """A label that is not a class: a float, a negative id, a mix of types, or a class only the validation has."""


def _check_values(values: list, source: str, column: str, kind: type | None, skip_unlabeled: bool) -> type | None:
    """The values' type (str or int); raises `LabelError` for anything that is not a class."""
    for row, value in enumerate(values):
        if isinstance(value, float) and value.is_integer():  # a whole number in a column Arrow widened to floats
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise LabelError(f"{row_location(source, row, column)}: label {value!r} is not a class: labels must be "
                             f"integer class ids or strings (got {type(value).__name__}; regression is not supported)")
        if kind is not None and not isinstance(value, kind):
            raise LabelError(f"{row_location(source, row, column)}: label {value!r} is a {type(value).__name__} but "
                             f"earlier labels are {kind.__name__}s; use one type for every label")
        kind = type(value)
        if isinstance(value, int) and value < 0 and not (value == -1 and skip_unlabeled):
            hint = " (an unlabelled row, as in GLUE test splits: set skip_unlabeled: true to skip such rows)" \
                if value == -1 else ""
            raise LabelError(f"{row_location(source, row, column)}: label {value} is not a class id >= 0{hint}")
    return kind


def _integral(dataset: datasets.Dataset, column: str) -> datasets.Dataset:
    """A float column (Arrow widens `[0, 1, 0.5]` to floats) whose every value is whole, as integers; otherwise as it
    is, for `_check_values` to name the first fraction."""
    feature = dataset.features[column]
    if not (isinstance(feature, datasets.Value) and feature.dtype.startswith("float")):
        return dataset
    if any(not float(v).is_integer() for v in dataset[column]):
        return dataset
    return dataset.cast_column(column, datasets.Value("int64"))


def _drop_unlabeled(dataset: datasets.Dataset, column: str, source: str) -> datasets.Dataset:
    kept = dataset.filter(lambda value: value != -1, input_columns=column)
    if len(kept) < len(dataset):
        print(f"{source}: skipped {len(dataset) - len(kept)} rows labelled -1 in column {column!r} (skip_unlabeled)",
              flush=True)
    return kept


def class_labels(train: datasets.Dataset, validation: datasets.Dataset | None, column: str,
                 sources: tuple[str, str], skip_unlabeled: bool = False):
    """`(names, train, validation)`: the class names and both splits with `column` as class ids (module docstring)."""
    feature = train.features[column]
    if isinstance(feature, datasets.ClassLabel):
        return list(feature.names), train, validation
    train, validation = (_integral(d, column) if d is not None else None for d in (train, validation))
    splits = [(train, sources[0])] + ([(validation, sources[1])] if validation is not None else [])
    kind = None
    for dataset, source in splits:
        kind = _check_values(dataset[column], source, column, kind, skip_unlabeled)
    values = [v for v in train[column] if not (skip_unlabeled and v == -1)]
    if not values:
        raise LabelError(f"{sources[0]}: column {column!r} holds no labelled row")
    names = sorted(set(values)) if kind is str else [str(i) for i in range(max(values) + 1)]
    known = set(values) if kind is str else set(range(len(names)))
    for row, value in enumerate(validation[column] if validation is not None else []):
        if value not in known and not (skip_unlabeled and value == -1):
            counts = dict(sorted(Counter(values).items()))
            raise LabelError(f"{row_location(sources[1], row, column)}: label {value!r} never occurs in the training "
                             f"data ({sources[0]}: {counts}); the model would have no class for it")
    if skip_unlabeled and kind is int:
        train = _drop_unlabeled(train, column, sources[0])
        validation = _drop_unlabeled(validation, column, sources[1]) if validation is not None else None
    if kind is str:
        label = datasets.ClassLabel(names=names)
        train = train.cast_column(column, label)
        validation = validation.cast_column(column, label) if validation is not None else None
    return names, train, validation


__all__ = ["LabelError", "class_labels"]
