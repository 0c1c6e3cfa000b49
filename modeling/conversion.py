"""Weights to and from the transformers reference models, with identical outputs.

`from_transformers(model)` takes an instance of a supported transformers class and returns the matching Lineage
model; `to_transformers(model)` goes back. Each reference family contributes its `Conversion`s (`conversion_bert.py`,
`conversion_gpt.py`, `conversion_marian.py`, built from `conversion_base.py`). The supported pairs, padded
vocabularies and what is refused: docs/models.md, "Converting to and from transformers".
"""

import copy

import torch
import transformers
from torch import nn

from .configuration_lineage_common import check_vocab_multiple
from .conversion_base import Conversion, StateDict, rename_keys
from .conversion_bert import BERT_CONVERSIONS
from .conversion_gpt import GPT_CONVERSIONS
from .conversion_marian import MARIAN_CONVERSIONS

CONVERSIONS: tuple[Conversion, ...] = BERT_CONVERSIONS + GPT_CONVERSIONS + MARIAN_CONVERSIONS


def _find(model_class: type, config, attribute: str) -> Conversion:
    for conversion in CONVERSIONS:
        if model_class is getattr(conversion, attribute) and (
            attribute == "reference_class" or conversion.takes_lineage_config(config)
        ):
            return conversion
    supported = sorted({getattr(c, attribute).__name__ for c in CONVERSIONS})  # GPT's classes serve two references
    raise TypeError(f"No conversion for {model_class.__name__}; supported classes: {', '.join(supported)}.")


def reference_config(lineage_class: type, config) -> tuple[Conversion, transformers.PreTrainedConfig]:
    """(conversion, reference config) of a Lineage class and config, from the config alone: `TypeError` for a class
    without a reference, `ValueError` naming each field the reference cannot express."""
    conversion = _find(lineage_class, config, "lineage_class")
    if config.relative_attention is not None:
        raise ValueError(
            f"This {lineage_class.__name__} has relative position representations (`position_embedding_type`="
            f"{config.position_embedding_type!r}), which no transformers model offers, so it cannot be "
            "converted. Share it as it is: `save_pretrained(folder)`, then `from_pretrained(folder, "
            "trust_remote_code=True)` loads it anywhere."
        )
    return conversion, conversion.config_to_reference(config)


def _vocab_keys(model: nn.Module) -> dict[str, int]:
    """State-dict keys of the tensors indexed by token id (embedding, output layer, logits bias), each with the
    dimension the id indexes: the ones `pad_vocab_to_multiple_of` pads."""
    dims = {id(model.get_input_embeddings().weight): 0}
    head = model.get_output_embeddings()
    if head is not None:
        dims.update({id(tensor): 0 for tensor in (head.weight, head.bias) if tensor is not None})
    if getattr(model, "final_logits_bias", None) is not None:
        dims[id(model.final_logits_bias)] = 1  # (1, V)
    named = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    return {name: dims[id(tensor)] for name, tensor in named if id(tensor) in dims}


def _build(target_class: type[nn.Module], config, state: StateDict, source: nn.Module,
           computed_keys: tuple[str, ...] = ()) -> nn.Module:
    if target_class._supports_sdpa or source.config._attn_implementation == "eager":
        config._attn_implementation = source.config._attn_implementation  # OpenAIGPT has eager attention only
    model = target_class(config)
    built = model.state_dict()
    for key, dim in _vocab_keys(model).items():  # rows of a padded vocabulary: as initialised, outside every softmax
        real, rows = state[key].shape[dim], built[key].shape[dim]
        if rows > real:
            state[key] = torch.cat([state[key], built[key].narrow(dim, real, rows - real)], dim)
    model.load_state_dict({**{key: built[key] for key in computed_keys}, **state}, strict=True)
    if model.can_generate() and getattr(source, "generation_config", None) is not None:
        model.generation_config = copy.deepcopy(source.generation_config)  # same decoding defaults, same outputs
    parameter = next(source.parameters())
    return model.to(device=parameter.device, dtype=parameter.dtype).train(source.training)


def from_transformers(model: nn.Module, pad_vocab_to_multiple_of: int | None = None) -> nn.Module:
    """The Lineage model with the same weights and outputs as a transformers reference model; `pad_vocab_to_multiple_of`
    pads its embedding and output layer with rows no output shows."""
    check_vocab_multiple(pad_vocab_to_multiple_of)
    conversion = _find(type(model), getattr(model, "config", None), "reference_class")
    config = conversion.config_to_lineage(model.config)
    config.pad_vocab_to_multiple_of = pad_vocab_to_multiple_of
    return _build(conversion.lineage_class, config, conversion.state_to_lineage(model.state_dict()), model)


def to_transformers(model: nn.Module) -> nn.Module:
    """The transformers reference model with the same weights (and the same outputs) as a Lineage model."""
    conversion, config = reference_config(type(model), getattr(model, "config", None))
    state = model.state_dict()
    for key, dim in _vocab_keys(model).items():  # drop the rows of a padded vocabulary
        state[key] = state[key].narrow(dim, 0, model.config.vocab_size)
    state = conversion.state_to_reference(state)
    return _build(conversion.reference_class, config, state, model, conversion.reference_computed_keys)


__all__ = ["CONVERSIONS", "Conversion", "from_transformers", "reference_config", "rename_keys", "to_transformers"]
