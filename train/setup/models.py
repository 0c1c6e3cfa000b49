"""Where a run's model comes from: `--model` resolved once, the same way by every command that takes one.

`resolve_model(name, revision)`: a `config.json` or saved folder, a preset, or a Hub repo id (offline: from the
cache only; configs, safetensors and tokenizer files, never code), holding a Lineage model or a transformers
reference checkpoint that `modeling.conversion` converts and checks against the reference before anything is
written. `model_source` refuses a family the command does not train and what the recipe and config alone show will
fail; `build_model` gives the model to train. Errors name the argument (`ModelSourceError`, a `RecipeError`).
docs/pretrained.md ("What `--model` accepts", "Refusals").
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import math
import re
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers
from accelerate import PartialState
from safetensors import SafetensorError, safe_open

import modeling
from modeling.conversion import CONVERSIONS, from_transformers, to_transformers
from train.data.collators import padded_length
from train.data.tokenization import check_tokenizer_matches_model, config_kwargs_from_tokenizer
from train.run import distributed, publish
from train.run.checkpoints import STATE_FILE
from train.run.recipes import MODEL_TYPE_KEYS, Recipe, RecipeError, trackers
from train.run.run_log import check_tracker_login
from train.setup.presets import available_presets, check_model_overrides, load_model_config

CONVERSION_TOLERANCE = 1e-4  # largest |logit difference| accepted between a checkpoint and its conversion (fp32)


CHECK_TOKENS = 8  # tokens of the conversion check


LINEAGE_MODEL_TYPES = {c.model_type: family for c, family in (
    (modeling.LineageBertConfig, "bert"), (modeling.LineageGptConfig, "gpt"),
    (modeling.LineageTransformerConfig, "seq2seq"), (modeling.LineageRnnConfig, "seq2seq"))}


REFERENCE_CLASSES = {c.reference_class.__name__: c for c in CONVERSIONS}


# the class a checkpoint of another head of a supported family loads as (its head left out)
BASE_CLASSES = {"bert": "BertModel", "openai-gpt": "OpenAIGPTModel", "gpt2": "GPT2Model", "marian": "MarianMTModel"}


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


# what is fetched from a Hub repo: configs, safetensors weights, tokenizer files (never code or pickles)
HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.spm", "README.md"]


class ModelSourceError(RecipeError):
    """`--model` (or the recipe key `model`) names nothing this installation can start from."""


class ModelNotFoundError(ModelSourceError, FileNotFoundError):
    """`--model` is no preset, file, folder or Hub repo id."""


class UnsupportedCheckpointError(ModelSourceError):
    """A checkpoint of an architecture that `modeling.conversion` does not convert."""


class ConversionCheckError(ModelSourceError):
    """A converted checkpoint's outputs differ from the reference's by more than `CONVERSION_TOLERANCE`."""


@dataclass
class ModelSource:
    """A resolved `--model`: `kind` is `preset` (a preset or config.json: fresh weights), `lineage` or `reference`
    (a folder, downloaded for a Hub id); `config` is the Lineage config (converted for a reference)."""

    name: str
    kind: str
    config: transformers.PreTrainedConfig
    folder: Path | None = None
    repo_id: str | None = None
    revision: str | None = None  # the commit of a Hub snapshot
    reference_class: str | None = None
    report: dict[str, Any] = field(default_factory=dict)  # what loading found (`load_model`), for results and card

    @property
    def pretrained(self) -> bool:
        return self.folder is not None

    @property
    def family(self) -> str:
        """`bert`, `gpt` or `seq2seq`: the model's family, which its tokenizer follows."""
        return LINEAGE_MODEL_TYPES[self.config.model_type]

    def describe(self) -> str:
        """The source as a model card and a log line name it."""
        if not self.pretrained:
            return f"preset `{self.name}` (fresh weights)"
        where = f"`{self.repo_id}` (revision {self.revision})" if self.repo_id else f"`{self.name}`"
        converted = f", a transformers `{self.reference_class}` converted to Lineage" if self.reference_class else ""
        return where + converted

    def card_text(self) -> str:
        """The model card's sentence on where the weights started, with the conversion check."""
        text = f"Started from {self.describe()}."
        if "conversion_max_abs_diff" in self.report:
            text += (f" The converted model's outputs were within {self.report['conversion_max_abs_diff']:.2g} of the "
                     f"reference on {CHECK_TOKENS} tokens (fp32) before training.")
        if "added_embedding_rows" in self.report:
            text += (f" {self.report['added_embedding_rows']} embedding rows were added for the tokens added to its "
                     "tokenizer (initialised to the mean of the existing rows).")
        return text


def lineage_version() -> str:
    try:
        return importlib.metadata.version("lineage")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def resolve_model(name: str, revision: str | None = None, argument: str = "--model",
                  revision_argument: str = "recipe key 'model_revision'") -> ModelSource:
    """The `ModelSource` of `name`; nothing is loaded but configs. `argument` names the flag, for the errors."""
    path = Path(name)
    hub = not path.exists() and "/" in name and HUB_ID.fullmatch(name) is not None
    if revision is not None and not hub:
        raise ModelSourceError(f"{revision_argument} ({revision!r}) selects a version of a Hub repo; "
                               f"{argument} {name!r} is a local file, folder or preset: leave it unset")
    if path.is_dir():
        return _read_folder(name, path, argument)
    if hub:
        folder, commit = _download(name, revision, argument)
        source = _read_folder(name, folder, argument)
        source.repo_id, source.revision = name, commit
        return source
    if path.is_file() and path.suffix == ".json":
        _read_config(name, path, argument)
    elif "/" in name or name not in available_presets():
        raise ModelNotFoundError(f"{argument} {name!r} is neither a preset ({', '.join(available_presets())}), a "
                                 "config.json file, a model folder nor a Hub repo id (org/name)")
    return ModelSource(name, "preset", load_model_config(name))


def _download(repo_id: str, revision: str | None, argument: str) -> tuple[Path, str]:
    """The snapshot folder of a Hub repo in the Hugging Face cache (fetched unless `HF_HUB_OFFLINE=1`) and its
    commit."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    at = f" at revision {revision!r}" if revision else ""
    try:
        folder = Path(snapshot_download(repo_id, revision=revision, allow_patterns=HUB_FILES))
    except LocalEntryNotFoundError:
        if constants.HF_HUB_OFFLINE:
            raise ModelSourceError(
                f"{argument} {repo_id!r}{at} is no local folder, and as a Hub repo id it is not in the Hugging Face "
                f"cache ({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE=1 forbids downloading it: download it once with "
                "the network on, or unset HF_HUB_OFFLINE") from None
        raise ModelSourceError(f"{argument} {repo_id!r}{at} could not be downloaded (no network?) and is not "
                               f"in the Hugging Face cache ({constants.HF_HUB_CACHE})") from None
    except RevisionNotFoundError:
        raise ModelSourceError(f"recipe key 'model_revision': {revision!r} is no branch, tag or commit of "
                               f"{repo_id!r}") from None
    except RepositoryNotFoundError:
        raise ModelSourceError(f"{argument} {repo_id!r} is no Hub repo you can read (a private repo needs "
                               "`hf auth login`)") from None
    return folder, folder.name


def missing_config_hint(folder: Path) -> str:
    """The advice that ends the refusal of a folder without config.json given as a model, where it is a run's folder
    or one of the run's checkpoints (the weights and training state of a step, which no command loads as a model)."""
    if (folder / "model" / "config.json").is_file():
        return f" (a run saves its model in {folder / 'model'})"
    if not (folder / STATE_FILE).is_file():
        return ""
    published = folder.parent.parent / "model"
    where = (f"its run's model is {published}" if (published / "config.json").is_file()
             else "its run has published no model yet")
    return (f" (a run's checkpoint: the weights and training state of one step, without the model's config; {where}, "
            "and lineage average makes a model folder of it, or of the mean of several)")


def _read_folder(name: str, folder: Path, argument: str) -> ModelSource:
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ModelSourceError(f"{argument} {name!r} is not a saved model folder: it has no config.json"
                               f"{missing_config_hint(folder)}")
    fields = _read_config(name, config_file, argument)
    model_type = fields.get("model_type")
    if model_type in LINEAGE_MODEL_TYPES:
        _check_weights(name, folder, argument)
        return ModelSource(name, "lineage", transformers.AutoConfig.from_pretrained(folder), folder)
    if str(model_type).startswith("lineage-"):
        raise ModelSourceError(
            f"{argument} {name!r} holds a {model_type!r} model, which this installation of Lineage "
            f"({lineage_version()}) does not know (it knows {', '.join(sorted(LINEAGE_MODEL_TYPES))}): upgrade the "
            "lineage package, or load the folder with trust_remote_code=True outside Lineage's commands")
    architecture = (fields.get("architectures") or [None])[0]
    if architecture not in REFERENCE_CLASSES:
        architecture = BASE_CLASSES.get(model_type)
    if architecture is None:
        shown = (fields.get("architectures") or ["a model"])[0]
        raise UnsupportedCheckpointError(
            f"{argument} {name!r} holds {shown} (model_type {model_type!r}), which Lineage cannot convert; supported "
            f"checkpoints are Lineage models and the transformers classes {', '.join(sorted(REFERENCE_CLASSES))} "
            "(other heads of these families load as their base model)")
    _check_weights(name, folder, argument)
    reference_config = transformers.AutoConfig.from_pretrained(folder)
    try:
        config = REFERENCE_CLASSES[architecture].config_to_lineage(reference_config)
    except ValueError as error:
        raise UnsupportedCheckpointError(f"{argument} {name!r}: this {architecture} does not convert: {error}") \
            from None
    return ModelSource(name, "reference", config, folder, reference_class=architecture)


def _read_config(name: str, config_file: Path, argument: str) -> dict[str, Any]:
    """The fields of a config.json, refused naming the file (and json's line and column) unless it is UTF-8 JSON
    holding an object."""
    try:
        fields = json.loads(config_file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise ModelSourceError(f"{argument} {name!r}: {config_file} is not UTF-8 text (byte {error.start}); "
                               "re-save it (save_pretrained writes it)") from None
    except json.JSONDecodeError as error:
        raise ModelSourceError(f"{argument} {name!r}: {config_file} is not valid JSON (line {error.lineno}, column "
                               f"{error.colno}: {error.msg}); fix it or re-save it (save_pretrained writes it)") \
            from None
    if not isinstance(fields, dict):
        raise ModelSourceError(f"{argument} {name!r}: {config_file} holds a JSON {_JSON_TYPES[type(fields)]}, not an "
                               "object of config fields; re-save it (save_pretrained writes it)")
    return fields


_JSON_TYPES = {list: "list", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _check_weights(name: str, folder: Path, argument: str) -> None:
    """safetensors weights present, and each file whole: its header read (not its tensors) and checked against the
    file's size, so a truncated download fails here rather than when the model loads."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        other = [p.name for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".h5", ".msgpack")]
        extra = f" (found {', '.join(other)}, which is not read: pickled weights can run code)" if other else ""
        raise ModelSourceError(f"{argument} {name!r} has a config.json but no safetensors weights{extra}; give a "
                               "folder that save_pretrained or a run wrote (a run publishes <output_dir>/model)")
    for file in files:
        try:
            with safe_open(file, "pt"):
                pass
        except SafetensorError as error:
            reason = str(error).removeprefix("Error while deserializing header: ")
            raise ModelSourceError(
                f"{argument} {name!r}: {file} is truncated or not a safetensors file ({reason}); re-save it "
                "(save_pretrained) or download it again") from None


@contextmanager
def _exact_kernels(model: torch.nn.Module):
    """Lineage's linear layers on `F.linear`, the reference's kernel (their `fast_cpu_inference` switch off), so the
    check measures the conversion only."""
    classes = {type(m) for m in model.modules() if hasattr(type(m), "fast_cpu_inference")}
    own = {c: vars(c)["fast_cpu_inference"] for c in classes if "fast_cpu_inference" in vars(c)}
    for c in classes:
        c.fast_cpu_inference = False
    try:
        yield
    finally:
        for c in classes:
            if c in own:
                c.fast_cpu_inference = own[c]
            else:
                del c.fast_cpu_inference


def conversion_difference(reference: torch.nn.Module, converted: torch.nn.Module) -> float:
    """Largest |difference| of the two models' main output (logits, else hidden states) on `CHECK_TOKENS` seeded
    token ids, in fp32 and eval mode."""
    config = converted.config
    ids = torch.randint(0, config.vocab_size, (1, CHECK_TOKENS), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if config.is_encoder_decoder:
        inputs["decoder_input_ids"] = ids[:, : CHECK_TOKENS // 2]
    outputs = []
    with _exact_kernels(converted), torch.no_grad():
        for model in (reference, converted):
            was_training = model.training
            outputs.append(model.eval()(**inputs))
            model.train(was_training)
    key = next(k for k in ("logits", "prediction_logits", "start_logits", "last_hidden_state") if k in outputs[0])
    return (outputs[0][key] - outputs[1][key]).abs().max().item()


# weights a BertForMaskedLM checkpoint may hold beyond its class (the published bert-base-uncased holds them all)
_PRETRAINING_ONLY = {"bert.pooler.dense.weight", "cls.seq_relationship.weight"}


def _class_to_load(source: ModelSource) -> str:
    """The reference class to read the checkpoint with: its own, or BertForPreTraining for a BertForMaskedLM one that
    holds the pooler and NSP head too, which BertForMaskedLM would drop (the classification heads start from the
    trained pooler, as transformers' BertForSequenceClassification does)."""
    if source.reference_class != "BertForMaskedLM":
        return source.reference_class
    names = set()
    for file in source.folder.glob("*.safetensors"):
        with safe_open(file, "pt") as weights:
            names.update(weights.keys())
    return "BertForPreTraining" if _PRETRAINING_ONLY <= names else source.reference_class


def convert_checked(source: ModelSource, argument: str = "--model") -> tuple[torch.nn.Module, float]:
    """The converted Lineage model of a reference checkpoint and the check's difference; `ConversionCheckError`
    above the tolerance."""
    reference_class = getattr(transformers, _class_to_load(source))
    reference = reference_class.from_pretrained(source.folder, use_safetensors=True, attn_implementation="eager",
                                                dtype=torch.float32)  # the check in fp32, whatever the file holds
    converted = from_transformers(reference)
    difference = conversion_difference(reference, converted)
    if not difference <= CONVERSION_TOLERANCE:
        why = ("the checkpoint uses a setting modeling.conversion does not carry over" if math.isfinite(difference)
               else "the outputs are not finite: the weights hold NaN or infinite values")
        raise ConversionCheckError(
            f"{argument} {source.name!r}: the converted {type(converted).__name__} differs from the reference "
            f"{source.reference_class} by {difference:.3g} (largest |logit difference| on {CHECK_TOKENS} tokens, "
            f"fp32; the limit is {CONVERSION_TOLERANCE:g}): {why}. Nothing was trained or written")
    return converted, difference


def load_backbone(auto, folder: str, overrides: dict[str, Any]):
    """A saved model under a (possibly different) head. transformers' LOAD REPORT of the head keys it leaves out or
    initializes is replaced by one line; a missing or reshaped backbone weight still warns."""
    reporter = logging.getLogger("transformers.modeling_utils")
    report_filter = _DropLoadReport()
    reporter.addFilter(report_filter)
    try:
        model, info = auto.from_pretrained(folder, ignore_mismatched_sizes=True, output_loading_info=True, **overrides)
    finally:
        reporter.removeFilter(report_filter)
    new = sorted(info["missing_keys"] | {k[0] if isinstance(k, tuple) else k for k in info["mismatched_keys"]})
    backbone = [k for k in new if k.startswith(model.base_model_prefix + ".")]
    if backbone:
        warnings.warn(f"{folder}: backbone weights missing or of another shape, initialized afresh: {backbone}",
                      stacklevel=2)
    if new or info["unexpected_keys"]:
        PartialState().print(f"{type(model).__name__} from {folder}: initialized {', '.join(new) or 'nothing'}; "
                             f"left out {', '.join(sorted(info['unexpected_keys'])) or 'nothing'}")
    return model


class _DropLoadReport(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "LOAD REPORT" not in record.getMessage()


def load_model(source: ModelSource, auto_class: str | None = None, overrides: dict[str, Any] | None = None,
               argument: str = "--model") -> torch.nn.Module:
    """The model of a pretrained source under `auto_class`'s head (None: the saved class); what the load found
    goes to `source.report` (`base_model`, `base_model_revision`, `converted_from`, `conversion_max_abs_diff`)."""
    overrides = overrides or {}
    report = source.report
    report["base_model"] = source.repo_id or source.name
    if source.revision:
        report["base_model_revision"] = source.revision
    if source.kind == "lineage":
        if auto_class is None:
            architecture = (source.config.architectures or [""])[0]
            model_class = getattr(modeling, architecture, None)
            if model_class is None:
                raise ModelSourceError(f"{argument} {source.name!r}: unknown architecture {architecture!r} in its "
                                       "config.json")
            return model_class.from_pretrained(source.folder, **overrides)
        return load_backbone(getattr(transformers, auto_class), str(source.folder), overrides)
    converted, difference = convert_checked(source, argument)
    report.update(converted_from=source.reference_class, conversion_max_abs_diff=difference)
    PartialState().print(f"model: {source.describe()}: {type(converted).__name__}, outputs within {difference:.2g} "
                         f"of the reference on {CHECK_TOKENS} tokens (fp32, limit {CONVERSION_TOLERANCE:g})")
    if auto_class is None:
        return converted
    with tempfile.TemporaryDirectory(prefix="lineage-converted-") as staging:  # never inside output_dir
        converted.save_pretrained(staging)
        return load_backbone(getattr(transformers, auto_class), staging, overrides)


def reference_of(model: torch.nn.Module) -> tuple[torch.nn.Module, float]:
    """The transformers reference model of a Lineage model and the largest output difference between them."""
    reference = to_transformers(model)
    return reference, conversion_difference(reference, model)


def fit_embeddings(model: torch.nn.Module, tokenizer) -> dict[str, Any]:
    """Grow the model's vocabulary to the tokenizer's, new rows the mean of the existing ones; the config's special
    ids follow the tokenizer. Returns `{"added_embedding_rows": n}` when rows were added. The rows are for tokens
    added to the tokenizer: one whose vocabulary without them outgrows the model is refused before
    (`run_tokenizer.pretrained_tokenizer`)."""
    embedding = model.get_input_embeddings()
    old, new = embedding.weight.shape[0], len(tokenizer)
    report = {}
    if new > old:
        head = model.get_output_embeddings()
        tied = head is not None and head.weight is embedding.weight
        logits_bias = getattr(model, "final_logits_bias", None)  # (1, V), Marian's
        logits_bias = None if logits_bias is None else logits_bias.clone()
        model.resize_token_embeddings(new, mean_resizing=False)
        embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
        with torch.no_grad():
            tensors = [embedding.weight] + ([] if head is None or tied else [head.weight])
            tensors += [head.bias] if head is not None and getattr(head, "bias", None) is not None else []
            for tensor in tensors:
                tensor[old:] = tensor[:old].mean(0)
            if logits_bias is not None:
                added = logits_bias.mean(-1, keepdim=True).expand(1, new - old)  # (1, new - old)
                model.final_logits_bias = torch.cat([logits_bias, added], -1)
        PartialState().print(f"embeddings: {old} -> {new} rows for the tokenizer's added tokens (mean of the "
                             "existing rows)")
        report["added_embedding_rows"] = new - old
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        value = getattr(tokenizer, name, None)
        if value is not None and hasattr(model.config, name):
            setattr(model.config, name, value)
    return report


# recipe keys that size the tokenizer a run trains (`run_tokenizer.corpus_tokenizer`), which a pretrained model never is
TOKENIZER_TRAINING_KEYS = ("tokenizer_vocab_size", "tokenizer_train_size")


def model_source(recipe: Recipe, command: str, families: tuple[str, ...], generates: bool = False) -> ModelSource:
    """`recipe.model` resolved, refused unless its family is one of `families`, where the user set a key that models
    of its type do not read (`MODEL_TYPE_KEYS`) or a key that sizes a tokenizer for a pretrained model, which brings
    its own, and checked (`check_before_start`)."""
    source = resolve_model(recipe.model, recipe.model_revision, argument="recipe key 'model'")
    model_type = source.config.model_type
    if source.family not in families:
        raise RecipeError(f"recipe key 'model': {command} trains {' or '.join(families)} models; {recipe.model!r} is a "
                          f"{model_type} model")
    for key in sorted(recipe.set_by_user & MODEL_TYPE_KEYS.keys()):
        if model_type not in MODEL_TYPE_KEYS[key]:
            raise RecipeError(f"recipe key {key!r} is read for {' and '.join(MODEL_TYPE_KEYS[key])} models only; "
                              f"recipe key 'model' {recipe.model!r} is a {model_type} model, which would ignore it "
                              f"while its recipe.yaml showed it as used: drop it")
    unread = [key for key in TOKENIZER_TRAINING_KEYS if key in recipe.set_by_user]
    if source.pretrained and unread:
        one = len(unread) == 1
        raise RecipeError(f"recipe {'key' if one else 'keys'} {' and '.join(map(repr, unread))} "
                          f"{'sizes' if one else 'size'} the tokenizer a run trains; recipe key 'model' "
                          f"{recipe.model!r} is a pretrained model, trained with its own tokenizer or recipe key "
                          f"'tokenizer' (never a freshly trained vocabulary): drop {'it' if one else 'them'}")
    check_before_start(recipe, source.config, generates)
    return source


def model_positions(recipe: Recipe, config) -> int | None:
    """The positions of the model the recipe trains (`max_position_embeddings`, as the recipe overrides it); None for a
    model without a limit (an RNN)."""
    return recipe.model_overrides.get("max_position_embeddings", getattr(config, "max_position_embeddings", None))


def check_before_start(recipe: Recipe, config, generates: bool = False) -> None:
    """Refuse what the recipe and the model's config alone show will fail, before a tokenizer is trained or a file
    written: lengths against the model's positions, a precision this machine cannot run, a hosted tracker without a
    login and a Hub upload that cannot succeed."""
    positions = model_positions(recipe, config)
    length, multiple = recipe.max_seq_length, recipe.pad_to_multiple_of
    if positions is not None and length > positions:
        raise RecipeError(f"recipe key 'max_seq_length' is {length} but the model has {positions} positions "
                          f"(max_position_embeddings)")
    padded = padded_length(length, multiple)
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
    check_tracker_login(trackers(recipe.report_to))
    if recipe.push_to_hub:
        publish.check_push(recipe.push_to_hub)


def build_model(recipe: Recipe, auto_class: str, tokenizer, family: str, source: ModelSource | None = None,
                **fields: Any):
    """The model to train: a pretrained source's weights with a (possibly new) head, or a fresh one from a preset;
    refused (`TokenizerMismatchError`) when `tokenizer` can produce an id it has no embedding for."""
    source = source or resolve_model(recipe.model, recipe.model_revision, argument="recipe key 'model'")
    check_model_overrides(recipe.model_overrides, source.config)
    overrides = {**fields, **recipe.model_overrides}
    if source.pretrained:
        check_keeps_weights(source, recipe.model_overrides)
        model = load_model(source, auto_class, overrides, argument="recipe key 'model'")
        source.report.update(fit_embeddings(model, tokenizer))
    else:
        auto = getattr(transformers, auto_class)
        token_fields = {} if "vocab_size" in recipe.model_overrides else config_kwargs_from_tokenizer(tokenizer, family)
        model = auto.from_config(load_model_config(recipe.model, **{**token_fields, **overrides}))
    check_tokenizer_matches_model(tokenizer, model.config)
    return model


def meta_model(config, auto_class: str = "AutoModel", overrides: dict[str, Any] | None = None) -> torch.nn.Module:
    """The model `auto_class` builds of `config` with `overrides` on top, on the meta device: its modules and shapes
    without weights, for checks before any work."""
    if overrides:
        config = config.__class__.from_dict({**config.to_dict(), **overrides})
    with torch.device("meta"):
        return getattr(transformers, auto_class).from_config(config)


def check_keeps_weights(source: ModelSource, overrides: dict[str, Any]) -> None:
    """Refuse `model_overrides` that change the shape or number of a pretrained model's weights: they would be
    initialized afresh while the card says the run started from the model. Compared on the meta device."""
    changed = {k: v for k, v in overrides.items() if getattr(source.config, k, None) != v}
    if not changed:
        return

    def shapes(**changes: Any) -> dict[str, tuple]:
        return {name: tuple(p.shape) for name, p in meta_model(source.config, overrides=changes).state_dict().items()}

    if shapes(**changed) != shapes():
        saved = ", ".join(f"{k}={getattr(source.config, k, None)!r}" for k in changed)
        raise RecipeError(f"recipe key 'model_overrides': {', '.join(f'{k}={v!r}' for k, v in changed.items())} "
                          f"change the shapes of the weights of the pretrained model {source.name!r} (saved with "
                          f"{saved}), which would then be initialized afresh instead of loaded; drop them to fine-tune "
                          f"its weights, or start from a preset to train from scratch")


__all__ = ["CONVERSION_TOLERANCE", "ConversionCheckError", "ModelNotFoundError", "ModelSource", "ModelSourceError",
           "UnsupportedCheckpointError", "build_model", "check_before_start", "check_keeps_weights",
           "conversion_difference", "convert_checked", "fit_embeddings", "load_model", "meta_model", "model_positions",
           "model_source", "reference_of", "resolve_model"]
