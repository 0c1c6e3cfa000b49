"""Publishing a run: `<output_dir>/model` and what goes in it, and the Hub upload.

`save_run` writes the weights with their code, the tokenizer, `recipe.yaml`, `results.json`, the loss curve and the
model card (`write_model_card`), staged beside the folder and moved into place, then pushes it when the recipe names
a repo (`check_push` refuses one that cannot succeed before training). docs/training.md ("What a run writes").
"""

from __future__ import annotations

import importlib.metadata
import math
import shutil
import unicodedata
from pathlib import Path
from typing import Any

import yaml
from accelerate import Accelerator

from train.run import strict_json
from train.run.distributed import unsharded
from train.run.environment import versions
from train.run.figures import pyplot, save_figure
from train.run.recipes import PATH_KEYS, RecipeError, reads
from train.run.run_folder import RECORD, staged_output

THROUGHPUT_KEYS = ("tokens_per_s", "mfu")  # results.json's medians, on the card's throughput line (`throughput_line`)
# class-name suffix -> (Hub pipeline tag, task type in model-index)
PIPELINE_TAGS = {
    "ForPreTraining": "fill-mask",
    "ForMaskedLM": "fill-mask",
    "ForCausalLM": "text-generation",
    "LMHeadModel": "text-generation",
    "ForSequenceClassification": "text-classification",
    "ForTokenClassification": "token-classification",
    "ForQuestionAnswering": "question-answering",
    "ForMultipleChoice": "multiple-choice",
    "ForConditionalGeneration": "translation",
    "ForSeq2SeqLM": "translation",
    "MTModel": "translation",
}


def _suffix(class_name: str) -> str:
    return next((s for s in PIPELINE_TAGS if class_name.endswith(s)), "")


def pipeline_tag(class_name: str) -> str:
    """The Hub pipeline tag of a head class (`PIPELINE_TAGS` by its name's suffix), `feature-extraction` otherwise."""
    return PIPELINE_TAGS.get(_suffix(class_name), "feature-extraction")


def public_name(value: str | None, columns: tuple = ()) -> str | None:
    """A recipe value as the card names it: local data as the reader finds it (`names_local_data`: a file or folder,
    or for a translation pair's `columns` the prefix of its two files, `data/train` of `data/train.en` and
    `data/train.de`), by its name (its full path, which says where the user keeps their files, stays in `run.json`); a
    run's model folder with its run's (`bert-pretrain/model`); anything else (a Hub id, `embedded:<task>`, a preset)
    as it is."""
    from train.data.files import names_local_data

    if not value or not names_local_data(value, columns):
        return value
    path = Path(value).expanduser().resolve()
    return f"{path.parent.name}/{path.name}" if (path.parent / RECORD).is_file() else path.name


DATA_KEYS = ("dataset", "train_file", "validation_file")  # the recipe's paths that may name a translation pair


def _path_name(recipe, key: str, value: str) -> str:
    """`value` of the recipe's path `key` as the card names it (`public_name`; a data key with the recipe's pair)."""
    return public_name(value, recipe.pair_columns() if key in DATA_KEYS else ())


def printable(text: str) -> str:
    """`text` with its control characters (NUL, ESC, line breaks, ...) escaped as Python writes them (`\\x1b`), so
    a model's raw sample neither breaks a table row nor reaches a terminal as an escape sequence."""
    return "".join(repr(c)[1:-1] if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in text)


def _cell(value) -> str:
    return printable(str(value)).replace("|", "\\|")


def project_link() -> str:
    """Lineage, linked to the repository its package metadata names (`[project.urls]`), or unlinked when it names
    none."""
    try:
        urls = importlib.metadata.metadata("lineage").get_all("Project-URL") or []
    except importlib.metadata.PackageNotFoundError:
        urls = []
    found = dict(entry.split(", ", 1) for entry in urls if ", " in entry)
    url = next((found[k] for k in ("Repository", "Source", "Homepage") if k in found), None)
    return f"[Lineage]({url})" if url else "Lineage"


def card_recipe(recipe, model_type: str) -> dict[str, Any]:
    """The recipe as the card shows it: only the keys a run of its command and task on a model of `model_type` reads
    (`recipes.reads`), without where the run wrote, local paths by their names (`public_name`), and without
    `dataset` / `dataset_config` when a `train_file` was read in their place."""
    unread = ("dataset", "dataset_config") if recipe.train_file else ()
    hidden = ("output_dir", "push_to_hub", "resume_from_checkpoint", *unread)
    return {k: _path_name(recipe, k, v) if k in PATH_KEYS and isinstance(v, str) else v
            for k, v in recipe.to_dict().items()
            if k not in hidden and reads(k, recipe.command, recipe.task, model_type)}


def card_metadata(model, recipe, results: dict[str, Any], dataset_name: str) -> dict[str, Any]:
    """The card's Hub metadata; the figures are named as measured on the validation file when the recipe gives
    one, else on `dataset_name`'s split `Recipe.evaluated_split`."""
    class_name = type(model).__name__
    tag = pipeline_tag(class_name)
    # the figures of the command's metrics_fn, as `evaluation.evaluate` names them: `eval_<metric>` (its signatures,
    # text, aside), not the loss
    figures = {k.removeprefix("eval_"): v for k, v in results.items()
               if k.startswith("eval_") and k != "eval_loss" and isinstance(v, (int, float))}
    metadata = {
        "library_name": "transformers",
        "pipeline_tag": tag,
        "tags": ["lineage", model.config.model_type, "custom_code"],
        "datasets": [dataset_name],
        "metrics": sorted(figures) or ["loss"],
    }
    # the Hub's model-index needs a value for each metric: an undefined figure (NaN) is left out, and so is the whole
    # index when no figure has one (huggingface_hub drops a null value, leaving a card it cannot read back)
    measured = index_metrics(dict(sorted(figures.items()))) or index_metrics({"loss": results.get("eval_loss")})
    validation = recipe.validation_file and _path_name(recipe, "validation_file", recipe.validation_file)
    if measured:
        metadata["model-index"] = [{
            "name": Path(recipe.output_dir).name,
            "results": [{
                "task": {"type": tag},
                "dataset": ({"name": validation, "type": validation} if validation else
                            {"name": dataset_name, "type": dataset_name,
                             **({"config": recipe.dataset_config} if recipe.dataset_config else {}),
                             "split": recipe.evaluated_split}),
                "metrics": measured,
            }],
        }]
    return metadata


def index_metrics(figures: dict[str, Any]) -> list[dict[str, Any]]:
    """A model-index entry's metrics: each figure that is a finite number, rounded to 4 places."""
    return [{"type": name, "value": round(float(value), 4)} for name, value in figures.items()
            if isinstance(value, (int, float)) and math.isfinite(value)]


def figure(value: float) -> str:
    """A figure as a card's table shows it: 4 places, `undefined` where it is NaN (a correlation of constant
    predictions)."""
    return "undefined" if math.isnan(value) else f"{value:.4f}"


def _pipeline_use(model) -> str:
    """The card's lines for the Lineage pipelines saved with the model (translation, question answering)."""
    tasks = list(getattr(model.config, "custom_pipelines", None) or {})
    if not tasks:
        return ""
    calls = "\n".join(f'{task.replace("-", "_")} = pipeline("{task}", model="path/or/repo-id", trust_remote_code=True)'
                      for task in tasks)
    return ("\nPipelines saved with the model (transformers 5 ships none for these tasks):\n\n"
            f"```python\nfrom transformers import pipeline\n\n{calls}\n```\n")


_CARD = """# {name}

A `{class_name}` ({model_type}, {parameters:,} parameters)
trained with {lineage} on `{dataset_name}`. {description}

## Use

```python
from transformers import {auto}, AutoTokenizer

model = {auto}.from_pretrained("path/or/repo-id", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("path/or/repo-id", trust_remote_code=True)
```

The modelling code is in this folder (`trust_remote_code=True`); the Lineage package is not needed. The tokenizer
is the generic fast one (`tokenizer.json`); `trust_remote_code` (True or False) only spares the question that
transformers asks because it reads this folder's `config.json` first.
{pipelines}
## Results

| figure | value |
|---|---|
{rows}
{throughput}
{curve}
## Software

Trained with {releases}.

## Training recipe

```yaml
{recipe_yaml}```
{extra}"""


def throughput_line(results: dict[str, Any]) -> str:
    """The card's line on training speed: the run's median tokens/s and, when results hold it, its median MFU."""
    speed, share = results.get("tokens_per_s"), results.get("mfu")
    if not isinstance(speed, (int, float)):
        return ""
    mfu = f", {share:.1%} MFU" if isinstance(share, (int, float)) else ""
    return f"\nTraining throughput, the median over the logged steps: {speed:,.0f} tokens/s{mfu}.\n"


def write_model_card(folder: str | Path, model, recipe, results: dict[str, Any],
                     software: dict[str, str | None], *, description: str = "", extra: str = "",
                     base_model: str | None = None) -> Path:
    """Write `folder/README.md` and return its path; `base_model` (a Hub id the run started from) goes in the
    metadata, where the Hub links the two models."""
    folder = Path(folder)
    dataset_name = _path_name(recipe, "train_file", recipe.data_source("train")) or "custom"
    metadata = card_metadata(model, recipe, results, dataset_name)
    if base_model:
        metadata["base_model"] = base_model
    rows = "\n".join(f"| {k} | {figure(v)} |" if isinstance(v, float) else
                     f"| {k} | {_cell(public_name(v) if k == 'base_model' else v)} |"
                     for k, v in results.items() if v is not None and k not in THROUGHPUT_KEYS)
    recipe_yaml = yaml.safe_dump(card_recipe(recipe, model.config.model_type), sort_keys=False)
    for key in PATH_KEYS:  # a local path the description names (`where the weights started`), by its name
        value = getattr(recipe, key)
        if isinstance(value, str):
            description = description.replace(f"`{value}`", f"`{_path_name(recipe, key, value)}`")
    body = _CARD.format(
        lineage=project_link(), name=Path(recipe.output_dir).name, class_name=type(model).__name__,
        model_type=model.config.model_type, parameters=sum(p.numel() for p in model.parameters()),
        dataset_name=dataset_name, description=description,
        auto=type(model).auto_class_name(), pipelines=_pipeline_use(model), rows=rows,
        throughput=throughput_line(results),
        curve="![loss curve](loss_curve.png)\n" if (folder / "loss_curve.png").is_file() else "",
        releases=", ".join(f"{name} {version}" for name, version in software.items() if version),
        recipe_yaml=recipe_yaml, extra=extra)
    path = folder / "README.md"
    text = "---\n" + yaml.safe_dump(metadata, sort_keys=False) + "---\n\n" + body
    path.write_text("".join(printable(c) if c not in "\n\t" else c for c in text))  # whatever a section held
    return path


def read_card_metadata(path: str | Path) -> dict[str, Any]:
    """The YAML front matter of a model card."""
    text = Path(path).read_text()
    if not text.startswith("---\n"):
        raise ValueError(f"{path} has no YAML front matter")
    return yaml.safe_load(text.split("---\n", 2)[1])


def plot_loss_curve(history: list[dict], path: Path, title: str, source: str | None = None) -> Path:
    """Training loss per step and evaluation loss, as a PNG."""
    train = [(h["step"], h["loss"]) for h in history if "loss" in h]
    evals = [(h["step"], h["eval_loss"]) for h in history if "eval_loss" in h]
    fig, ax = pyplot().subplots(figsize=(6, 4))
    if train:
        ax.plot(*zip(*train), label="train loss", linewidth=1)
    if evals:
        ax.plot(*zip(*evals), "o-", label="eval loss")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path, source)


def save_run(accelerator: Accelerator, model, recipe, tokenizer=None, results: dict[str, Any] | None = None,
             card: dict[str, Any] | None = None, extra_files: dict[str, str] | None = None) -> Path:
    """Write `<output_dir>/model` and push it when the recipe names a repo; every process calls this (the main
    process writes an unsharded folder). Returns the folder."""
    output_dir = Path(recipe.output_dir)
    folder = output_dir / "model"
    accelerator.wait_for_everyone()
    state_dict = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        with staged_output(folder.resolve()) as staging:  # the folder holds exactly what this run wrote
            unwrapped, state_dict = unsharded(accelerator.unwrap_model(model), state_dict)
            unwrapped.save_pretrained(staging, state_dict=state_dict)
            if tokenizer is not None:
                tokenizer.save_pretrained(staging)
            recipe.save(staging / "recipe.yaml")
            if (output_dir / "loss_curve.png").is_file():
                shutil.copy(output_dir / "loss_curve.png", staging / "loss_curve.png")
            for name, text in (extra_files or {}).items():
                (staging / name).write_text(text)
            clean = {k: v for k, v in (results or {}).items() if isinstance(v, (int, float, str)) or v is None}
            software = versions()
            data = recipe.data_source("train")
            (staging / "results.json").write_text(strict_json.dumps({**clean, "dataset": data, "versions": software},
                                                                    indent=1))
            write_model_card(staging, unwrapped, recipe, clean, software, **(card or {}))
    accelerator.wait_for_everyone()
    if recipe.push_to_hub and accelerator.is_main_process:
        push_folder(folder, recipe.push_to_hub)
    return folder


def check_push(repo_id: str) -> None:
    """Refuse, before training, a `push_to_hub` that cannot succeed: a malformed repo id, the Hub switched off
    (`HF_HUB_OFFLINE`), or no token to write with."""
    from huggingface_hub import constants, get_token
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise RecipeError(f"recipe key 'push_to_hub' is {repo_id!r}, which is no Hub repo id ({error}); give "
                          f"<user or organisation>/<name>") from None
    if constants.HF_HUB_OFFLINE:
        raise RecipeError(f"recipe key 'push_to_hub' is {repo_id!r} but the Hub is switched off (HF_HUB_OFFLINE=1): "
                          f"the upload would fail after training; unset HF_HUB_OFFLINE or drop push_to_hub (the model "
                          f"is saved in <output_dir>/model either way)")
    if get_token() is None:
        raise RecipeError(f"recipe key 'push_to_hub' is {repo_id!r} but no Hugging Face token is set: log in (hf auth "
                          f"login) or set HF_TOKEN to a token with write access, or drop push_to_hub")


def push_folder(folder: Path, repo_id: str) -> None:
    """Upload `folder` to the Hub repo `repo_id` (created if needed); a failure leaves the folder as it is."""
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        api.create_repo(repo_id, exist_ok=True)
        api.upload_folder(repo_id=repo_id, folder_path=str(folder))
    except Exception as error:  # offline, no token, no write access: the saved folder stays usable
        raise RuntimeError(f"push_to_hub: uploading to {repo_id!r} failed ({error}); the model is saved in "
                           f"{folder}") from error


__all__ = ["PIPELINE_TAGS", "THROUGHPUT_KEYS", "card_metadata", "check_push", "figure", "index_metrics",
           "plot_loss_curve", "push_folder", "read_card_metadata", "save_run", "throughput_line", "write_model_card"]
