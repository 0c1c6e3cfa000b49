"""Labels as users have them, checked once before training across the training and validation data: classes for
every task that has them, a label per row (sequence classification, NLI) or a tag per word (token classification, a
list per row), and scores, a real number per row (regression).

`class_labels(train, validation, column, sources)` returns the class names and both splits with the label column as
class ids (strings in sorted order, as `datasets`' `ClassLabel`; -100 marks a word to skip), refusing bad labels with
the file, line, column and value; `streamed_class_labels` takes a stream's declared classes. `score_labels` checks
scores the same way, a stream's as it is read. The rules: docs/training.md, "Labels and sequence lengths".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator

import datasets

from train.data.encoders import IGNORE_INDEX
from train.data.errors import DataError
from train.data.left_out import RowsLeftOut
from train.data.table_files import row_location


class LabelError(DataError):
    """A label that is not a class (a float, a negative id, a mix of types, a class only the validation has, or a
    training split of one class) or not a score (text, NaN or infinity)."""


def _labels(dataset: datasets.Dataset, column: str) -> Iterator[tuple[int, int | None, object]]:
    """`(row, word, label)` of every label: one per row, or for tags (a list per row) one per word."""
    for row, value in enumerate(dataset[column]):
        if isinstance(value, list):
            yield from ((row, word, tag) for word, tag in enumerate(value))
        else:
            yield row, None, value


def _named(value: object, word: int | None) -> str:
    return f"label {value!r}" if word is None else f"tag {value!r} (word {word + 1})"


def _skipped(value: object, word: int | None, skip_unlabeled: bool) -> bool:
    """Whether the label is no class to check: an ignored word (-100) or, with `skip_unlabeled`, an unlabelled row
    (labelled -1, or a row without a label)."""
    return (word is not None and value == IGNORE_INDEX) or (skip_unlabeled and (
        value == -1 or (word is None and _no_score(value) is not None)))


def _unlabelled_error(location: str, held: str, what: str = "label") -> LabelError:
    return LabelError(f"{location}: the row has no {what} ({held}): a row without a {what} is unlabelled; set "
                      f"skip_unlabeled: true to skip such rows, or give it a {what}")


def _check_values(dataset: datasets.Dataset, source: str, column: str, kind: type | None,
                  skip_unlabeled: bool) -> type | None:
    """The labels' type (str, int or bool); raises `LabelError` for anything that is not a class."""
    for row, word, value in _labels(dataset, column):
        if word is None and (held := _no_score(value)):  # pandas' missing value: null, an empty field, NaN
            if skip_unlabeled:
                continue
            raise _unlabelled_error(row_location(source, row, column), held)
        if isinstance(value, float) and value.is_integer():  # a whole number in a column Arrow widened to floats
            value = int(value)
        if not isinstance(value, (int, str)):  # bool is an int
            score = word is None and isinstance(value, float)
            raise LabelError(f"{row_location(source, row, column)}: {_named(value, word)} is not a class: labels must "
                             f"be integer class ids, strings or booleans (got {type(value).__name__}"
                             f"{'; for scores such as 3.8, set task: regression' if score else ''})")
        if kind is not None and type(value) is not kind:  # True is no class id 1
            raise LabelError(f"{row_location(source, row, column)}: {_named(value, word)} is a "
                             f"{type(value).__name__} but earlier labels are {kind.__name__}s; use one type for every "
                             f"label")
        kind = type(value)
        if isinstance(value, int) and value < 0 and not _skipped(value, word, skip_unlabeled):
            raise _negative(row_location(source, row, column), value, word)
    return kind


def _negative(location: str, value: int, word: int | None) -> LabelError:
    hint = (" (an unlabelled row, as in GLUE test splits: set skip_unlabeled: true to skip such rows)"
            if value == -1 else f" ({IGNORE_INDEX} marks a word to skip)" if word is not None else "")
    return LabelError(f"{location}: {_named(value, word)} is not a class id >= 0{hint}")


def _class_feature(feature) -> datasets.ClassLabel | None:
    feature = getattr(feature, "feature", feature)  # the tags of a list column
    return feature if isinstance(feature, datasets.ClassLabel) else None


def _integral(dataset: datasets.Dataset, column: str) -> datasets.Dataset:
    """A float column (Arrow widens `[0, 1, 0.5]` to floats; tags too) whose every value is whole, as integers;
    otherwise as it is, for `_check_values` to name the first fraction."""
    feature = dataset.features[column]
    value = getattr(feature, "feature", feature)
    if not (isinstance(value, datasets.Value) and value.dtype.startswith("float")):
        return dataset
    if any(not float(v).is_integer() for _, _, v in _labels(dataset, column) if _no_score(v) is None):
        return dataset
    integers = datasets.Value("int64")
    return dataset.cast_column(column, datasets.List(integers) if value is not feature else integers)


# the classes of boolean labels (a column pandas writes True / False, JSON true / false), as their ids 0 and 1
BOOLEANS = ["False", "True"]


# why a cut split shows fewer classes than its data has: what the notices of `class_labels` advise
SORTED = " (a file sorted by label shows few classes in its first rows, which train_size / eval_size take: shuffle it)"


def _name_of(value, names: list[str], kind: type | None, declared) -> object:
    """A label as its class is named: a declared class id by its name, anything else as it is."""
    return names[value] if declared and kind is int else value


def _listed(ids: list[int], shown: int = 8) -> str:
    return ", ".join(map(str, ids[:shown])) + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def _unlabelled_class(value) -> bool:  # labelled -1 (tags: a word tagged -1), or without a label
    return -1 in value if isinstance(value, list) else value == -1 or _no_score(value) is not None


# the unlabelled rows of classes, and of scores (`_unscored`), as messages name them
_UNLABELLED, _UNSCORED = "labelled -1", "labelled -1 or without a score"


def _unlabelled_rows(dataset: datasets.Dataset, column: str) -> str:
    """How the count of a split's unlabelled rows of classes names them: with "or without a label" where it has
    such rows."""
    return _UNLABELLED + (" or without a label" if any(_no_score(v) is not None for v in dataset[column]) else "")


def _drop_unlabeled(dataset: datasets.Dataset, column: str, source: str, unlabelled=_unlabelled_class,
                    what: str = _UNLABELLED) -> datasets.Dataset:
    """`dataset` without its rows whose label is `unlabelled` (`what`, as the count printed says)."""
    kept = dataset.filter(lambda value: not unlabelled(value), input_columns=column)
    if len(kept) < len(dataset):
        print(f"{source}: skipped {len(dataset) - len(kept)} rows {what} in column {column!r} (skip_unlabeled)",
              flush=True)
    return kept


def _labelled_validation(validation: datasets.Dataset | None, column: str, source: str) -> datasets.Dataset | None:
    """`validation` without its rows labelled -1 (counted), refused when none is left."""
    if validation is None:
        return None
    validation = _drop_unlabeled(validation, column, source, what=_unlabelled_rows(validation, column))
    if len(validation) == 0:
        raise LabelError(f"{source}: every row is labelled -1 in column {column!r} (unlabelled, as GLUE's test "
                         f"splits): nothing to evaluate on; give labelled data (validation_split, validation_file)")
    return validation


def _cut(dataset: datasets.Dataset, source: str, key: str) -> str:
    """`source`, with "(its first N rows: key)" when `train_size` / `eval_size` cut the split."""
    read = (dataset.info.splits or {}).get(str(dataset.split)) if dataset.split is not None else None
    return f"{source} (its first {len(dataset)} rows: {key})" if read and len(dataset) < read.num_examples else source


def _is_text(feature) -> bool:
    """Whether a label column's `feature` (of tags: its items') holds strings."""
    value = getattr(feature, "feature", feature)
    return isinstance(value, datasets.Value) and "string" in value.dtype


def _as_declared_names(validation: datasets.Dataset, column: str) -> datasets.Dataset:
    """`validation`'s class ids (a `ClassLabel`) as the names it declares, -1 as no label; in memory (nothing written
    beside a saved dataset)."""
    feature = validation.features[column]
    names, tags = _class_feature(feature).names, isinstance(feature, datasets.List)

    def name(label: int) -> str | None:
        return names[label] if label >= 0 else None

    text = datasets.Value("string")
    return validation.map(lambda v: {column: [list(map(name, tags_)) for tags_ in v] if tags else list(map(name, v))},
                          input_columns=column, batched=True, keep_in_memory=True,
                          features=datasets.Features({**validation.features, column: datasets.List(text) if tags
                                                      else text}))


def _by_declared_names(train: datasets.Dataset, validation: datasets.Dataset, column: str,
                       sources: tuple[str, str]) -> datasets.Dataset:
    """`validation` with labels written as the names of the classes `train` declares (a `ClassLabel`: a Hub or saved
    dataset's ids, a CSV of names such as 'positive') as their ids; a name it does not declare is refused. Where
    `train`'s labels are names and `validation` declares classes, its ids as their names (`_as_declared_names`)."""
    declared, feature = _class_feature(train.features[column]), validation.features[column]
    if declared is None and _class_feature(feature) is not None and _is_text(train.features[column]):
        print(f"{sources[1]}: column {column!r} holds ids of the classes it declares "
              f"({', '.join(_class_feature(feature).names)}): read as their names, as {sources[0]} gives its labels",
              flush=True)
        return _as_declared_names(validation, column)
    value = getattr(feature, "feature", feature)
    if declared is None or not _is_text(feature):
        return validation
    for row, word, name in _labels(validation, column):
        if name not in declared.names and not (name is None or _skipped(name, word, False)):
            raise LabelError(f"{row_location(sources[1], row, column)}: {_named(name, word)} is none of the classes "
                             f"{sources[0]} declares ({', '.join(declared.names)}); the model would have no class for "
                             f"it")
    return validation.cast_column(column, datasets.List(declared) if value is not feature else declared)


def class_labels(train: datasets.Dataset, validation: datasets.Dataset | None, column: str,
                 sources: tuple[str, str], skip_unlabeled: bool = False, allow_single_class: bool = False,
                 training: bool = True):
    """`(names, train, validation)`: the class names and both splits with `column` as class ids (module docstring).
    `training`: the classes are those of a model to train (its head gets a class for every id up to the largest,
    said where the data leaves ids out), not those of data a trained model is scored on."""
    stored = train.features[column]
    validation = _by_declared_names(train, validation, column, sources) if validation is not None else None
    train, validation = (_integral(d, column) if d is not None else None for d in (train, validation))
    widened = train.features[column] != stored
    splits = [(train, sources[0])] + ([(validation, sources[1])] if validation is not None else [])
    kind = None
    for dataset, source in splits:
        kind = _check_values(dataset, source, column, kind, skip_unlabeled)
    values = [v for _, word, v in _labels(train, column) if not _skipped(v, word, skip_unlabeled)]
    counts = dict(sorted(Counter(values).items()))
    trained_on = _cut(train, sources[0], "train_size")
    if widened:  # Arrow's widening of ids beside missing values, or a score column (STS-B's) of whole scores
        print(f"{trained_on}: column {column!r} holds whole numbers stored as floats: read as class ids (for scores, "
              f"such as STS-B's 0 to 5, set task: regression)", flush=True)
    if not values:
        raise LabelError(f"{trained_on}: column {column!r} holds no labelled row")
    tags = isinstance(train.features[column], datasets.List)
    if len(counts) == 1 and not allow_single_class:
        only, count = next(iter(counts.items()))
        raise LabelError(f"{trained_on}: every label in column {column!r} is {only!r} ({count} "
                         f"{'tags' if tags else 'rows'}): a classifier learns nothing from one class. Give examples of "
                         f"two classes or more (a file sorted by label shows one class in its first rows), or set the "
                         f"recipe key allow_single_class: true")
    declared = _class_feature(train.features[column])
    names = (list(declared.names) if declared else sorted(counts) if kind is str else BOOLEANS if kind is bool
             else [str(i) for i in range(max(values) + 1)])
    known = set(range(len(names))) if declared and kind is int else set(counts)
    unseen = [i for i in range(len(names)) if i not in counts] if kind is int else []
    if unseen and training and declared:
        print(f"{trained_on}: column {column!r} never shows the class{'es' if len(unseen) > 1 else ''} "
              f"{', '.join(repr(names[i]) for i in unseen)} of the {len(names)} its data declares: the model gets them "
              f"all, {len(unseen)} never trained{SORTED}", flush=True)
    elif unseen and training:
        print(f"{trained_on}: column {column!r} never shows class id{'s' if len(unseen) > 1 else ''} "
              f"{_listed(unseen)}: integer labels are class ids, so the model gets {len(names)} classes, 0 to "
              f"{len(names) - 1}, {len(unseen)} of them never trained (labels that do not count from 0, such as "
              f"ratings 1 to 5, become classes in sorted order when given as strings)", flush=True)
    shown = set()
    for row, word, value in _labels(validation, column) if validation is not None else ():
        if _skipped(value, word, skip_unlabeled):
            continue
        if value not in known:
            raise LabelError(f"{row_location(sources[1], row, column)}: {_named(value, word)} never occurs in the "
                             f"training data ({trained_on}: {counts}); the model would have no class for it")
        shown.add(value)
    if len(shown) == 1 and len(counts) > 1 and not tags:
        print(f"{sources[1]}: every label in column {column!r} is "
              f"{_name_of(next(iter(shown)), names, kind, declared)!r}: its figures score that one class of the "
              f"{len(counts)} trained{SORTED}", flush=True)
    if skip_unlabeled:
        train = _drop_unlabeled(train, column, sources[0], what=_unlabelled_rows(train, column))
        validation = _labelled_validation(validation, column, sources[1])
    if kind in (str, bool):  # a boolean column (pandas' True / False) casts to the ids 0 and 1 of False and True
        label = datasets.ClassLabel(names=names)
        feature = datasets.List(label) if tags else label
        train = train.cast_column(column, feature)
        validation = validation.cast_column(column, feature) if validation is not None else None
    return names, train, validation


def streamed_class_labels(train: datasets.IterableDataset, validation: datasets.Dataset | None, column: str,
                          sources: tuple[str, str], skip_unlabeled: bool = False, counts: dict | None = None):
    """`(names, train, validation)` for a streamed training split, whose classes are those its features declare;
    with `skip_unlabeled` rows labelled -1 are left out as they are read, counted in `counts` (`_labelled_stream`;
    the validation split's, read whole, as in memory: counted, and refused when none is left)."""
    def declared(dataset) -> list[str] | None:
        feature = _class_feature((dataset.features or {}).get(column))
        return list(feature.names) if feature is not None else None

    names = declared(train)
    if validation is not None and names is not None:
        validation = _by_declared_names(train, validation, column, sources)
    if names is None:
        raise LabelError(f"recipe key 'streaming' is true, but {sources[0]} declares no classes for column {column!r} "
                         f"(no datasets ClassLabel feature): finetune would have to read the whole stream to collect "
                         f"them before training; set streaming: false")
    if validation is not None and declared(validation) != names:
        raise LabelError(f"recipe key 'streaming' is true: the classes of column {column!r} come from the training "
                         f"stream's features ({names}), but {sources[1]} declares {declared(validation)}; give "
                         f"validation data with the same ClassLabel feature, or set streaming: false")
    if validation is not None:  # read whole, as in memory
        _check_values(validation, sources[1], column, None, skip_unlabeled)
    if skip_unlabeled:
        train = _labelled_stream(train, sources[0], column, counts=counts)
        return names, train, _labelled_validation(validation, column, sources[1])

    def checked(value, row: int) -> bool:  # as each row is read; memory refuses the same before training
        for word, label in enumerate(value) if isinstance(value, list) else [(None, value)]:
            if word is None and (held := _no_score(label)):
                raise _unlabelled_error(row_location(sources[0], row, column), held)
            if label < 0 and not _skipped(label, word, False):
                raise _negative(row_location(sources[0], row, column), label, word)
        return True

    return names, train.filter(checked, input_columns=column, with_indices=True), validation


_AS_TEXT = ("is a number written as text (quoted, or in a column read as text because a value in it is not a "
            "number): write every score as a number")


def _no_score(value: object) -> str | None:
    """What `value` holds where a row has no score (an unlabelled row): null, an empty or blank string, NaN (pandas'
    missing value); None for any other value."""
    if value is None:
        return "null, or an empty or blank field"
    if isinstance(value, str) and not value.strip():
        return "an empty string" if not value else "only whitespace"
    return "NaN" if isinstance(value, float) and math.isnan(value) else None


def _not_a_score(value: object) -> str | None:
    """Why `value` is no score, said after it; None for a real number."""
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return "is text, not a number (labels that name classes: the tasks sequence-classification and nli)"
        return _not_a_score(number) or _AS_TEXT
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"is a {type(value).__name__}, not a number"
    if not math.isfinite(value):
        return "is not a finite number"
    return None


def _score_error(location: str, value: object, why: str) -> LabelError:
    return LabelError(f"{location}: label {value!r} {why}; the task regression takes a real number per row as its "
                      f"label")


def _unscored_error(location: str, held: str) -> LabelError:
    return LabelError(f"{location}: the row has no score ({held}): a row without a score is unlabelled; set "
                      f"skip_unlabeled: true to skip such rows, or give it a score")


def _unscored(value: object) -> bool:  # an unlabelled row of scores: labelled -1 (GLUE's test splits) or no score
    return _no_score(value) is not None or value == -1


def _check_scores(splits: list[tuple[datasets.Dataset, str]], column: str, skip_unlabeled: bool) -> None:
    """Refuse the first label of `column` in `splits` that is no score: without `skip_unlabeled`, a row without one
    first. A column of numbers with one word among them is read as text whole, in every split cut from its file (rows
    held out by eval_size, the rows left): the word is named, wherever it is, before a number written as text."""
    values = [(source, row, value) for dataset, source in splits for row, value in enumerate(dataset[column])]
    unscored = next(((source, row, held) for source, row, value in values if (held := _no_score(value))), None)
    if unscored and not skip_unlabeled:
        source, row, held = unscored
        raise _unscored_error(row_location(source, row, column), held)
    bad = [(source, row, value, why) for source, row, value in values
           if _no_score(value) is None and (why := _not_a_score(value))]
    if bad:
        source, row, value, why = next((b for b in bad if b[3] != _AS_TEXT), bad[0])
        raise _score_error(row_location(source, row, column), value, why)


def _scores(dataset: datasets.Dataset, source: str, column: str, skip_unlabeled: bool) -> datasets.Dataset:
    """`dataset` (its scores checked) without its unlabelled rows (`_unscored`) if `skip_unlabeled`; refused when no
    row keeps a score other than -1 (a GLUE test split, labelled -1 throughout)."""
    unlabelled = _UNSCORED if skip_unlabeled else _UNLABELLED
    if skip_unlabeled:
        dataset = _drop_unlabeled(dataset, column, source, _unscored, _UNSCORED)
    if all(value == -1 for value in dataset[column]):
        raise LabelError(f"{source}: every row is {unlabelled} in column {column!r} (unlabelled, as GLUE's test "
                         f"splits): it holds no score to train or evaluate on; give data with scores")
    return dataset


def score_labels(train: datasets.Dataset | datasets.IterableDataset, validation: datasets.Dataset | None, column: str,
                 sources: tuple[str, str], skip_unlabeled: bool = False, counts: dict | None = None):
    """`(train, validation)` with the labels of `column` checked as scores, real numbers (text and infinity refused
    naming the file, line, column and value); with `skip_unlabeled` the unlabelled rows (`_unscored`) are left out,
    with a count, else a row without a score is refused. A streamed training split is checked as it is read, its
    rows skipped counted in `counts` (`_labelled_stream`)."""
    streamed = isinstance(train, datasets.IterableDataset)
    _check_scores(([(validation, sources[1])] if validation is not None else [])
                  + ([] if streamed else [(train, sources[0])]), column, skip_unlabeled)
    validation = _scores(validation, sources[1], column, skip_unlabeled) if validation is not None else None
    if not streamed:
        return _scores(train, sources[0], column, skip_unlabeled), validation

    def checked(value, row: int) -> bool:  # as each row is read; memory refuses the same before training
        held = _no_score(value)
        if held and not skip_unlabeled:
            raise _unscored_error(row_location(sources[0], row, column), held)
        why = None if held else _not_a_score(value)
        if why:
            raise _score_error(row_location(sources[0], row, column), value, why)
        return True

    train = train.filter(checked, input_columns=column, with_indices=True)
    return (_labelled_stream(train, sources[0], column, _unscored, _UNSCORED, counts) if skip_unlabeled
            else train), validation


def _labelled_stream(train: datasets.IterableDataset, source: str, column: str, unlabelled=_unlabelled_class,
                     what: str = _UNLABELLED, counts: dict | None = None) -> datasets.IterableDataset:
    """`train` without its rows `unlabelled` (`what`), counted as read (`counts["skipped_unlabeled"]`, `RowsLeftOut`),
    said; refused when no row is labelled: read up to its first, as training reads it."""
    left_out = RowsLeftOut(lambda batch: [not unlabelled(value) for value in batch[column]], train.n_shards)
    train = train.filter(left_out.keep, batched=True, with_indices=True)
    if next(iter(train.take(1)), None) is None:
        raise LabelError(f"{source}: every row is {what} in column {column!r} (unlabelled, as GLUE's test "
                         f"splits), so skip_unlabeled leaves the stream nothing to train on; give data with labels")
    counted = ("counted as it reads them, in results.json's skipped_unlabeled at the end of the run"
               if train.n_shards == 1 else f"uncounted: its {train.n_shards} shards are read in lanes side by side, "
               f"each numbering its rows from 0")
    print(f"{source}: rows {what} in column {column!r} are skipped as the stream reads them (skip_unlabeled; "
          f"{counted})", flush=True)
    if counts is not None:
        counts["skipped_unlabeled"] = left_out.count
    return train


__all__ = ["LabelError", "class_labels", "score_labels", "streamed_class_labels"]
