"""Model presets: the shipped configs of `train/configs/models/` (`lineage configs models`), a config.json or a saved
folder resolved to a config, and a check of `model_overrides` against the config's fields. docs/models.md
("Presets").
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

from train.run.recipes import RecipeError, bundled


def available_presets() -> list[str]:
    return list(bundled("models"))


def load_model_config(name_or_path: str, **overrides):
    """The config of a preset name (`lineage configs models`), a config.json path, or a model folder."""
    from transformers import AutoConfig

    import modeling  # noqa: F401  (registers the Lineage families)

    path = Path(name_or_path)
    if path.is_dir() and (path / "config.json").is_file():
        return AutoConfig.from_pretrained(str(path), **overrides)
    candidate = path if path.suffix == ".json" else bundled("models").get(name_or_path)
    if candidate is not None and candidate.is_file():
        fields = json.loads(candidate.read_text())
        if "model_type" not in fields:
            raise RecipeError(f"model config {name_or_path} has no 'model_type'")
        return AutoConfig.for_model(fields.pop("model_type"), **{**fields, **overrides})
    raise FileNotFoundError(f"model preset {name_or_path!r} does not exist: it is neither a preset name "
                            f"({', '.join(available_presets())}), a config.json file nor a saved model folder")


def check_model_overrides(overrides: dict[str, Any], config, argument: str = "recipe key 'model_overrides'") -> None:
    """Refuse a `model_overrides` key (or another `argument`'s, as `lineage benchmark --config`) that is no field of
    `config`'s class: transformers would keep a misspelt key as a stray attribute and build the model without it."""
    fields = set(config.to_dict()) | set(inspect.signature(type(config).__init__).parameters)
    fields |= {"num_labels", "attn_implementation"}  # taken by PreTrainedConfig / from_pretrained, not listed above
    unknown = sorted(set(overrides) - fields - {"self", "kwargs"})
    if unknown:
        raise RecipeError(f"{argument}: {', '.join(map(repr, unknown))} is no field of "
                          f"{config.model_type} configs; valid fields: "
                          f"{', '.join(sorted(fields - {'self', 'kwargs'}))}")


__all__ = ["available_presets", "check_model_overrides", "load_model_config"]
