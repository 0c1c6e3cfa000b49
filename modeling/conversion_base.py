"""What every weight conversion to and from a transformers reference model is made of (`conversion.py` holds the
entry points): a `Conversion` per pair of classes, key renames written once as pairs of templates (`{}` stands for a
layer index) and applied in either direction (`rename_keys`), and the config fields copied unchanged.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
import transformers
from torch import nn

StateDict = dict[str, torch.Tensor]

# config fields every classification head carries, copied unchanged in both directions
TASK_FIELDS = ("id2label", "label2id", "problem_type", "pad_token_id", "bos_token_id", "eos_token_id")


@dataclass(frozen=True)
class Conversion:
    """How one transformers class maps onto one Lineage class.

    `takes_lineage_config` picks, for a Lineage class with several references, the one a config converts back to.
    """

    reference_class: type[nn.Module]
    lineage_class: type[nn.Module]
    config_to_lineage: Callable[[transformers.PreTrainedConfig], transformers.PreTrainedConfig]
    config_to_reference: Callable[[transformers.PreTrainedConfig], transformers.PreTrainedConfig]
    state_to_lineage: Callable[[StateDict], StateDict]
    state_to_reference: Callable[[StateDict], StateDict]
    takes_lineage_config: Callable[[transformers.PreTrainedConfig], bool] = lambda config: True
    # reference weights its class computes from the config (fixed sinusoid tables): kept as built, not converted
    reference_computed_keys: tuple[str, ...] = ()


def _template_regex(template: str) -> re.Pattern:
    # a template matches a whole dotted prefix of a key: "a.{}" matches "a.3.weight", not "a.3x"
    return re.compile("^" + re.escape(template).replace(r"\{\}", r"(\d+)") + r"(?=\.|$)")


def rename_keys(state: StateDict, pairs: tuple[tuple[str, str], ...], reverse: bool = False) -> StateDict:
    """Rename state-dict keys by prefix templates `(reference, lineage)`; `reverse` maps lineage -> reference.

    The first matching template wins. Every key must match one, so a silently dropped weight is impossible.
    """
    rules = [(_template_regex(dst if reverse else src), src if reverse else dst) for src, dst in pairs]
    renamed = {}
    for key, tensor in state.items():
        for pattern, target in rules:
            match = pattern.match(key)
            if match:
                renamed[target.format(*match.groups()) + key[match.end():]] = tensor
                break
        else:
            raise KeyError(f"No conversion rule for weight {key!r}.")
    return renamed


def copy_fields(source, names: tuple[str, ...]) -> dict:
    return {name: getattr(source, name) for name in names if getattr(source, name, None) is not None}


def with_task_fields(config, target_class, fields: dict):
    """`target_class` read as a stored config (`from_dict`), with `fields` and the classification fields."""
    task = copy_fields(config, TASK_FIELDS)
    if getattr(config, "id2label", None) is None:
        task["num_labels"] = config.num_labels
    return target_class.from_dict({**fields, **task})


def check_reference_fields(config, reference: str, required: dict, problems: tuple[str, ...] = ()) -> None:
    """Refuse a config whose `required` fields (name: the reference's value) differ, or with `problems`, naming each."""
    problems = tuple(f"`{name}`={getattr(config, name)!r} ({reference}: {value!r})"
                     for name, value in required.items() if getattr(config, name) != value) + problems
    if problems:
        raise ValueError(f"transformers' {reference} has no equivalent of " + ", ".join(problems) + ".")


__all__ = ["TASK_FIELDS", "Conversion", "StateDict", "check_reference_fields", "copy_fields", "rename_keys",
           "with_task_fields"]
