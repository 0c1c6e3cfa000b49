"""Training recipes: one typed, flat set of fields read from YAML and overridden on the command line.

`load_recipe(path, overrides)` reads a recipe (by name from the shipped ones, `bundled`, or by path), applies
`--key value` overrides (parsed as YAML) and checks every key and type before anything is built (`RecipeError` names
the key); `parse_args` is every command's command line; `Recipe.data_source` is the one place that decides what a run
reads (the command's own data declared once with `Recipe.reading`). docs/training.md ("Recipes").
"""


from __future__ import annotations

import argparse
import dataclasses
import math
import re
import types
import typing
import warnings
from collections.abc import Iterable
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import yaml

CONFIGS = files("train") / "configs"  # package data: the folders of BUNDLED
BUNDLED = {"models": ".json", "recipes": ".yaml", "accelerate": ".yaml"}  # folder -> the suffix of its files
SCHEDULES = ("linear", "cosine", "inverse_sqrt", "constant")
MIXED_PRECISION = ("auto", "no", "fp16", "bf16")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# numeric recipe keys: (lowest, highest, whether the lowest is allowed, whether the highest is); None: unbounded
RANGES = {
    "learning_rate": (0, None, False, False), "weight_decay": (0, None, True, False),
    "adam_beta1": (0, 1, True, False), "adam_beta2": (0, 1, True, False), "adam_epsilon": (0, None, False, False),
    "max_grad_norm": (0, None, True, False), "warmup_steps": (0, None, True, False),
    "warmup_ratio": (0, 1, True, False),
    "mlm_probability": (0, 1, False, False), "lm_loss_weight": (0, None, True, False),
    "label_smoothing": (0, 1, True, False), "train_size": (1, None, True, False), "eval_size": (1, None, True, False),
    "tokenizer_vocab_size": (1, None, True, False), "tokenizer_train_size": (1, None, True, False),
    "max_seq_length": (1, None, True, False), "max_query_length": (1, None, True, False),
    "doc_stride": (0, None, True, False), "null_score_diff_threshold": (-math.inf, None, False, False),
    "num_beams": (1, None, True, False), "max_new_tokens": (1, None, True, False),
    "per_device_train_batch_size": (1, None, True, False), "per_device_eval_batch_size": (1, None, True, False),
    "gradient_accumulation_steps": (1, None, True, False), "logging_steps": (1, None, True, False),
    "eval_steps": (0, None, True, False), "save_steps": (0, None, True, False),
    "max_train_seconds": (0, None, True, False), "num_train_epochs": (0, None, True, False),
    "length_penalty": (-math.inf, None, False, False),
    "save_total_limit": (1, None, True, False), "dataloader_num_workers": (0, None, True, False),
    "average_last_checkpoints": (0, None, True, False),
    "num_proc": (1, None, True, False),
    "pad_to_multiple_of": (1, None, True, False),
    "seed": (0, 2**32 - 1, True, True),
    "peak_tflops": (0, None, False, False),
}
LORA_KEYS = ("r", "alpha", "dropout", "target_modules")
# recipe keys only some commands read -> those commands: set by the user for another command, a key is refused (it
# would be recorded in recipe.yaml as if it had acted), and a card shows only the keys its run read (`reads`)
COMMAND_KEYS = {
    **dict.fromkeys(("task", "lora", "text_pair_column", "label_column", "skip_unlabeled", "allow_single_class",
                     "lm_loss_weight", "max_query_length", "doc_stride", "null_score_diff_threshold"), ("finetune",)),
    "text_column": ("finetune", "pretrain_gpt", "pretrain_bert"),
    **dict.fromkeys(("nsp", "mlm_probability"), ("pretrain_bert",)),
    **dict.fromkeys(("pack_documents", "sample_prompts"), ("pretrain_gpt",)),
    **dict.fromkeys(("label_smoothing", "num_beams", "length_penalty", "beam_search", "source_column",
                     "target_column"),
                    ("train_translation",)),
    "max_new_tokens": ("pretrain_gpt", "train_translation"),
}
# finetune's keys that only some of its tasks read -> those tasks, refused for another as COMMAND_KEYS are
TASK_KEYS = dict.fromkeys(("max_query_length", "doc_stride", "null_score_diff_threshold"), ("question-answering",))
# keys that only models of some types read -> those model types: set by the user for a model of another type, refused
# (`train.setup.models.model_source`: the model is known there)
MODEL_TYPE_KEYS = {"lm_loss_weight": ("lineage-gpt",)}
PAPER_ADAM = {"adam_beta2": 0.98, "adam_epsilon": 1e-9}  # "Attention Is All You Need" 5.3, with inverse_sqrt
PATH_KEYS = ("model", "tokenizer", "dataset", "train_file", "validation_file", "output_dir", "resume_from_checkpoint")
_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


class RecipeError(ValueError):
    """A recipe key or value that the training scripts cannot use."""


class RecipeNotFoundError(RecipeError, FileNotFoundError):
    """`--recipe` names neither a file nor a shipped recipe."""


def bundled(kind: str) -> dict[str, Traversable]:
    """Name -> file of every shipped config of `kind` (`models`: presets, `recipes`, `accelerate`), by name."""
    if kind not in BUNDLED:
        raise ValueError(f"unknown config kind {kind!r}; kinds: {', '.join(BUNDLED)}")
    suffix = BUNDLED[kind]
    found = {f.name.removesuffix(suffix): f for f in (CONFIGS / kind).iterdir() if f.name.endswith(suffix)}
    return dict(sorted(found.items()))


# the keys that say where a run writes and how it is watched, not what it trains (`Recipe.training_dict`)
_OUTPUT_KEYS = ("output_dir", "resume_from_checkpoint", "overwrite_output_dir", "progress_bar", "push_to_hub",
                "peak_tflops")


@dataclasses.dataclass
class Recipe:
    """Every field a training script reads. Scripts ignore the fields that do not concern them."""

    # what to train
    model: str = "bert-tiny"  # preset, config.json, model folder or Hub id (Lineage or reference; train.setup.models)
    model_overrides: dict = dataclasses.field(default_factory=dict)  # config fields set on top of the preset
    model_revision: str | None = None  # Hub branch, tag or commit of `model` when it is a Hub id (None: main)
    tokenizer: str | None = None  # tokenizer folder; None: the model folder's, else one trained on the data
    tokenizer_vocab_size: int = 4000
    tokenizer_train_size: int | None = 200_000_000  # characters of training text a tokenizer learns from (None: all)
    task: str = ""  # finetune: sequence-classification | nli | regression | token-classification | question-answering
    # data: "embedded:<task>" (the generated default corpus), a local file, or a Hub dataset name
    dataset: str = ""
    dataset_config: str | None = None
    validation_split: str = "validation"  # the split of `dataset` (or a saved DatasetDict) that evaluates
    train_file: str | None = None
    validation_file: str | None = None
    text_column: str | None = None
    text_pair_column: str | None = None
    label_column: str | None = None
    # train_translation: the columns of a pair (None: source, target); translation.de: the entry de of the column
    # translation (the Hub's translation datasets)
    source_column: str | None = None
    target_column: str | None = None
    skip_unlabeled: bool = False  # finetune: skip rows labelled -1 (GLUE test splits) or without a score, counted
    allow_single_class: bool = False  # classification: train on data of one class (refused by default: a sorted file)
    text_sample_by: str = "auto"  # a .txt file's rows: line | paragraph | document | auto (paragraphs if blank lines)
    streaming: bool = False  # read the data as a stream (no full read before step 1): by max_steps, in file order
    num_proc: int | None = None  # processes that tokenize and pack a corpus (None: one per CPU core)
    train_size: int | None = None  # rows of the training split to use (None: all)
    eval_size: int | None = None
    max_seq_length: int = 128
    max_query_length: int = 64  # question-answering: the tokens of a question kept (BERT's run_squad.py: 64)
    # question-answering: the context tokens a window repeats from the one before (run_qa.py's doc_stride; None:
    # max_seq_length // 4)
    doc_stride: int | None = None
    # question-answering: no answer where [CLS] outscores the best span by more than this (logits; run_qa.py's name,
    # BERT's tau, section 4.3), where questions may have none
    null_score_diff_threshold: float = 0.0
    # objectives
    mlm_probability: float = 0.15
    nsp: bool = True
    lm_loss_weight: float = 0.5  # GPT fine-tuning: weight of the auxiliary language-model loss
    label_smoothing: float | None = None  # None: the model config's
    num_beams: int = 4
    length_penalty: float = 1.0  # beam search: a hypothesis's log-probability is divided by its length to this power
    beam_search: str = "transformers"  # or gnmt: the paper's, dividing by ((5 + length) / 6) ** length_penalty
    max_new_tokens: int = 64
    sample_prompts: list = dataclasses.field(default_factory=list)
    lora: dict | None = None  # finetune: train a LoRA adapter (peft) with keys r, alpha, dropout, target_modules
    # optimisation
    per_device_train_batch_size: int = 32
    per_device_eval_batch_size: int = 64
    gradient_accumulation_steps: int = 1
    learning_rate: float = 1e-4
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    max_grad_norm: float = 1.0
    lr_scheduler: str = "linear"
    warmup_steps: int = 0
    warmup_ratio: float | None = None  # warmup as a share of the optimizer steps (GPT 0.002, BERT fine-tuning 0.1)
    max_steps: int = -1  # > 0 overrides num_train_epochs
    num_train_epochs: float = 1.0
    max_train_seconds: float = 0.0  # > 0: stop after the optimizer step that passes this much training time
    mixed_precision: str = "auto"  # auto: bf16 (or fp16) on a GPU, no on a CPU
    gradient_checkpointing: bool = False  # recompute each block's activations in the backward (transformers' API)
    compile: bool = False  # torch.compile the model's forward (and so its backward) before training
    compile_mode: str | None = None  # torch.compile mode (COMPILE_MODES); None: PyTorch's default
    pack_documents: bool = True  # causal-LM pretraining: full blocks of documents, positions and attention per document
    pad_to_multiple_of: int | None = None  # pad each batch to a multiple of this length: few shapes to compile
    seed: int = 42
    # evaluation, logging, checkpoints, outputs
    eval_steps: int = 0  # 0: evaluate at the end only
    logging_steps: int = 10
    peak_tflops: float | None = None  # the device's dense peak TFLOP/s for the log's MFU (None: train.run.flops' table)
    save_steps: int = 0  # 0: checkpoint at the end only
    save_total_limit: int = 2
    average_last_checkpoints: int = 0  # >= 2: the published model is the mean of the last N checkpoints (0: off)
    output_dir: str = "outputs/run"
    resume_from_checkpoint: str | None = None  # "latest" or a checkpoint folder
    allow_data_change: bool = False  # resume on training data changed since the checkpoint (else refused, file named)
    overwrite_output_dir: bool = False  # delete another run's files in output_dir (each named) and start over
    push_to_hub: str | None = None  # a Hub repo id; the final folder is uploaded only when set
    report_to: str | list = "tensorboard"  # Accelerate trackers: a name, several (list or "a,b"), "all" or "none"
    ddp_find_unused_parameters: bool = False
    dataloader_num_workers: int = 0
    progress_bar: bool = True

    # the keys the user set (in their own recipe file or on the command line), not a shipped recipe's: a shipped
    # recipe's `train_size` cuts the embedded corpus or the Hub corpus it names, never a user's files
    # (`train.setup.splits.load_split`, `load_recipe`)
    set_by_user = frozenset()  # no field: a class attribute, set per recipe by `recipe_from_dict`
    # the shipped recipe the keys came from and the keys it set (`load_recipe`): another command's is refused
    shipped = ("", frozenset())
    # the command that reads the recipe (`parse_args`; "": unknown), whose keys alone its card shows (`reads`)
    command = ""
    # the command's own data, read when the recipe names none (`reading`); no field either, so the recipe's keys, hash
    # and saved file stay as the user wrote them
    default_dataset = ""
    # rows of the training split held out to evaluate on, where the data has no validation split and the user set
    # `eval_size` (`train.setup.splits.load_splits`): what the run evaluated on, for its messages and card
    held_out = 0
    # the file's row of each training row left once they are held out (`held_out`) and their copies left out: what
    # messages name a training row by (`split_name`)
    kept_rows = None  # (int) -> int
    # the columns the run reads (`train.setup.splits.load_splits`), which say which files of a folder it reads
    read_columns = ()
    # how many training rows identical to a held-out row were left out, for results.json at the end of the run (a
    # stream counts as it reads; None: a count that could not be exact)
    held_out_copies = None  # () -> int | None
    # the rows `skip_unlabeled` left out of a stream as it read them, for results.json at the end (as above)
    skipped_unlabeled = None  # () -> int | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def training_dict(self) -> dict[str, Any]:
        """The keys that say what the run trains, without those that say where it writes and how it is watched (a
        run's identity for its hash and for what changed on resume)."""
        return {k: v for k, v in self.to_dict().items() if k not in _OUTPUT_KEYS}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    def replace(self, **changes: Any) -> Recipe:
        """A copy with `changes` applied (unchecked), keeping which keys the user set."""
        copy = dataclasses.replace(self, **changes)
        copy.set_by_user, copy.default_dataset, copy.shipped = self.set_by_user, self.default_dataset, self.shipped
        copy.command = self.command
        copy.held_out, copy.kept_rows, copy.held_out_copies = self.held_out, self.kept_rows, self.held_out_copies
        copy.skipped_unlabeled = self.skipped_unlabeled
        copy.read_columns = self.read_columns
        return copy

    def reading(self, default_dataset: str) -> Recipe:
        """A copy whose `data_source` falls back to `default_dataset`, the command's own data (`embedded:<task>`)."""
        copy = self.replace()
        copy.default_dataset = default_dataset
        return copy

    def data_source(self, split: str = "train", default: str | None = None) -> str:
        """What the run reads for `split` (`train` or `validation`): its file when given (a validation split without
        one: the training file's, which only a saved DatasetDict has), else `dataset`, else `default` (None: the
        command's, `reading`). The loader, the checkpoint identity and the card all read this."""
        file = self.train_file if split == "train" else self.validation_file or self.train_file
        return file or self.dataset or (self.default_dataset if default is None else default)

    def pair_columns(self) -> tuple:
        """The columns of a translation pair whose two files a data path may name by their prefix
        (`train.data.pair_files.pair_files`): `train_translation`'s; none for another command."""
        if self.command != "train_translation":
            return ()
        from train.data.pair_files import pair_columns

        return pair_columns(self.source_column, self.target_column)

    def pair_files(self, split: str = "train") -> tuple[Path, Path] | None:
        """The two files of a translation pair that `data_source(split)` names by their prefix (`data/train`:
        `data/train.en`, `data/train.de`), for `train_translation`; else None."""
        from train.data.pair_files import pair_files

        return pair_files(self.data_source(split), self.pair_columns())

    def data_files(self, split: str = "train") -> list[Path] | None:
        """The local files the run reads for `split` (`train.data.files.data_files` of `data_source(split)` and
        `read_columns`), which a checkpoint fingerprints; None for the embedded corpus, a saved dataset, a Hub name."""
        from train.data.files import data_files

        return data_files(self.data_source(split), self.read_columns or self.pair_columns())

    def split_name(self, split: str = "train", default: str | None = None) -> str:
        """`data_source` as messages name it: a file as it is, a dataset's validation split as `<name> (validation)`;
        where rows are held out, a `FileRows` whose rows `row_location` finds in the file (`kept_rows`)."""
        source = self.data_source(split, default)
        if self.held_out:
            from train.data.table_files import FileRows  # transformers, torch: not for every command reading a recipe

            return (FileRows(source, source, self.kept_rows) if split == "train"
                    else FileRows(f"{source} ({self.evaluated_split})", source, _same_row))
        named_file = self.train_file if split == "train" else self.validation_file
        return source if named_file or split == "train" else f"{source} ({self.evaluated_split})"

    @property
    def evaluated_split(self) -> str:
        """The split of `dataset` the run evaluates on: `validation_split` or `train[:N]`, its first N rows held out."""
        return f"train[:{self.held_out}]" if self.held_out else self.validation_split


def _same_row(row: int) -> int:
    """The file's row of a held-out row: the rows held out are the file's first."""
    return row


def valid_keys() -> list[str]:
    return [f.name for f in dataclasses.fields(Recipe)]


def _type_name(tp) -> str:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))


# YAML 1.1 reads a bare `no` as false: `mixed_precision: no` (Accelerate's name for full precision), in a recipe or as
# `--mixed_precision no`, means the word
_YAML_BOOLEAN_WORDS = {"mixed_precision": {False: "no"}}


def _coerce(key: str, value: Any, tp) -> Any:
    """`value` as type `tp`, or a `RecipeError` naming the key, the expected type and the value."""
    if isinstance(value, bool) and value in _YAML_BOOLEAN_WORDS.get(key, {}):
        value = _YAML_BOOLEAN_WORDS[key][value]
    options = typing.get_args(tp) if isinstance(tp, types.UnionType) else (tp,)
    for option in options:
        if option is type(None) and value is None:
            return None
        if option is bool and isinstance(value, bool):
            return value
        if option is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if option is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if option is float and isinstance(value, str) and _FLOAT.match(value.strip()):
            return float(value)
        if option is str and isinstance(value, str):
            return value
        if option in (list, dict) and isinstance(value, option):
            return value
    if float in options and isinstance(value, str) and value.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
        raise RecipeError(f"recipe key {key!r} expects a finite number, got {value!r}")
    raise RecipeError(f"recipe key {key!r} expects {_type_name(tp)}, got {type(value).__name__} {value!r}")


def _check_choices(recipe: Recipe) -> None:
    if recipe.lr_scheduler not in SCHEDULES:
        raise RecipeError(f"recipe key 'lr_scheduler' must be one of {', '.join(SCHEDULES)}, "
                          f"got {recipe.lr_scheduler!r}")
    if recipe.mixed_precision not in MIXED_PRECISION:
        raise RecipeError(f"recipe key 'mixed_precision' must be one of {', '.join(MIXED_PRECISION)}, "
                          f"got {recipe.mixed_precision!r}")
    from train.data.files import TEXT_SAMPLE_BY

    if recipe.text_sample_by not in TEXT_SAMPLE_BY:
        raise RecipeError(f"recipe key 'text_sample_by' must be one of {', '.join(TEXT_SAMPLE_BY)}, "
                          f"got {recipe.text_sample_by!r}")
    from modeling.beam_search import BEAM_SEARCHES

    if recipe.beam_search not in BEAM_SEARCHES:
        raise RecipeError(f"recipe key 'beam_search' must be one of {', '.join(BEAM_SEARCHES)}, got "
                          f"{recipe.beam_search!r}")
    if recipe.compile_mode is not None and recipe.compile_mode not in COMPILE_MODES:
        raise RecipeError(f"recipe key 'compile_mode' must be one of {', '.join(COMPILE_MODES)} (or null), "
                          f"got {recipe.compile_mode!r}")
    trackers(recipe.report_to)
    for key, bounds in RANGES.items():
        _check_range(key, getattr(recipe, key), *bounds)
    if recipe.max_steps <= 0 and recipe.num_train_epochs <= 0:
        raise RecipeError(f"recipe keys 'max_steps' and 'num_train_epochs': set max_steps > 0 or num_train_epochs > 0, "
                          f"got {recipe.max_steps} and {recipe.num_train_epochs}")
    if recipe.lora is not None:
        _check_lora(recipe.lora)
    _check_averaging(recipe)
    for index, prompt in enumerate(recipe.sample_prompts):
        if not isinstance(prompt, str) or not prompt.strip():
            hint = " (YAML reads a bare number as one: quote it)" if isinstance(prompt, (int, float)) else ""
            raise RecipeError(f"recipe key 'sample_prompts': item {index} is {type(prompt).__name__} {prompt!r}; "
                              f"every prompt must be non-empty text{hint}")


def _check_averaging(recipe: Recipe) -> None:
    """`average_last_checkpoints` needs that many checkpoints kept, and checkpoints before the final one."""
    n = recipe.average_last_checkpoints
    if n == 1:
        raise RecipeError("recipe key 'average_last_checkpoints' is 1, the last checkpoint alone: give 0 (off) or "
                          "2 or more")
    if n > recipe.save_total_limit:
        raise RecipeError(f"recipe key 'average_last_checkpoints' is {n} but 'save_total_limit' keeps "
                          f"{recipe.save_total_limit} checkpoints: raise save_total_limit to at least {n}")
    if n and recipe.save_steps <= 0:
        raise RecipeError(f"recipe key 'average_last_checkpoints' is {n} but 'save_steps' is {recipe.save_steps}, "
                          "so only the final checkpoint is written: set save_steps > 0")


def trackers(report_to: str | list) -> list[str]:
    """The Accelerate trackers `report_to` names ([]: none; "all": every installed one), or a `RecipeError` for an
    unknown or uninstalled one (Accelerate would drop it without a word)."""
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS, get_available_trackers

    names = [n.strip() for n in report_to.split(",")] if isinstance(report_to, str) else list(report_to)
    installed = [str(t) for t in get_available_trackers()]
    if names == ["all"]:
        return installed
    if names in (["none"], [""], []):
        return []
    known = list(LOGGER_TYPE_TO_CLASS)
    bad = [n for n in names if n not in known]
    if bad:
        raise RecipeError(f"recipe key 'report_to' must be none, all, or one or several (a list or 'a,b') of "
                          f"{', '.join(known)}; got {report_to!r}")
    missing = [n for n in names if n not in installed]
    if missing:
        needs = "; ".join(f"tracker {n!r} needs the package {n}" for n in missing)
        raise RecipeError(f"recipe key 'report_to': {needs}"
                          + f", which is not installed: pip install {' '.join(missing)} (or report_to: none)")
    return list(dict.fromkeys(names))


def _check_range(key: str, value, low, high, low_in: bool, high_in: bool) -> None:
    """A `RecipeError` naming the key and its interval unless `value` (None: the key is unset) lies in it."""
    if value is None:
        return
    top = math.inf if high is None else high  # unbounded above: any finite value
    if (value >= low if low_in else value > low) and (value <= top if high_in else value < top):
        return
    interval = f"{'[' if low_in else '('}{low}, {'inf' if high is None else high}{']' if high_in else ')'}"
    raise RecipeError(f"recipe key {key!r} must be in {interval}, got {value!r}")


def _check_lora(lora: dict) -> None:
    """`lora`: `r` (int >= 1), `alpha` (> 0), `dropout` (in [0, 1)), `target_modules` (names, or null for the
    family's default); every key optional."""
    unknown = [k for k in lora if k not in LORA_KEYS]
    if unknown:
        raise RecipeError(f"unknown key(s) {', '.join(map(repr, unknown))} in recipe key 'lora'; "
                          f"valid: {', '.join(LORA_KEYS)}")

    def number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    checks = {"r": (lambda v: number(v) and isinstance(v, int) and v >= 1, "an integer >= 1"),
              "alpha": (lambda v: number(v) and v > 0, "a number > 0"),
              "dropout": (lambda v: number(v) and 0 <= v < 1, "in [0, 1)"),
              "target_modules": (lambda v: v is None or (isinstance(v, list) and len(v) > 0
                                                          and all(isinstance(m, str) for m in v)),
                                 "a non-empty list of module names or null")}
    for key, value in lora.items():
        valid, expected = checks[key]
        if not valid(value):
            raise RecipeError(f"recipe key 'lora.{key}' must be {expected}, got {value!r}")


def recipe_from_dict(fields: dict[str, Any], source: str = "recipe", user_keys: Iterable[str] | None = None) -> Recipe:
    """A checked `Recipe` from a mapping of its fields; `user_keys` (default: every key of `fields`) are those the
    user set, as opposed to a shipped recipe's (`Recipe.set_by_user`)."""
    if not isinstance(fields, dict):
        raise RecipeError(f"{source} must be a YAML mapping of keys to values, got {type(fields).__name__}")
    hints = typing.get_type_hints(Recipe)
    unknown = [k for k in fields if k not in hints]
    if unknown:
        raise RecipeError(f"unknown recipe key(s) {', '.join(map(repr, unknown))} in {source}; "
                          f"valid keys: {', '.join(valid_keys())}")
    values = {k: _coerce(k, v, hints[k]) for k, v in fields.items()}
    for key in PATH_KEYS:  # `~/runs` as the shell would expand it: never a folder named ~ in the working folder
        if isinstance(values.get(key), str) and values[key].startswith("~"):
            values[key] = str(Path(values[key]).expanduser())
    recipe = Recipe(**values)
    if recipe.lr_scheduler == "inverse_sqrt":  # the Transformer paper's Adam, where the recipe names no other
        for key, value in PAPER_ADAM.items():
            if key not in fields:
                setattr(recipe, key, value)
    _check_choices(recipe)
    if recipe.streaming:
        check_stream(recipe.max_steps, recipe.dataloader_num_workers)
    recipe.set_by_user = frozenset(fields if user_keys is None else user_keys)
    if recipe.warmup_ratio is not None and {"warmup_steps", "warmup_ratio"} <= recipe.set_by_user:
        raise RecipeError(f"recipe keys 'warmup_steps' ({recipe.warmup_steps}) and 'warmup_ratio' "
                          f"({recipe.warmup_ratio}) both set the warmup: keep one")
    return recipe


def parse_overrides(argv: list[str]) -> dict[str, Any]:
    """`--key value`, `--key=value` and `--set key=value` pairs as a dict of YAML-parsed values; a boolean key given
    alone (`--streaming`, or before the next `--flag`) is true, as a command's switches are."""
    switches = {k for k, tp in typing.get_type_hints(Recipe).items() if tp is bool}
    out, i = {}, 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--set":
            if i + 1 >= len(argv) or "=" not in argv[i + 1]:
                raise RecipeError("--set expects key=value")
            key, raw = argv[i + 1].split("=", 1)
            i += 2
        elif arg.startswith("--") and "=" in arg:
            key, raw = arg[2:].split("=", 1)
            i += 1
        elif arg.startswith("--"):
            alone = i + 1 >= len(argv) or argv[i + 1].startswith("--")
            if alone and arg[2:].replace("-", "_") not in switches:
                raise RecipeError(f"{arg} expects a value" + ("" if i + 1 >= len(argv) else
                                  f", got the flag {argv[i + 1]} (a value that starts with -- goes as {arg}=VALUE)"))
            key, raw = arg[2:], "true" if alone else argv[i + 1]
            i += 1 if alone else 2
        else:
            raise RecipeError(f"unexpected command-line argument {arg!r}; use --key value or --set key=value")
        out[key.replace("-", "_")] = _yaml(raw, f"--{key}") if raw != "" else ""
    return out


def load_recipe(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> Recipe:
    """The recipe at `path` (YAML) with `overrides` applied on top, checked."""
    fields: dict[str, Any] = {}
    source, user = "recipe", set(overrides or {})
    if path is not None:
        recipes = bundled("recipes")
        file = Path(path) if Path(path).is_file() else recipes.get(_renamed(str(path)))
        if file is None:
            raise RecipeNotFoundError(f"recipe {str(path)!r} is neither a file nor a recipe name; recipe names: "
                                      f"{', '.join(recipes)}")
        source = str(path)
        fields = _yaml(file.read_text(), source) or {}
        if not isinstance(fields, dict):
            raise RecipeError(f"{source} must be a YAML mapping of keys to values")
        if Path(path).is_file():  # the user's own recipe file; a shipped recipe's keys are not the user's
            user |= set(fields)
        elif _reads_own_data(fields, user):  # a shipped recipe's sizes of the data it names itself (not embedded)
            user |= {key for key in ("train_size", "eval_size") if key in fields}
    recipe = recipe_from_dict({**fields, **(overrides or {})}, source, user)
    if path is not None and not Path(path).is_file():
        recipe.shipped = (str(path), frozenset(fields) - user)
    return recipe


def _reads_own_data(fields: dict[str, Any], overrides: set[str]) -> bool:
    """Whether a shipped recipe trains on the data it names (a Hub corpus, not the embedded one) and the command line
    names no other: its `train_size` / `eval_size` then size that data (`eval_size` holds rows of a corpus of one
    split out, `train.setup.splits.load_splits`)."""
    named = str(fields.get("dataset") or "")
    return bool(named) and not named.startswith("embedded:") and not overrides & {"dataset", "train_file"}


def _renamed(name: str) -> str:
    """The shipped recipe called `name` before it was renamed (`lineage-<arm>`, now `experiment-<arm>`), warning."""
    old, _, arm = name.partition("-")
    if old != "lineage" or f"experiment-{arm}" not in bundled("recipes"):
        return name
    warnings.warn(f"recipe {name!r} is now called 'experiment-{arm}'; the old name will be removed", FutureWarning,
                  stacklevel=3)
    return f"experiment-{arm}"


def _yaml(text: str, where: str) -> Any:
    """`text` parsed as YAML, or a `RecipeError` naming `where` (a file or an override) and the line and column."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise RecipeError(f"{where}:{at} is not valid YAML ({problem}); a value with a colon, # or brackets needs "
                          f"quotes") from None


def parse_args(argv: list[str] | None = None, default_recipe: str | None = None,
               description: str = "", command: str | None = None, *, recipe_required: str | None = None) -> Recipe:
    """Command line of every entry script: `--recipe PATH` plus field overrides; keys the user set that `command`
    does not read (`COMMAND_KEYS`) are refused. `recipe_required`: the refusal of a command line without `--recipe`
    (None: the defaults stand in)."""
    parser = argparse.ArgumentParser(description=description, add_help=True,
                                     epilog=f"Recipe keys (override with --key value): {', '.join(valid_keys())}")
    parser.add_argument("--recipe", default=default_recipe,
                        help="a recipe name (lineage configs recipes) or a YAML file")
    args, rest = parser.parse_known_args(argv)
    if args.recipe is None and recipe_required:
        raise RecipeError(recipe_required)
    recipe = load_recipe(args.recipe, parse_overrides(rest))
    if command:
        check_command_keys(recipe, command, f": {command} would ignore it, and its recipe.yaml would show it as used; "
                                            f"drop it")
        recipe.command = command
    return recipe


def reads(key: str, command: str, task: str, model_type: str | None = None) -> bool:
    """Whether a run of `command` ("": any) for `task` (finetune's; the other commands have none) on a model of
    `model_type` (None: any) reads the recipe key `key` (`COMMAND_KEYS`, `TASK_KEYS`, `MODEL_TYPE_KEYS`)."""
    return ((not command or command in COMMAND_KEYS.get(key, (command,))) and task in TASK_KEYS.get(key, (task,))
            and (model_type is None or model_type in MODEL_TYPE_KEYS.get(key, (model_type,))))


def check_command_keys(recipe: Recipe, command: str, consequence: str) -> None:
    """Refuse the keys the user set that `command` (for the recipe's task) does not read (`reads`), each named with
    the commands or tasks that do, then `consequence`; and a shipped recipe of another command (one that sets such a
    key)."""
    unread = sorted(k for k in recipe.set_by_user if not reads(k, command, recipe.task))
    if unread:
        raise RecipeError("; ".join(f"recipe key {k!r} is read by {' and '.join(COMMAND_KEYS[k])} only"
                                    if command not in COMMAND_KEYS.get(k, (command,)) else
                                    f"recipe key {k!r} is read by {command}'s task {' and '.join(TASK_KEYS[k])} only, "
                                    f"not by its task {recipe.task!r}" for k in unread) + consequence)
    name, keys = recipe.shipped
    theirs = sorted(k for k in keys if command not in COMMAND_KEYS.get(k, (command,)))
    if theirs:
        owners = sorted({owner for key in theirs for owner in COMMAND_KEYS[key]})
        raise RecipeError(f"recipe {name!r} is a recipe of {' or '.join(owners)} (it sets {', '.join(theirs)}), not "
                          f"of {command}: give a recipe of {command} (lineage configs recipes lists them) or your own "
                          f"file")


def check_stream(max_steps: int, dataloader_num_workers: int) -> None:
    """Refuse what a streamed run cannot do: size itself by epochs (a stream has no length), or read in loader
    workers (which read ahead, so a checkpoint's stream position would be past the trained batches)."""
    if max_steps <= 0:
        raise RecipeError(f"recipe key 'streaming' is true but 'max_steps' is {max_steps}: a stream has no length, so "
                          f"'num_train_epochs' cannot size the run; set max_steps > 0 (the stream is read again from "
                          f"its start whenever it ends before max_steps)")
    if dataloader_num_workers > 0:
        raise RecipeError(f"recipe key 'streaming' is true but 'dataloader_num_workers' is {dataloader_num_workers}: a "
                          f"stream is read in the training process, so that the position a checkpoint saves is exactly "
                          f"that of the trained batches (workers read ahead); set dataloader_num_workers to 0")


__all__ = ["BUNDLED", "COMMAND_KEYS", "COMPILE_MODES", "MODEL_TYPE_KEYS", "Recipe", "RecipeError", "SCHEDULES",
           "TASK_KEYS", "bundled", "check_command_keys", "check_stream", "load_recipe", "parse_args", "parse_overrides",
           "reads", "recipe_from_dict", "trackers", "valid_keys"]
