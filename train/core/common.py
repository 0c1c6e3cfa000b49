"""What every entry script wires the same way: data splits, the tokenizer, the model, and the run summary.

- `load_splits(recipe, columns)`: the training and validation splits; each (`load_split`) from
  `train_file` / `validation_file` when given, else `recipe.dataset` (`embedded:<task>`, a file, or a Hub name)
  through `train.core.data.load_text_dataset`; a missing file raises before anything is built. With `streaming` the
  training split is a stream (`datasets.IterableDataset`); validation is read whole.
- `model_source(recipe, command, kinds)`: `recipe.model` resolved (`train.core.sources.resolve_model`: preset,
  config.json, Lineage folder or Hub id, transformers reference checkpoint), refused unless its family is one the
  command trains; then `check_before_start`: lengths against the model's positions, the precision, the Hub upload.
- `get_tokenizer(recipe, kind, texts, source)`: for a pretrained source the checkpoint's own tokenizer (or
  `recipe.tokenizer`, checked against it) completed with the tokens Lineage's templates need
  (`sources.pretrained_tokenizer`); for a preset `recipe.tokenizer` if set, else one trained on the first
  `recipe.tokenizer_train_size` characters of `texts()` with `recipe.tokenizer_vocab_size` tokens, or the same one
  reused from the cache (`tokenization.reused_or_trained`). A pretrained model is never paired with a freshly
  trained vocabulary.
- `build_model(recipe, auto_class, tokenizer, kind, source)`: a pretrained source's weights (converted and checked
  for a reference checkpoint) under the head `auto_class`, its embeddings grown to the tokenizer's added tokens
  (`sources.fit_embeddings`); or a fresh model from a preset whose vocabulary and special ids are taken from the
  tokenizer (unless `model_overrides` sets `vocab_size` explicitly; the engine then checks the two agree).
- `check_sequence_room(recipe, tokenizer, texts, what)`: a `max_seq_length` that leaves room for text.
- `forward_options(model, **options)`: training options passed to every forward call of a block (sparse prediction,
  unpadding), never stored in the config; `unpadding_on_gpu(model, device)`: BERT's unpadding on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import datasets
import torch
import transformers
from accelerate import PartialState
from accelerate.utils import parse_flag_from_env

import modeling  # noqa: F401  (registers the Lineage families with the Auto classes)
from train.core import checkpoints, distributed, publish, run_folder, sources
from train.core.batching import check_stream
from train.core.data import Columns, UnknownColumnError, load_text_dataset
from train.core.recipes import Recipe, RecipeError, check_model_overrides, load_model_config, trackers
from train.core.run_log import check_tracker_login
from train.core.tokenization import config_kwargs_from_tokenizer, load_tokenizer, reused_or_trained


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "spiece.model")


COLUMN_ADVICE = "name the right one with the recipe keys text_column, text_pair_column and label_column, or rename it"


def load_split(recipe: Recipe, split: str, columns: Columns = (), default_dataset: str = "",
               column_advice: str = COLUMN_ADVICE):
    """One split (`train` or `validation`) of the recipe's data (`Recipe.data_source`), `.txt` files cut into rows as
    `text_sample_by` says. The embedded corpus is made with `train_size` / `eval_size` rows; a user's file or Hub
    dataset is cut to them (its first rows) only when the user set the key, not when a shipped recipe did, and a
    cut, or a size left unapplied, is printed with both counts. A column the data lacks is refused with
    `column_advice` (which keys of the command name the columns).

    With `streaming`, the training split is a `datasets.IterableDataset` read as training goes (a recipe that cannot
    train from one is refused first: `batching.check_stream`), cut by `.take(n)`; the validation split is read whole
    as without it, except a Hub dataset's, which is streamed into memory (so that no split of a Hub corpus is
    downloaded whole)."""
    key = "train_size" if split == "train" else "eval_size"
    size, file = getattr(recipe, key), recipe.train_file if split == "train" else recipe.validation_file
    source = recipe.data_source(split, default_dataset)
    if not source:
        raise RecipeError("the recipe names no data: set 'dataset' (e.g. embedded:nli) or 'train_file'")
    embedded = source.startswith("embedded:")
    if split != "train" and file is None and (recipe.train_file or Path(source).exists()):
        return None  # local training files and no validation file: no evaluation
    streamed = recipe.streaming and (split == "train" or (file is None and not embedded))
    if recipe.streaming and split == "train":
        check_stream(recipe.max_steps, recipe.dataloader_num_workers)
    kwargs = ({"size": size, "seed": recipe.seed} if embedded
              else {"hub_config": recipe.dataset_config, "text_sample_by": recipe.text_sample_by})
    try:
        dataset = load_text_dataset(source, split, columns=columns, streaming=streamed, **kwargs)
    except UnknownColumnError as error:
        raise UnknownColumnError(f"{error}: {column_advice}") from None
    if streamed and not embedded:  # its length is unknown: cut by the user's key, never counted
        if size is not None and key in recipe.set_by_user:
            print(f"{key} {size}: using the first {size} rows of {source} (streamed)", flush=True)
            dataset = dataset.take(size)
        elif size is not None:
            print(f"{source}: streaming all its rows (the shipped recipe's {key} {size} sizes the embedded corpus; "
                  f"set --{key} to cut your data)", flush=True)
        if split != "train":  # evaluation reads its data whole, each time
            dataset = datasets.Dataset.from_list(list(dataset), features=dataset.features)
    elif size is not None and not embedded and len(dataset) > size:
        if key in recipe.set_by_user:
            print(f"{key} {size}: using the first {size} of the {len(dataset)} rows of {source}", flush=True)
            dataset = dataset.select(range(size))
        else:
            print(f"{source}: using all {len(dataset)} rows (the shipped recipe's {key} {size} sizes the embedded "
                  f"corpus; set --{key} to cut your data)", flush=True)
    return dataset


def load_splits(recipe: Recipe, columns: Columns = (), default_dataset: str = "", column_advice: str = COLUMN_ADVICE):
    """`(train, validation)`: both splits of the recipe's data (`load_split`); validation may be None. Refused first:
    a validation file without a training file (the run would train on the recipe's dataset), the same file for both
    (the figures would be training figures), `dataset_config` for data that is no Hub dataset."""
    train, validation = recipe.train_file, recipe.validation_file
    if validation and not train:
        raise RecipeError(f"recipe key 'validation_file' is {validation!r} but 'train_file' is not set: the run would "
                          f"train on {recipe.data_source('train', default_dataset)!r} and evaluate on your file; set "
                          f"train_file too, or drop validation_file")
    if train and validation and Path(train).resolve() == Path(validation).resolve():
        raise RecipeError(f"recipe keys 'train_file' and 'validation_file' both name {train!r}: the evaluation figures "
                          f"would be figures on the training data; give held-out data as validation_file, or drop it "
                          f"(no evaluation)")
    source = recipe.data_source("train", default_dataset)
    if recipe.dataset_config and (source.startswith("embedded:") or Path(source).exists()):
        raise RecipeError(f"recipe key 'dataset_config' is {recipe.dataset_config!r}, which selects a configuration "
                          f"of a Hub dataset; this run reads {source!r}: drop it, or name the Hub dataset with "
                          f"'dataset'")
    return (load_split(recipe, "train", columns, default_dataset, column_advice),
            load_split(recipe, "validation", columns, default_dataset, column_advice))


def model_source(recipe: Recipe, command: str, kinds: tuple[str, ...], generates: bool = False) -> sources.ModelSource:
    """`recipe.model` resolved, refused unless its family (`bert`, `gpt`, `seq2seq`) is one of `kinds`; then every
    check that needs no data (`check_before_start`; `generates`: the command generates text after training)."""
    source = sources.resolve_model(recipe.model, recipe.model_revision, argument="recipe key 'model'")
    if source.family not in kinds:
        raise RecipeError(f"recipe key 'model': {command} trains {' or '.join(kinds)} models; {recipe.model!r} is a "
                          f"{source.config.model_type} model")
    check_before_start(recipe, source.config, generates)
    return source


def check_before_start(recipe: Recipe, config, generates: bool = False) -> None:
    """Refuse what the recipe and the model's config alone show will fail, before a tokenizer is trained or a file
    written: `max_seq_length`, `pad_to_multiple_of` and (`generates`) `max_new_tokens` against the model's positions,
    a checkpoint to resume from that does not exist,
    a precision this machine cannot run (`distributed.resolve_mixed_precision`), a hosted tracker without a login
    (`run_log.check_tracker_login`) and a Hub upload that cannot succeed (`publish.check_push`)."""
    positions = recipe.model_overrides.get("max_position_embeddings",
                                           getattr(config, "max_position_embeddings", None))  # an RNN has no limit
    length, multiple = recipe.max_seq_length, recipe.pad_to_multiple_of
    if positions is not None and length > positions:
        raise RecipeError(f"recipe key 'max_seq_length' is {length} but the model has {positions} positions "
                          f"(max_position_embeddings)")
    padded = -(-length // multiple) * multiple if multiple else length
    if positions is not None and padded > positions:
        raise RecipeError(f"recipe key 'pad_to_multiple_of' is {multiple}: a batch of {length}-token rows "
                          f"(max_seq_length) would be padded to {padded}, beyond the model's {positions} positions; "
                          f"give a value whose first multiple at or above {length} is at most {positions} (a divisor "
                          f"of {length}, such as 8)")
    if generates and positions is not None and recipe.max_new_tokens >= positions:
        raise RecipeError(f"recipe key 'max_new_tokens' is {recipe.max_new_tokens} but the model has {positions} "
                          f"positions, one of them at least for the prompt (or the decoder's start token): "
                          f"max_new_tokens must be in [1, {positions - 1}]")
    distributed.resolve_mixed_precision(recipe.mixed_precision)
    checkpoints.resume_path(recipe.resume_from_checkpoint, Path(recipe.output_dir) / "checkpoints")
    check_tracker_login(trackers(recipe.report_to))
    if recipe.push_to_hub:
        publish.check_push(recipe.push_to_hub)


def get_tokenizer(recipe: Recipe, kind: str, texts: Callable[[], Iterable[str]],
                  source: sources.ModelSource | None = None, templates: bool = True, data_key: str | None = None):
    """The run's tokenizer (module docstring, `corpus_tokenizer`). One trained here is saved in
    `<output_dir>/tokenizer` and reused on resume (training is reproducible, but the data a resumed run reads could
    have changed since)."""
    source = source or sources.resolve_model(recipe.model, recipe.model_revision, argument="recipe key 'model'")
    if source.pretrained or recipe.tokenizer:
        return corpus_tokenizer(recipe, kind, texts, source, templates)
    trained = Path(recipe.output_dir) / "tokenizer"
    if recipe.resume_from_checkpoint and (trained / "tokenizer.json").is_file():
        return load_tokenizer(trained, kind)
    with one_process_first() as main:  # one process trains, the others load its vocabulary
        if main:
            run_folder.claim(recipe)  # before the first file written into output_dir
            tokenizer = corpus_tokenizer(recipe, kind, texts, source, templates, data_key)
            tokenizer.save_pretrained(trained)
            run_folder.record_written(recipe, "tokenizer")
        else:
            tokenizer = load_tokenizer(trained, kind)
    return tokenizer


def corpus_tokenizer(recipe: Recipe, kind: str, texts: Callable[[], Iterable[str]], source: sources.ModelSource,
                     templates: bool = True, data_key: str | None = None):
    """The tokenizer a run of `recipe` on its data uses, written nowhere but the tokenizer cache: a pretrained
    source's own (`sources.pretrained_tokenizer`), `recipe.tokenizer`, or one trained on `texts()` (or reused from
    the cache: `tokenization.reused_or_trained`, found by `data_key` when the data has one:
    `prepared.data_key`)."""
    if source.pretrained:
        return sources.pretrained_tokenizer(source, recipe.tokenizer, templates=templates)
    if recipe.tokenizer:
        if not Path(recipe.tokenizer).exists():
            raise FileNotFoundError(f"tokenizer folder {recipe.tokenizer!r} does not exist")
        folder = Path(recipe.tokenizer)
        if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILES):
            raise FileNotFoundError(f"recipe key 'tokenizer': folder {recipe.tokenizer!r} holds no tokenizer (none of "
                                    f"{', '.join(TOKENIZER_FILES)}); give a folder written by save_pretrained or "
                                    f"python -m train.train_tokenizer")
        return load_tokenizer(recipe.tokenizer, kind, argument="recipe key 'tokenizer'")
    return reused_or_trained(kind, texts, recipe.tokenizer_vocab_size, sample_size=recipe.tokenizer_train_size,
                             model_max_length=recipe.max_seq_length, data_key=data_key)


@contextmanager
def one_process_first() -> Iterator[bool]:
    """Run the block in the main process first and then in the others (whether this is the main process is
    yielded), before the Accelerator exists: one process writes what the others then read."""
    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))  # "CPU" as the Accelerator will say
    with state.main_process_first():
        yield state.is_main_process


def column_texts(dataset, column: str = "text") -> Iterator[str]:
    """The texts of `column`, read a thousand rows at a time (never the whole column in memory)."""
    for batch in dataset.iter(batch_size=1000):
        yield from batch[column]


def check_sequence_room(recipe: Recipe, tokenizer, texts: int, what: str, minimum: int | None = None) -> None:
    """Refuse a `max_seq_length` that leaves no token of text once the task's template has added its special tokens
    (BERT pair: 3, GPT classification: 2 or 3, seq2seq: 1): tokenizers skip a truncation they cannot honour, and a
    template alone trains on nothing. `minimum` overrides the template's count (a causal block needs 2 tokens)."""
    overhead = tokenizer.num_special_tokens_to_add(pair=texts == 2)
    needed = minimum if minimum is not None else overhead + texts
    if recipe.max_seq_length < needed:
        raise RecipeError(f"recipe key 'max_seq_length' is {recipe.max_seq_length}, below the minimum of {needed} for "
                          f"{what} ({overhead} special tokens and at least one token of each of {texts} text(s))")


def build_model(recipe: Recipe, auto_class: str, tokenizer, kind: str, source: sources.ModelSource | None = None,
                **fields: Any):
    """The model to train: a pretrained source's weights with a (possibly new) head, or a fresh one from a preset."""
    source = source or sources.resolve_model(recipe.model, recipe.model_revision, argument="recipe key 'model'")
    check_model_overrides(recipe.model_overrides, source.config)
    overrides = {**fields, **recipe.model_overrides}
    if source.pretrained:
        check_keeps_weights(source, recipe.model_overrides)
        model = sources.load_model(source, auto_class, overrides, argument="recipe key 'model'")
        source.report.update(sources.fit_embeddings(model, tokenizer))
    else:
        auto = getattr(transformers, auto_class)
        token_fields = {} if "vocab_size" in recipe.model_overrides else config_kwargs_from_tokenizer(tokenizer, kind)
        model = auto.from_config(load_model_config(recipe.model, **{**token_fields, **overrides}))
    return model


def check_keeps_weights(source: sources.ModelSource, overrides: dict[str, Any]) -> None:
    """Refuse `model_overrides` that change the shape or number of a pretrained model's weights: they would be
    initialized afresh, not loaded, while the card and results say the run started from the model. Compared on
    the meta device (no memory, no weights)."""
    changed = {k: v for k, v in overrides.items() if getattr(source.config, k, None) != v}
    if not changed:
        return

    def shapes(config) -> dict[str, tuple]:
        with torch.device("meta"):
            model = transformers.AutoModel.from_config(config)
        return {name: tuple(p.shape) for name, p in model.state_dict().items()}

    altered = source.config.__class__.from_dict({**source.config.to_dict(), **changed})
    if shapes(altered) != shapes(source.config):
        saved = ", ".join(f"{k}={getattr(source.config, k, None)!r}" for k in changed)
        raise RecipeError(f"recipe key 'model_overrides': {', '.join(f'{k}={v!r}' for k, v in changed.items())} "
                          f"change the shapes of the weights of the pretrained model {source.name!r} (saved with "
                          f"{saved}), which would then be initialized afresh instead of loaded; drop them to fine-tune "
                          f"its weights, or start from a preset to train from scratch")


@contextmanager
def forward_options(model: torch.nn.Module, **options: Any) -> Iterator[None]:
    """Pass training options to every call of `model` within the block (the engine's training and evaluation steps):
    keyword arguments of the Lineage heads' `forward` (`sparse_prediction`, `unpad_inputs`) that change how a step
    computes, never what the model is, so neither its saved config nor the engine carries them. A keyword the call
    gives itself wins."""
    if not options:
        yield
        return

    def add_options(module, args, kwargs):
        return args, {**options, **kwargs}

    handle = model.register_forward_pre_hook(add_options, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def unpadding_on_gpu(model, device: torch.device) -> dict[str, bool]:
    """The forward option that trains a Lineage BERT unpadded (`unpad_inputs=True`, MosaicBERT: no compute on
    padding) on a GPU; none for other families and devices."""
    return {"unpad_inputs": True} if model.config.model_type == "lineage-bert" and device.type == "cuda" else {}

__all__ = ["build_model", "check_before_start", "check_keeps_weights", "check_sequence_room", "column_texts",
           "corpus_tokenizer", "forward_options", "get_tokenizer", "load_split", "load_splits", "model_source",
           "one_process_first", "unpadding_on_gpu"]
