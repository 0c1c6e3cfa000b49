"""The data splits of a run: `load_splits(recipe, columns)`, the training and validation splits of what the recipe
reads (`Recipe.data_source`: its files, else `dataset`, else the command's own data), each column checked, a
user's data cut only by the user's `train_size` / `eval_size`; with `streaming` the training split is a stream.
`check_sequence_room` refuses a `max_seq_length` that leaves no token of text. docs/training.md ("Data",
"Streaming").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import datasets

import modeling  # noqa: F401  (registers the Lineage families with the Auto classes)
from train.data.corpus import SPLITS
from train.data.files import (
    Columns,
    UnknownColumnError,
    UnknownSplitError,
    check_local_source,
    load_text_dataset,
    saved_splits,
)
from train.run.recipes import Recipe, RecipeError

COLUMN_ADVICE = "name the right one with the recipe keys text_column, text_pair_column and label_column, or rename it"


def load_split(recipe: Recipe, split: str, columns: Columns = (), default_dataset: str | None = None,
               column_advice: str = COLUMN_ADVICE):
    """One split (`train` or `validation`) of the recipe's data (`Recipe.data_source`), `.txt` files cut into rows as
    `text_sample_by` says; a user's data is cut to `train_size` / `eval_size` only when the user set the key. A
    column the data lacks is refused with `column_advice`. With `streaming`, the training split is a
    `datasets.IterableDataset` cut by `.take(n)`; a Hub dataset's validation split is streamed into memory."""
    key = "train_size" if split == "train" else "eval_size"
    size, file = getattr(recipe, key), recipe.train_file if split == "train" else recipe.validation_file
    source = recipe.data_source(split, default_dataset)
    if not source:
        raise RecipeError("the recipe names no data: set 'dataset' (e.g. embedded:nli) or 'train_file'")
    embedded = source.startswith("embedded:")
    name = split if split == "train" else recipe.validation_split  # the split of a dataset read
    if split != "train" and file is None and (recipe.train_file or Path(source).exists()):
        if name not in saved_splits(source):
            recipe.eval_size = None  # local training files and no validation file: no evaluation, no size applied
            return None
        print(f"{source}: evaluating on its saved split {name!r} (set validation_file to evaluate on other data)",
              flush=True)
    streamed = recipe.streaming and (split == "train" or (file is None and not embedded))
    kwargs = ({"size": size, "seed": recipe.seed} if embedded
              else {"dataset_config": recipe.dataset_config, "text_sample_by": recipe.text_sample_by,
                    "num_proc": recipe.num_proc})
    try:
        dataset = load_text_dataset(source, name, columns=columns, streaming=streamed, **kwargs)
    except UnknownColumnError as error:
        raise UnknownColumnError(f"{error}: {column_advice}") from None
    except UnknownSplitError as error:
        if split == "train":
            raise
        raise UnknownSplitError(f"{error}; set the recipe key validation_split to the split that evaluates "
                                f"(now {name!r})") from None
    if streamed and not embedded:  # its length is unknown: cut by the user's key, never counted
        if size is not None and key in recipe.set_by_user:
            side = (f"; its {dataset.n_shards} files are read side by side, so the first rows of each"
                    if dataset.n_shards > 1 else "")
            print(f"{key} {size}: using the first {size} rows of {source} (streamed{side})", flush=True)
            dataset = dataset.take(size)
        elif size is not None:
            print(f"{source}: streaming all its rows (the shipped recipe's {key} {size} sizes the embedded corpus; "
                  f"set --{key} to cut your data)", flush=True)
            setattr(recipe, key, None)  # all rows, as the recipe records them
        if split != "train":  # evaluation reads its data whole, each time
            dataset = datasets.Dataset.from_list(list(dataset), features=dataset.features)
    elif size is not None and not embedded:
        dataset = _sized(recipe, key, size, dataset, source)
    return dataset


def _sized(recipe: Recipe, key: str, size: int, dataset: datasets.Dataset, source: str) -> datasets.Dataset:
    """`dataset` cut to its first `size` rows when the user set `key`, printed; `key` in the recipe then holds the
    rows used, so that `recipe.yaml`, the checkpoint identity and the card record what ran."""
    rows = len(dataset)
    if key in recipe.set_by_user and rows > size:
        print(f"{key} {size}: using the first {size} of the {rows} rows of {source}", flush=True)
        return dataset.select(range(size))
    if key in recipe.set_by_user and rows < size:
        print(f"{key} {size}: {source} has only {rows} rows, fewer than asked: using all {rows} (recorded as {key} "
              f"{rows})", flush=True)
    elif rows != size:
        print(f"{source}: using all {rows} rows (the shipped recipe's {key} {size} sizes the embedded corpus; set "
              f"--{key} to cut your data)", flush=True)
    setattr(recipe, key, rows)
    return dataset


def load_splits(recipe: Recipe, columns: Columns = (), default_dataset: str | None = None,
                column_advice: str = COLUMN_ADVICE):
    """`(train, validation)`: both splits of the recipe's data (`load_split`); validation may be None. Refused first:
    a validation file without a training file (the run would train on the recipe's dataset), the same file for both
    (the figures would be training figures), `dataset_config` for data that is no Hub dataset, a path of either that
    names nothing."""
    train, validation = recipe.train_file, recipe.validation_file
    if validation and not train:
        raise RecipeError(f"recipe key 'validation_file' is {validation!r} but 'train_file' is not set: the run would "
                          f"train on {recipe.data_source('train', default_dataset)!r} and evaluate on your file; set "
                          f"train_file too, or drop validation_file")
    if train and validation and Path(train).resolve() == Path(validation).resolve():
        raise RecipeError(f"recipe keys 'train_file' and 'validation_file' both name {train!r}: the evaluation figures "
                          f"would be figures on the training data; give held-out data as validation_file, or drop it "
                          f"(no evaluation)")
    if recipe.validation_split in ("", "train"):
        raise RecipeError(f"recipe key 'validation_split' is {recipe.validation_split!r}: name the split of the data "
                          f"that evaluates (validation, test, ...), not the one that trains")
    validation_source = recipe.data_source("validation", default_dataset)
    if validation_source.startswith("embedded:") and recipe.validation_split not in SPLITS:
        raise RecipeError(f"recipe key 'validation_split' is {recipe.validation_split!r}: {validation_source} has the "
                          f"splits {', '.join(SPLITS)}")
    source = recipe.data_source("train", default_dataset)
    if recipe.dataset_config and (source.startswith("embedded:") or Path(source).exists()):
        raise RecipeError(f"recipe key 'dataset_config' is {recipe.dataset_config!r}, which selects a configuration "
                          f"of a Hub dataset; this run reads {source!r}: drop it, or name the Hub dataset with "
                          f"'dataset'")
    for key, file in (("train_file", train), ("validation_file", validation)):
        if file:
            check_local_source(file, key)
    return (load_split(recipe, "train", columns, default_dataset, column_advice),
            load_split(recipe, "validation", columns, default_dataset, column_advice))


def column_texts(dataset, column: str = "text") -> Iterator[str]:
    """The texts of `column`, read a thousand rows at a time (never the whole column in memory)."""
    for batch in dataset.iter(batch_size=1000):
        yield from batch[column]


def row_texts(rows, columns: tuple[str | None, ...]) -> Iterator[str]:
    """The texts of `columns` in every row, in row order (a list of words joined by spaces), read as they are used
    (a stream is never held whole): what a tokenizer trains on."""
    for row in rows:
        for column in columns:
            if column:
                yield " ".join(row[column]) if isinstance(row[column], list) else row[column]


def check_sequence_room(recipe: Recipe, tokenizer, texts: int, what: str, minimum: int | None = None) -> None:
    """Refuse a `max_seq_length` that leaves no token of text once the task's template has added its special tokens
    (BERT pair: 3, GPT classification: 2 or 3, seq2seq: 1): tokenizers skip a truncation they cannot honour, and a
    template alone trains on nothing. `minimum` overrides the template's count (a causal block needs 2 tokens)."""
    overhead = tokenizer.num_special_tokens_to_add(pair=texts == 2)
    needed = minimum if minimum is not None else overhead + texts
    if recipe.max_seq_length < needed:
        raise RecipeError(f"recipe key 'max_seq_length' is {recipe.max_seq_length}, below the minimum of {needed} for "
                          f"{what} ({overhead} special tokens and at least one token of each of {texts} text(s))")


__all__ = ["check_sequence_room", "column_texts", "load_split", "load_splits", "row_texts"]
