"""Weights to and from the transformers reference models, with identical outputs.

`from_transformers(model)` takes an instance of a supported transformers class (for example a
`BertForPreTraining` loaded with `from_pretrained("google-bert/bert-base-uncased")`) and returns the matching
Lineage model; `to_transformers(model)` goes back. Each family contributes a `Conversion`: the pair of classes,
the config translation both ways and the state-dict translation both ways. Key renames are written once as
pairs of templates (`{}` stands for a layer index) and applied in either direction.

Supported pairs:
    BertModel, BertForPreTraining, BertForMaskedLM, BertForSequenceClassification,
    BertForTokenClassification, BertForQuestionAnswering  <->  LineageBert*
"""

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
import transformers
from torch import nn

from .configuration_lineage_bert import LineageBertConfig
from .modeling_lineage_bert import (
    LineageBertForMaskedLM,
    LineageBertForPreTraining,
    LineageBertForQuestionAnswering,
    LineageBertForSequenceClassification,
    LineageBertForTokenClassification,
    LineageBertModel,
)

StateDict = dict[str, torch.Tensor]

# config fields every classification head carries, copied unchanged in both directions
_TASK_FIELDS = ("id2label", "label2id", "problem_type", "pad_token_id", "bos_token_id", "eos_token_id")


@dataclass(frozen=True)
class Conversion:
    """How one transformers class maps onto one Lineage class."""

    reference_class: type[nn.Module]
    lineage_class: type[nn.Module]
    config_to_lineage: Callable[[transformers.PreTrainedConfig], transformers.PreTrainedConfig]
    config_to_reference: Callable[[transformers.PreTrainedConfig], transformers.PreTrainedConfig]
    state_to_lineage: Callable[[StateDict], StateDict]
    state_to_reference: Callable[[StateDict], StateDict]


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


def _copy_fields(source, names: tuple[str, ...]) -> dict:
    return {name: getattr(source, name) for name in names if getattr(source, name, None) is not None}


def _with_task_fields(config, target_class, fields: dict):
    task = _copy_fields(config, _TASK_FIELDS)
    if getattr(config, "id2label", None) is None:
        task["num_labels"] = config.num_labels
    return target_class(**fields, **task)


# ----------------------------------------------------------------------------------------------------------
# BERT
# ----------------------------------------------------------------------------------------------------------

_BERT_SHARED_FIELDS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
    "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
    "initializer_range", "layer_norm_eps", "classifier_dropout",
)

_BERT_KEYS = (
    ("{}embeddings.LayerNorm", "{}embeddings.norm"),
    ("{}embeddings", "{}embeddings"),
    ("{}encoder.layer.{}.attention.self.query", "{}encoder.layers.{}.self_attn.sublayer.q_proj"),
    ("{}encoder.layer.{}.attention.self.key", "{}encoder.layers.{}.self_attn.sublayer.k_proj"),
    ("{}encoder.layer.{}.attention.self.value", "{}encoder.layers.{}.self_attn.sublayer.v_proj"),
    ("{}encoder.layer.{}.attention.output.dense", "{}encoder.layers.{}.self_attn.sublayer.o_proj"),
    ("{}encoder.layer.{}.attention.output.LayerNorm", "{}encoder.layers.{}.self_attn.norm"),
    ("{}encoder.layer.{}.intermediate.dense", "{}encoder.layers.{}.feed_forward.sublayer.up_proj"),
    ("{}encoder.layer.{}.output.dense", "{}encoder.layers.{}.feed_forward.sublayer.down_proj"),
    ("{}encoder.layer.{}.output.LayerNorm", "{}encoder.layers.{}.feed_forward.norm"),
    ("{}pooler.dense", "{}pooler.dense"),
    ("cls.predictions.transform.dense", "lm_head.dense"),
    ("cls.predictions.transform.LayerNorm", "lm_head.norm"),
    ("cls.predictions.decoder", "lm_head.decoder"),
    ("cls.seq_relationship", "nsp_head"),
    ("classifier", "classifier"),
    ("qa_outputs", "qa_outputs"),
)


def _bert_prefixed_keys() -> tuple[tuple[str, str], ...]:
    # "{}" at the start of a template stands for the optional "bert." prefix of heads; expand both forms
    pairs = []
    for reference, lineage in _BERT_KEYS:
        if reference.startswith("{}"):
            for prefix in ("bert.", ""):
                pairs.append((prefix + reference[2:], prefix + lineage[2:]))
        else:
            pairs.append((reference, lineage))
    return tuple(pairs)


BERT_KEY_PAIRS = _bert_prefixed_keys()


def _bert_config_to_lineage(config: transformers.BertConfig) -> LineageBertConfig:
    if getattr(config, "position_embedding_type", "absolute") not in ("absolute", None):
        raise ValueError("Only BERT with absolute position embeddings converts (`position_embedding_type`).")
    return _with_task_fields(config, LineageBertConfig, _copy_fields(config, _BERT_SHARED_FIELDS))


def _bert_config_to_reference(config: LineageBertConfig) -> transformers.BertConfig:
    if config.norm_position != "post" or config.gated_ffn:
        raise ValueError(
            "transformers' BERT is post-norm with a plain feed-forward; a model with "
            f"norm_position={config.norm_position!r}, gated_ffn={config.gated_ffn} has no equivalent."
        )
    return _with_task_fields(config, transformers.BertConfig, _copy_fields(config, _BERT_SHARED_FIELDS))


def _bert_state_to_lineage(state: StateDict) -> StateDict:
    state = {k: v for k, v in state.items() if k != "cls.predictions.bias"}  # alias of the decoder bias
    return rename_keys(state, BERT_KEY_PAIRS)


def _bert_state_to_reference(state: StateDict) -> StateDict:
    state = rename_keys(state, BERT_KEY_PAIRS, reverse=True)
    if "cls.predictions.decoder.bias" in state:
        state["cls.predictions.bias"] = state["cls.predictions.decoder.bias"]
    return state


def _bert(reference_name: str, lineage_class: type[nn.Module]) -> Conversion:
    return Conversion(
        getattr(transformers, reference_name), lineage_class, _bert_config_to_lineage, _bert_config_to_reference,
        _bert_state_to_lineage, _bert_state_to_reference,
    )


CONVERSIONS: tuple[Conversion, ...] = (
    _bert("BertModel", LineageBertModel),
    _bert("BertForPreTraining", LineageBertForPreTraining),
    _bert("BertForMaskedLM", LineageBertForMaskedLM),
    _bert("BertForSequenceClassification", LineageBertForSequenceClassification),
    _bert("BertForTokenClassification", LineageBertForTokenClassification),
    _bert("BertForQuestionAnswering", LineageBertForQuestionAnswering),
)


# ----------------------------------------------------------------------------------------------------------
# Entry points
# ----------------------------------------------------------------------------------------------------------


def _find(model: nn.Module, attribute: str) -> Conversion:
    for conversion in CONVERSIONS:
        if type(model) is getattr(conversion, attribute):
            return conversion
    supported = sorted(getattr(c, attribute).__name__ for c in CONVERSIONS)
    raise TypeError(f"No conversion for {type(model).__name__}; supported classes: {', '.join(supported)}.")


def _build(target_class: type[nn.Module], config, state: StateDict, source: nn.Module) -> nn.Module:
    config._attn_implementation = source.config._attn_implementation
    model = target_class(config)
    model.load_state_dict(state, strict=True)
    parameter = next(source.parameters())
    return model.to(device=parameter.device, dtype=parameter.dtype).train(source.training)


def from_transformers(model: nn.Module) -> nn.Module:
    """The Lineage model with the same weights (and the same outputs) as a transformers reference model."""
    conversion = _find(model, "reference_class")
    config = conversion.config_to_lineage(model.config)
    return _build(conversion.lineage_class, config, conversion.state_to_lineage(model.state_dict()), model)


def to_transformers(model: nn.Module) -> nn.Module:
    """The transformers reference model with the same weights (and the same outputs) as a Lineage model."""
    conversion = _find(model, "lineage_class")
    config = conversion.config_to_reference(model.config)
    return _build(conversion.reference_class, config, conversion.state_to_reference(model.state_dict()), model)


__all__ = ["CONVERSIONS", "Conversion", "from_transformers", "rename_keys", "to_transformers"]
