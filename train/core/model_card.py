"""The model card (`README.md`) of a run's output folder, with Hub metadata in its YAML front matter:
`library_name`, `pipeline_tag`, `tags`, `datasets`, `metrics` and a `model-index` holding the figures
reached, followed by how to load the folder, the results table, the training recipe and the loss curve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# class-name suffix -> (Hub pipeline tag, task type in model-index)
PIPELINE_TAGS = {
    "ForPreTraining": "fill-mask",
    "ForMaskedLM": "fill-mask",
    "ForCausalLM": "text-generation",
    "ForSequenceClassification": "text-classification",
    "ForTokenClassification": "token-classification",
    "ForQuestionAnswering": "question-answering",
    "ForMultipleChoice": "multiple-choice",
    "ForConditionalGeneration": "translation",
}
_AUTO_CLASS = {
    "ForPreTraining": "AutoModelForPreTraining", "ForMaskedLM": "AutoModelForMaskedLM",
    "ForCausalLM": "AutoModelForCausalLM", "ForSequenceClassification": "AutoModelForSequenceClassification",
    "ForTokenClassification": "AutoModelForTokenClassification",
    "ForQuestionAnswering": "AutoModelForQuestionAnswering", "ForMultipleChoice": "AutoModelForMultipleChoice",
    "ForConditionalGeneration": "AutoModelForSeq2SeqLM",
}
_METRIC_KEYS = ("accuracy", "f1", "bleu", "perplexity", "exact_match", "nsp_accuracy", "mlm_accuracy")


def _suffix(class_name: str) -> str:
    return next((s for s in PIPELINE_TAGS if class_name.endswith(s)), "")


def card_metadata(model, recipe, results: dict[str, Any], dataset_name: str) -> dict[str, Any]:
    class_name = type(model).__name__
    suffix = _suffix(class_name)
    pipeline_tag = PIPELINE_TAGS.get(suffix, "feature-extraction")
    figures = {k.removeprefix("eval_"): v for k, v in results.items()
               if k.removeprefix("eval_") in _METRIC_KEYS and isinstance(v, (int, float))}
    metadata = {
        "library_name": "transformers",
        "pipeline_tag": pipeline_tag,
        "tags": ["lineage", model.config.model_type, "custom_code"],
        "datasets": [dataset_name],
        "metrics": sorted(figures) or ["loss"],
        "model-index": [{
            "name": Path(recipe.output_dir).name,
            "results": [{
                "task": {"type": pipeline_tag},
                "dataset": {"name": dataset_name, "type": dataset_name, "split": "validation"},
                "metrics": [{"type": k, "value": round(float(v), 4)} for k, v in sorted(figures.items())]
                or [{"type": "loss", "value": round(float(results.get("eval_loss", float("nan"))), 4)}],
            }],
        }],
    }
    return metadata


def write_model_card(folder: str | Path, model, recipe, results: dict[str, Any], *, dataset_name: str | None = None,
                     description: str = "", extra: str = "") -> Path:
    """Write `folder/README.md` and return its path."""
    folder = Path(folder)
    dataset_name = dataset_name or recipe.dataset or recipe.train_file or "custom"
    metadata = card_metadata(model, recipe, results, dataset_name)
    auto = _AUTO_CLASS.get(_suffix(type(model).__name__), "AutoModel")
    rows = "\n".join(f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |"
                     for k, v in results.items() if v is not None)
    recipe_yaml = yaml.safe_dump({k: v for k, v in recipe.to_dict().items()
                                  if k not in ("output_dir", "push_to_hub", "resume_from_checkpoint")},
                                 sort_keys=False)
    curve = "![loss curve](loss_curve.png)\n" if (folder / "loss_curve.png").is_file() else ""
    body = f"""# {Path(recipe.output_dir).name}

A `{type(model).__name__}` ({model.config.model_type}, {sum(p.numel() for p in model.parameters()):,} parameters)
trained with [Lineage](https://github.com/) on `{dataset_name}`. {description}

## Use

```python
from transformers import {auto}, AutoTokenizer

model = {auto}.from_pretrained("path/or/repo-id", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("path/or/repo-id")
```

The modelling code is in this folder (`trust_remote_code=True`); the Lineage package is not needed.

## Results

| figure | value |
|---|---|
{rows}

{curve}
## Training recipe

```yaml
{recipe_yaml}```
{extra}"""
    text = "---\n" + yaml.safe_dump(metadata, sort_keys=False) + "---\n\n" + body
    path = folder / "README.md"
    path.write_text(text)
    return path


def read_card_metadata(path: str | Path) -> dict[str, Any]:
    """The YAML front matter of a model card."""
    text = Path(path).read_text()
    if not text.startswith("---\n"):
        raise ValueError(f"{path} has no YAML front matter")
    return yaml.safe_load(text.split("---\n", 2)[1])


__all__ = ["PIPELINE_TAGS", "card_metadata", "read_card_metadata", "write_model_card"]
