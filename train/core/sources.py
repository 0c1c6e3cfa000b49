"""Where a run's model comes from: `--model` resolved once, the same way by every command that takes one
(`finetune`, `pretrain_bert`, `pretrain_gpt`, `train_translation`, `attention_maps`, `export`, `benchmark`,
`convert`).

`resolve_model(name, revision)` reads `name` as, in this order:

- an existing `config.json` file, or a folder holding one (a saved model);
- a preset name (`train/configs/models/<name>.json`: a name without '/');
- a Hub repo id (`org/name`, exactly one '/'), fetched with `huggingface_hub.snapshot_download` at `revision`
  (the recipe key `model_revision`: a branch, tag or commit) into the Hugging Face cache; with `HF_HUB_OFFLINE=1`
  a cached repo loads and an uncached one is refused naming the id and the variable. Only configs, safetensors
  weights and tokenizer files are fetched: no code from the repository is downloaded or run.

A folder (local or downloaded) holds either a **Lineage** model (`model_type` `lineage-*`, loaded with the installed
classes, which `import modeling` registers) or a **transformers reference checkpoint** of a class that
`modeling.conversion` supports (BERT, OpenAI GPT, GPT-2, Marian and their heads; a checkpoint of another head of
those families loads as the base model). Its config.json must be a JSON object and each safetensors file whole (its
header is read against the file's size), or the folder is refused naming the file. A reference checkpoint is
converted on load (`modeling.conversion.from_transformers`), and the two models' outputs are compared on a few tokens
(`conversion_difference`, fp32, eager attention, exact linear kernels) before anything else happens; a difference
above `CONVERSION_TOLERANCE` stops the command before any file is written.

`pretrained_tokenizer` gives the checkpoint's own tokenizer with what Lineage's templates need and the checkpoint
lacks (GPT: `[START] [DELIM] [EXTRACT]`, a pad token and an end-of-text token; BERT: the pair template; Marian:
pad and end tokens); `fit_embeddings` adds the matching embedding rows (and output rows when untied),
initialised to the mean of the existing rows, and sets the config's token ids from the tokenizer.

Errors name the argument (`--model`, recipe key `model`, `tokenizer`): `ModelSourceError` (a `RecipeError`, so a
`ValueError`) and its subclasses `UnsupportedCheckpointError` and `ConversionCheckError`.
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
from tokenizers import processors

import modeling
from modeling.conversion import CONVERSIONS, from_transformers, to_transformers
from train.core.recipes import RecipeError, available_presets, load_model_config
from train.core.tokenization import END_OF_TEXT, GPT_SPECIAL_TOKENS, check_not_a_file

CONVERSION_TOLERANCE = 1e-4  # largest |logit difference| accepted between a checkpoint and its conversion (fp32)
CHECK_TOKENS = 8  # tokens of the conversion check
LINEAGE_MODEL_TYPES = {c.model_type: kind for c, kind in (
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
        """`bert`, `gpt` or `seq2seq` (the tokenizer kind of the model)."""
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
            text += (f" {self.report['added_embedding_rows']} embedding rows were added for the tokens Lineage's "
                     "templates need (initialised to the mean of the existing rows).")
        return text


def lineage_version() -> str:
    try:
        return importlib.metadata.version("lineage")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def resolve_model(name: str, revision: str | None = None, argument: str = "--model",
                  revision_argument: str = "recipe key 'model_revision'") -> ModelSource:
    """The `ModelSource` of `name` (module docstring); nothing is loaded but configs. `argument` and
    `revision_argument` name where `name` and `revision` came from, for the errors."""
    path = Path(name)
    hub = not path.exists() and "/" in name and HUB_ID.fullmatch(name) is not None
    if revision is not None and not hub:
        raise ModelSourceError(f"{revision_argument} ({revision!r}) selects a version of a Hub repo; "
                               f"{argument} {name!r} is a local file, folder or preset: leave it unset")
    if path.is_file() and path.suffix == ".json":
        _read_config(name, path, argument)
        return ModelSource(name, "preset", load_model_config(name))
    if path.is_dir():
        return _read_folder(name, path, argument)
    if "/" not in name and name in available_presets():
        return ModelSource(name, "preset", load_model_config(name))
    if hub:
        folder, commit = _download(name, revision, argument)
        source = _read_folder(name, folder, argument)
        source.repo_id, source.revision = name, commit
        return source
    raise ModelNotFoundError(f"{argument} {name!r} is neither a preset ({', '.join(available_presets())}), a "
                             "config.json file, a model folder nor a Hub repo id (org/name)")


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


def _read_folder(name: str, folder: Path, argument: str) -> ModelSource:
    config_file = folder / "config.json"
    if not config_file.is_file():
        hint = f" (a run saves its model in {folder / 'model'})" if (folder / "model" / "config.json").is_file() else ""
        raise ModelSourceError(f"{argument} {name!r} is not a saved model folder: it has no config.json{hint}")
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


# ----------------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------------


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


def convert_checked(source: ModelSource, argument: str = "--model") -> tuple[torch.nn.Module, float]:
    """The converted Lineage model of a reference checkpoint and the check's difference; `ConversionCheckError`
    above the tolerance."""
    reference_class = getattr(transformers, source.reference_class)
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
    """A saved model under a (possibly different) head. transformers logs a LOAD REPORT warning for every head
    key it leaves out or initializes: when fine-tuning a pretrained folder that is the plan, not a problem, so its
    report is replaced by one line; a warning remains for what would be a problem, a missing or reshaped
    backbone weight."""
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
        warnings.warn(f"{folder}: backbone weights missing or of another shape, initialized afresh: {backbone}")
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


# ----------------------------------------------------------------------------------------------------------
# The checkpoint's tokenizer, completed for Lineage's templates, and the embedding rows it adds
# ----------------------------------------------------------------------------------------------------------


def pretrained_tokenizer(source: ModelSource, tokenizer: str | None = None, templates: bool = True):
    """The tokenizer of a pretrained source (or `tokenizer`, the recipe key, checked against the checkpoint's),
    with the special tokens and templates the family's tasks need added (`templates`: GPT's classification
    templates; False for causal-LM training, which needs only a pad and an end-of-text token)."""
    own = own_tokenizer(source.folder)
    if tokenizer is not None:
        if not Path(tokenizer).exists():
            raise ModelSourceError(f"recipe key 'tokenizer': folder {tokenizer!r} does not exist")
        check_not_a_file(tokenizer, "recipe key 'tokenizer'")
        chosen = transformers.AutoTokenizer.from_pretrained(tokenizer)
        _check_same_vocabulary(chosen, own, source, tokenizer)
    elif own is None:
        raise ModelSourceError(
            f"--model {source.name!r} has no tokenizer files (tokenizer.json, vocab.txt, ...): a pretrained model is "
            "never paired with a freshly trained vocabulary; give the checkpoint's tokenizer with --tokenizer FOLDER")
    else:
        chosen = own
    before = len(chosen)
    added = _complete(chosen, source.family, templates)
    if added:
        PartialState().print(f"tokenizer: added {' '.join(added)} to the checkpoint's {type(chosen).__name__} "
                             f"({before} -> {len(chosen)} tokens)")
    return chosen


def own_tokenizer(folder: Path):
    """The tokenizer saved in a model folder, or None when it has none."""
    try:
        return transformers.AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError, TypeError):
        return None


def _check_same_vocabulary(chosen, own, source: ModelSource, name: str) -> None:
    """A `--tokenizer` must give every token the id the checkpoint's embedding rows were trained with."""
    if own is not None:
        theirs = own.get_vocab()
        ours = chosen.get_vocab()
        differ = [t for t, i in theirs.items() if ours.get(t) != i]
        if differ:
            raise ModelSourceError(
                f"recipe key 'tokenizer': {name!r} does not match the vocabulary of --model {source.name!r}: "
                f"{len(differ)} of its {len(theirs)} tokens have another id or are missing (e.g. "
                f"{', '.join(map(repr, differ[:3]))}); leave 'tokenizer' unset to use the checkpoint's own")
    elif chosen.vocab_size > source.config.vocab_size:
        raise ModelSourceError(
            f"recipe key 'tokenizer': {name!r} has {chosen.vocab_size} tokens but --model {source.name!r} has "
            f"{source.config.vocab_size} embedding rows (vocab_size): it is not this checkpoint's tokenizer")


def _complete(tokenizer, family: str, templates: bool) -> list[str]:
    """Add to `tokenizer` what `family`'s Lineage tasks need and it lacks; returns the added tokens."""
    vocab = tokenizer.get_vocab()
    roles: dict[str, str] = {}
    extra: list[str] = []
    if family == "gpt":
        if tokenizer.eos_token is None:
            roles.update(eos_token=END_OF_TEXT, bos_token=END_OF_TEXT)
        elif tokenizer.bos_token is None:
            roles["bos_token"] = str(tokenizer.eos_token)
        if tokenizer.pad_token is None:
            roles["pad_token"] = GPT_SPECIAL_TOKENS[0]
        if templates:
            extra = [t for t in GPT_SPECIAL_TOKENS[1:4] if t not in vocab]
    elif family == "bert":
        defaults = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                    "mask_token": "[MASK]"}
        roles = {role: token for role, token in defaults.items() if getattr(tokenizer, role) is None}
    else:
        defaults = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
        roles = {role: token for role, token in defaults.items() if getattr(tokenizer, role) is None}
    new = [t for t in dict.fromkeys([*roles.values(), *extra]) if t not in vocab]
    if roles or extra:
        present = [str(t) for t in getattr(tokenizer, "extra_special_tokens", None) or []]
        tokenizer.add_special_tokens({**roles, "extra_special_tokens": present + extra} if extra else roles)
    if family == "gpt" and templates:
        _install_template(tokenizer, "[START] $A [EXTRACT]", "[START] $A [DELIM] $B [EXTRACT]",
                          ("[START]", "[DELIM]", "[EXTRACT]"))
    elif family == "bert":
        _install_template(tokenizer, f"{tokenizer.cls_token} $A:0 {tokenizer.sep_token}:0",
                          f"{tokenizer.cls_token}:0 $A:0 {tokenizer.sep_token}:0 $B:1 {tokenizer.sep_token}:1",
                          (str(tokenizer.cls_token), str(tokenizer.sep_token)))
        if "token_type_ids" not in tokenizer.model_input_names:
            tokenizer.model_input_names = [*tokenizer.model_input_names, "token_type_ids"]
    return new


def _install_template(tokenizer, single: str, pair: str, tokens: tuple[str, ...]) -> None:
    """Set the tokenizer's template (kept by `save_pretrained`: it lives in tokenizer.json), after the byte-level
    offsets step of a byte-level BPE."""
    backend = tokenizer.backend_tokenizer
    template = processors.TemplateProcessing(single=single, pair=pair,
                                             special_tokens=[(t, tokenizer.convert_tokens_to_ids(t)) for t in tokens])
    byte_level = type(backend.pre_tokenizer).__name__ == "ByteLevel"
    backend.post_processor = (processors.Sequence([processors.ByteLevel(trim_offsets=True), template])
                              if byte_level else template)


def fit_embeddings(model: torch.nn.Module, tokenizer) -> dict[str, Any]:
    """Grow the model's vocabulary to the tokenizer's: new embedding rows (and rows of an untied output layer, its
    bias and a logits bias) are the mean of the existing ones; the config's pad / bos / eos ids follow the
    tokenizer. Returns `{"added_embedding_rows": n}` when rows were added."""
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


__all__ = ["CONVERSION_TOLERANCE", "ConversionCheckError", "ModelNotFoundError", "ModelSource", "ModelSourceError",
           "UnsupportedCheckpointError", "conversion_difference", "convert_checked", "fit_embeddings", "load_model",
           "own_tokenizer", "pretrained_tokenizer", "reference_of", "resolve_model"]
