"""The data splits of a run: `load_splits(recipe, columns)`, the training and validation splits of what the recipe
reads (`Recipe.data_source`: its files, else `dataset`, else the command's own data), each column checked, a
user's data cut only by the user's `train_size` / `eval_size`; with `streaming` the training split is a stream.
`check_sequence_room` refuses a `max_seq_length` that leaves no token of text, `question_room_problem` one whose
question-answering windows cannot step through a context. docs/training.md ("Data", "Streaming", "Labels and
sequence lengths").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import datasets

import modeling  # noqa: F401  (registers the Lineage families with the Auto classes)
from train.data.corpus import SPLITS
from train.data.errors import UnknownColumnError, UnknownSplitError
from train.data.files import Columns, check_local_source, hub_splits, load_text_dataset, names_local_data, saved_splits
from train.data.left_out import RowsLeftOut
from train.run.recipes import Recipe, RecipeError

LABEL_KINDS = ("label", "score", "tags", "answers")  # the kinds of column (train.data.files.KINDS) a task learns


COLUMN_ADVICE = "name the right one with the recipe keys text_column, text_pair_column and label_column, or rename it"


def load_split(recipe: Recipe, split: str, columns: Columns = (), default_dataset: str | None = None,
               column_advice: str = COLUMN_ADVICE, cut: bool = True):
    """One split (`train` or `validation`) of the recipe's data (`Recipe.data_source`), `.txt` files cut into rows as
    `text_sample_by` says; a user's data is cut to `train_size` / `eval_size` only when the user set the key (`cut`
    False: never). A column the data lacks is refused with `column_advice`. With `streaming`, the training split is a
    `datasets.IterableDataset` cut by `.take(n)`; a Hub dataset's validation split is streamed into memory.
    `load_splits` decides whether the data has a validation split to load."""
    key = "train_size" if split == "train" else "eval_size"
    size = getattr(recipe, key) if cut else None
    source = recipe.data_source(split, default_dataset)
    if not source:
        raise RecipeError("the recipe names no data: set 'dataset' (e.g. embedded:nli) or 'train_file'")
    embedded = source.startswith("embedded:")
    name = split if split == "train" else recipe.validation_split  # the split of a dataset read
    if split != "train" and recipe.validation_file is None and name in saved_splits(source):
        kind = "saved split" if Path(source, "dataset_dict.json").expanduser().is_file() else "files of the split"
        print(f"{source}: evaluating on its {kind} {name!r} (set validation_file to evaluate on other data)",
              flush=True)
    streamed = recipe.streaming and (split == "train" or (recipe.validation_file is None and not embedded))
    kwargs = ({"size": size, "seed": recipe.seed} if embedded
              else {"dataset_config": recipe.dataset_config, "text_sample_by": recipe.text_sample_by,
                    "num_proc": recipe.num_proc})
    try:
        dataset = load_text_dataset(source, name, columns=columns, streaming=streamed, **kwargs)
    except UnknownColumnError as error:
        labels = [c for c, kind in (c if isinstance(c, tuple) else (c, None) for c in columns) if kind in LABEL_KINDS]
        if error.column in labels and not embedded:  # a file of no labels, as GLUE's test.tsv
            use = ("evaluate on: give labelled data as validation_file (GLUE's dev.tsv), or drop it (lineage evaluate "
                   "--predictions true writes a trained model's predictions for it)" if split != "train"
                   else "train on: give labelled data")
            column_advice = (f"{column_advice}; if it has no labels (as GLUE's test files: GLUE keeps theirs), it has "
                             f"nothing to {use}")
        raise UnknownColumnError(f"{error}: {column_advice}", error.column) from None
    except UnknownSplitError as error:
        if split == "train":
            raise
        raise UnknownSplitError(f"{error}; set the recipe key validation_split to the split that evaluates "
                                f"(now {name!r}), or eval_size to hold out rows of the training split") from None
    if split != "train" and streamed:  # evaluation reads its data whole, each time: a user's `size` rows of it
        taken = size is not None and key in recipe.set_by_user
        rows = datasets.Dataset.from_list(list(dataset.take(size) if taken else dataset), features=dataset.features)
        if taken and len(rows) == size:
            print(f"{key} {size}: using the first {size} rows of {source} (streamed)", flush=True)
            return rows
        return rows if size is None else _sized(recipe, key, size, rows, source)  # fewer than asked: said
    return dataset if embedded else _cut(recipe, key, size, dataset, source)


def _cut(recipe: Recipe, key: str, size: int | None, dataset, source: str):
    """A user's data cut to `size` rows (`key`): a stream by `.take(n)` (its length is unknown: never counted), data
    in memory by `_sized`."""
    if size is None:
        return dataset
    if not isinstance(dataset, datasets.IterableDataset):
        return _sized(recipe, key, size, dataset, source)
    if key in recipe.set_by_user:
        side = (f"; its {dataset.n_shards} files are read side by side, so the first rows of each"
                if dataset.n_shards > 1 else "")
        print(f"{key} {size}: using the first {size} rows of {source} (streamed{side})", flush=True)
        return dataset.take(size)
    print(f"{source}: streaming all its rows (the shipped recipe's {key} {size} sizes the embedded corpus; set "
          f"--{key} to cut your data)", flush=True)
    setattr(recipe, key, None)  # all rows, as the recipe records them
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
    recipe.read_columns = tuple(columns)
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
    if recipe.dataset_config and (source.startswith("embedded:") or names_local_data(source, columns)):
        raise RecipeError(f"recipe key 'dataset_config' is {recipe.dataset_config!r}, which selects a configuration "
                          f"of a Hub dataset; this run reads {source!r}: drop it, or name the Hub dataset with "
                          f"'dataset'")
    for key, file in (("train_file", train), ("validation_file", validation)):
        if file:
            check_local_source(file, key, columns)
    splits = None if validation else _without_validation(recipe, source, columns)
    if splits is not None and "eval_size" in recipe.set_by_user:
        rows = load_split(recipe, "train", columns, default_dataset, column_advice, cut=False)
        held, rows = _held_out(recipe, rows, source)
        return _cut(recipe, "train_size", recipe.train_size, rows, source), held
    rows = load_split(recipe, "train", columns, default_dataset, column_advice)
    if splits is not None and set(splits) <= {"train"}:  # of other splits, the validation split's load names them
        print(f"{source} has no split {recipe.validation_split!r} to evaluate on: training without evaluation (set "
              f"eval_size to hold out rows of the training data, or give validation_file)", flush=True)
        recipe.eval_size = None
        return rows, None
    return rows, load_split(recipe, "validation", columns, default_dataset, column_advice)


def _without_validation(recipe: Recipe, source: str, columns: Columns) -> list[str] | None:
    """The splits of the recipe's data when it has no split `validation_split` (local training files: none; a saved
    `DatasetDict` or a Hub dataset without it: theirs); None when it has one, or the Hub cannot say (no network)."""
    if source.startswith("embedded:"):
        return None
    local = recipe.train_file or names_local_data(source, columns)
    splits = saved_splits(source) if local else hub_splits(source, recipe.dataset_config)
    return None if splits is None or recipe.validation_split in splits else splits


def _held_out(recipe: Recipe, rows, source: str):
    """`(held, rest)`: the first `eval_size` rows of the training data, held out to evaluate on (in memory), and the
    rows left to train on: the others, less those identical to a held-out row (the model would be scored on rows it
    trained on), counted once in memory; a stream leaves them out as it reads them (the same rows, whatever the
    shards, lanes and processes that read it). `recipe.held_out` records the count, `recipe.kept_rows` the file's row
    of each row left, `recipe.held_out_copies` the copies left out (a stream's: `RowsLeftOut.count`)."""
    size = recipe.eval_size
    streamed = isinstance(rows, datasets.IterableDataset)
    held = list(rows.take(size)) if streamed else rows.select(range(min(size, len(rows))))
    count = len(held) if streamed else len(rows)
    if count < size or (count == size and not streamed):
        raise RecipeError(f"recipe key 'eval_size' is {size}: {source} has no split {recipe.validation_split!r}, so "
                          f"the run holds out its first {size} rows to evaluate on, but it has {count}: nothing would "
                          f"be left to train on; set a smaller eval_size, or give validation_file")
    total = "" if streamed else f" of its {count}"
    print(f"{source} has no split {recipe.validation_split!r}: evaluating on its first {size}{total} rows, held out of "
          f"training (eval_size {size})", flush=True)
    recipe.held_out = size
    kept = {_digest(row) for row in held}
    if not streamed:
        others = (d for batch in rows.select(range(size, count)).iter(batch_size=1000) for d in _digests(batch))
        rest = [size + i for i, digest in enumerate(others) if digest not in kept]
        copies = count - size - len(rest)
        if copies:
            print(f"{source}: left {copies} rows out of training, each identical to one of the {size} held out "
                  f"(eval_size): the model would be scored on rows it trained on", flush=True)
        if not rest:
            raise _nothing_left(source, size)
        recipe.kept_rows, recipe.held_out_copies = rest.__getitem__, lambda: copies
        return held, rows.select(rest)
    left_out = RowsLeftOut(lambda batch: [digest not in kept for digest in _digests(batch)], rows.n_shards, size)
    rest = rows.filter(left_out.keep, batched=True, batch_size=1000, with_indices=True)
    if next(iter(rest.take(1)), None) is None:  # read up to the first row left, as training reads it
        raise _nothing_left(source, size)
    counted = ("counted as it reads them, in results.json's held_out_copies at the end of the run" if rows.n_shards == 1
               else f"uncounted: its {rows.n_shards} shards are read in lanes side by side, each numbering its rows "
                    f"from 0, so rows of two lanes could not be told apart")
    print(f"{source}: rows identical to a held-out row are left out of training as the stream reads them ({counted})",
          flush=True)
    recipe.kept_rows, recipe.held_out_copies = left_out.row_of, left_out.count
    return datasets.Dataset.from_list(held, features=rows.features), rest


def _nothing_left(source: str, size: int) -> RecipeError:
    return RecipeError(f"recipe key 'eval_size' is {size}: {source} has no row after its first {size}, held out to "
                       f"evaluate on, that is not identical to a held-out one: nothing would be left to train on; set "
                       f"a smaller eval_size, or give validation_file")


def _digest(row: dict) -> bytes:
    return hashlib.blake2b(repr(sorted(row.items())).encode(), digest_size=16).digest()


def _digests(batch: dict) -> list[bytes]:
    """The `_digest` of every row of a batch (columns of values)."""
    return [_digest(dict(zip(batch, values))) for values in zip(*batch.values())]


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


def check_sequence_room(recipe: Recipe, tokenizer, texts: int, what: str, minimum: int | None = None,
                        argument: str = "recipe key 'max_seq_length'") -> None:
    """Refuse a `max_seq_length` that leaves no token of text once the task's template has added its special tokens
    (BERT pair: 3, GPT classification: 2 or 3, seq2seq: 1): tokenizers skip a truncation they cannot honour, and a
    template alone trains (or is scored) on nothing. `minimum` overrides the template's count (a causal block needs 2
    tokens); `argument` names the setting (`lineage evaluate`'s flag)."""
    overhead = tokenizer.num_special_tokens_to_add(pair=texts == 2)
    needed = minimum if minimum is not None else overhead + texts
    if recipe.max_seq_length < needed:
        raise RecipeError(f"{argument} is {recipe.max_seq_length}, below the minimum of {needed} for "
                          f"{what} ({overhead} special tokens and at least one token of each of {texts} text(s))")


QA_SPECIAL_TOKENS = 3  # [CLS] question [SEP] context [SEP]: BERT's pair template (question answering is BERT's)


def qa_doc_stride(max_seq_length: int, doc_stride: int | None = None) -> int:
    """The context tokens a question-answering window shares with the next: `doc_stride` (the recipe's), else a
    quarter of the window."""
    return max_seq_length // 4 if doc_stride is None else doc_stride


def question_room_problem(max_seq_length: int, max_query_length: int, positions: int | None = None,
                          doc_stride: int | None = None) -> str | None:
    """Why windows of `max_seq_length` tokens cannot hold a question of `max_query_length` tokens, the template's
    special tokens and more context than the doc stride (`qa_doc_stride`), or None. Past that, a long enough question
    makes the fast tokenizer panic in Rust ("`stride` must be strictly less than `max_len`") instead of raising. The
    advice keeps within the model's `positions` (None: unknown)."""
    stride = qa_doc_stride(max_seq_length, doc_stride)
    room = max_seq_length - QA_SPECIAL_TOKENS - max_query_length  # the context a window holds beside the question
    if room > stride:
        return None
    rule = "max_seq_length // 4" if doc_stride is None else "doc_stride"
    problem = (f"max_seq_length {max_seq_length} cannot hold a question of max_query_length {max_query_length} "
               f"tokens, {QA_SPECIAL_TOKENS} special tokens and more context than the doc stride of {stride} tokens "
               f"({rule}, the context each window repeats from the one before)")
    # the least n with n - stride(n) > query + specials
    shortest = (4 * (max_query_length + QA_SPECIAL_TOKENS) // 3 + 1 if doc_stride is None
                else max_query_length + QA_SPECIAL_TOKENS + doc_stride + 1)
    longest = _longest_question(max_seq_length, doc_stride)
    shorter = [f"max_query_length to at most {longest}"] if longest >= 1 else []
    lower = [f"doc_stride to at most {room - 1}"] if room >= 1 else []
    if positions is None or shortest <= positions:
        return f"{problem}: set {', or '.join([f'max_seq_length to at least {shortest}', *shorter, *lower])}"
    most = _longest_question(positions, doc_stride)
    wider = ([f"max_seq_length to {positions} and max_query_length to at most {most}"]
             if max_seq_length < positions and most > max(longest, 0) else [])
    held = (f"{problem}; the model's {positions} positions (max_position_embeddings) cannot hold the {shortest} tokens "
            f"that question needs")
    advice = shorter + wider + lower
    return f"{held}: set {', or '.join(advice)}" if advice else f"{held}: use a model of more positions"


def _longest_question(max_seq_length: int, doc_stride: int | None = None) -> int:
    """The most tokens of a question that windows of `max_seq_length` tokens hold (`question_room_problem`)."""
    return max_seq_length - QA_SPECIAL_TOKENS - qa_doc_stride(max_seq_length, doc_stride) - 1


__all__ = ["QA_SPECIAL_TOKENS", "check_sequence_room", "column_texts", "load_split", "load_splits", "qa_doc_stride",
           "question_room_problem", "row_texts"]
