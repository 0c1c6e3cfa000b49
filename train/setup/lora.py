"""LoRA fine-tuning (Hu et al. 2021) through peft, the optional extra `peft`, for the recipe key `lora`.

`check_lora(recipe, source, auto_class)` refuses, before any work, a missing peft and `target_modules` that name no
linear layer of the model to train, or only its head (built on the meta device); `apply_lora(model, settings)` wraps
the model (a new head trains in full); `merge_lora` saves the adapter to `<output_dir>/adapter`, naming the `--model`
it started from and holding the embedding rows added for the tokenizer, and hands the engine the merged model,
published as an ordinary Lineage folder. docs/using.md ("LoRA (peft)").
"""

from __future__ import annotations

import warnings
from pathlib import Path

from torch import nn

from train.run.recipes import Recipe, RecipeError
from train.setup.models import ModelSource, meta_model


def head_modules(model) -> list[str]:
    """The model's top-level modules outside the backbone that own parameters the backbone does not share
    (a classification head; not an output layer tied to the embeddings)."""
    backbone = getattr(model, model.base_model_prefix)
    shared = {id(p) for p in backbone.parameters()}
    return [name for name, child in model.named_children()
            if child is not backbone and any(id(p) not in shared for p in child.parameters())]


def layer_names(paths: list[str]) -> list[str]:
    """The last names of dotted module paths, each once, in order (`q_proj`, ..., `classifier`)."""
    return list(dict.fromkeys(path.rsplit(".", 1)[-1] for path in paths))


def check_target_modules(model, targets: list[str] | None) -> None:
    """Refuse names in the recipe's `lora: {target_modules: [...]}` that match no linear layer by peft's rule (a
    layer whose dotted path is the name or ends with `.name`): peft skips such a name with only a warning when
    another matches; and names that match only layers of the head, which trains in full (peft's modules_to_save), so
    that LoRA would adapt nothing (peft failed)."""
    if targets is None:
        return
    paths = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]

    def matches(path: str, target: str) -> bool:
        return path == target or path.endswith(f".{target}")

    unknown = [t for t in targets if not any(matches(path, t) for path in paths)]
    if unknown:
        raise RecipeError(
            f"recipe key 'lora.target_modules': {', '.join(map(repr, unknown))} "
            f"{'names' if len(unknown) == 1 else 'name'} no linear layer of {type(model).__name__}; its linear layers "
            f"are {', '.join(layer_names(paths))} (a name matches every layer whose dotted path ends with it)")
    heads = head_modules(model)
    adapted = [path for path in paths if path.split(".", 1)[0] not in heads]
    if not any(matches(path, t) for path in adapted for t in targets):
        raise RecipeError(
            f"recipe key 'lora.target_modules': {', '.join(map(repr, targets))} "
            f"{'names' if len(targets) == 1 else 'name'} only layers of the head ({', '.join(heads)}), which trains in "
            f"full without LoRA; name at least one of the layers LoRA adapts in {type(model).__name__}: "
            f"{', '.join(layer_names(adapted))}")


def _peft():
    try:
        import peft
    except ImportError as error:
        raise RecipeError("recipe key 'lora' needs peft: pip install 'lineage[peft]'") from error
    return peft


def check_lora(recipe: Recipe, source: ModelSource, auto_class: str) -> None:
    """Refuse before any work what `apply_lora` would fail on: peft missing, or `target_modules` that LoRA cannot
    adapt in the model `build_model` will make (`check_target_modules`; the model built on the meta device)."""
    _peft()
    model = meta_model(source.config, auto_class, recipe.model_overrides)
    check_target_modules(model, recipe.lora.get("target_modules"))


def apply_lora(model, settings: dict):
    """`model` wrapped for LoRA training as the recipe's `lora` mapping says (module docstring), its `target_modules`
    checked before by `check_lora`."""
    peft = _peft()
    config = peft.LoraConfig(r=settings.get("r", 8), lora_alpha=settings.get("alpha", 16),
                             lora_dropout=settings.get("dropout", 0.0), target_modules=settings.get("target_modules"),
                             modules_to_save=head_modules(model) or None)
    with warnings.catch_warnings():
        # peft (0.21) reads `model.is_gradient_checkpointing` as it wraps a model; transformers 5.24 deprecated that
        # name with a FutureWarning on each read: a message for peft, which the run's user cannot act on
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        return peft.get_peft_model(model, config)


def merge_lora(engine, adapter_folder: str | Path, source: ModelSource) -> Path:
    """Save the trained adapter to `adapter_folder` and give `engine` the merged model to publish. The adapter names
    the pretrained `source` as the user gave it (peft read the folder the model was loaded from: a converted
    checkpoint's is a deleted temporary one), and holds the embedding (and untied output layer) when rows were added
    for the tokenizer, which a base of the checkpoint's size lacks."""
    model = engine.accelerator.unwrap_model(engine.model)
    if source.pretrained:
        config = model.peft_config[model.active_adapter]
        config.base_model_name_or_path, config.revision = source.repo_id or source.name, source.revision
    if engine.accelerator.is_main_process:
        model.save_pretrained(adapter_folder, save_embedding_layers="added_embedding_rows" in source.report)
    engine.model = model.merge_and_unload()
    return Path(adapter_folder)


__all__ = ["apply_lora", "check_lora", "check_target_modules", "head_modules", "layer_names", "merge_lora"]
