"""BERT weights to and from transformers' `Bert*` models (`BertModel`, `BertForPreTraining`, `BertForMaskedLM`,
`BertLMHeadModel`, `BertForSequenceClassification`, `BertForTokenClassification`, `BertForQuestionAnswering`): the
same architecture under other names, so the conversion is a renaming of keys and config fields.
"""

import transformers
from torch import nn

from .configuration_lineage_bert import LineageBertConfig
from .conversion_base import Conversion, StateDict, check_reference_fields, copy_fields, rename_keys, with_task_fields
from .modeling_lineage_bert import (
    LineageBertForMaskedLM,
    LineageBertForPreTraining,
    LineageBertForQuestionAnswering,
    LineageBertForSequenceClassification,
    LineageBertForTokenClassification,
    LineageBertLMHeadModel,
    LineageBertModel,
)

_BERT_SHARED_FIELDS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
    "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
    "initializer_range", "layer_norm_eps", "classifier_dropout", "is_decoder", "add_cross_attention", "use_cache",
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
    ("{}encoder.layer.{}.crossattention.self.query", "{}encoder.layers.{}.cross_attn.sublayer.q_proj"),
    ("{}encoder.layer.{}.crossattention.self.key", "{}encoder.layers.{}.cross_attn.sublayer.k_proj"),
    ("{}encoder.layer.{}.crossattention.self.value", "{}encoder.layers.{}.cross_attn.sublayer.v_proj"),
    ("{}encoder.layer.{}.crossattention.output.dense", "{}encoder.layers.{}.cross_attn.sublayer.o_proj"),
    ("{}encoder.layer.{}.crossattention.output.LayerNorm", "{}encoder.layers.{}.cross_attn.norm"),
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
    return with_task_fields(config, LineageBertConfig, copy_fields(config, _BERT_SHARED_FIELDS))


def _bert_config_to_reference(config: LineageBertConfig) -> transformers.BertConfig:
    check_reference_fields(config, "BERT", {"norm_position": "post", "gated_ffn": False})
    return with_task_fields(config, transformers.BertConfig, copy_fields(config, _BERT_SHARED_FIELDS))


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
        reference_class=getattr(transformers, reference_name), lineage_class=lineage_class,
        config_to_lineage=_bert_config_to_lineage, config_to_reference=_bert_config_to_reference,
        state_to_lineage=_bert_state_to_lineage, state_to_reference=_bert_state_to_reference,
    )


BERT_CONVERSIONS: tuple[Conversion, ...] = (
    _bert("BertModel", LineageBertModel),
    _bert("BertForPreTraining", LineageBertForPreTraining),
    _bert("BertForMaskedLM", LineageBertForMaskedLM),
    _bert("BertLMHeadModel", LineageBertLMHeadModel),
    _bert("BertForSequenceClassification", LineageBertForSequenceClassification),
    _bert("BertForTokenClassification", LineageBertForTokenClassification),
    _bert("BertForQuestionAnswering", LineageBertForQuestionAnswering),
)


__all__ = ["BERT_CONVERSIONS", "BERT_KEY_PAIRS"]
