"""Weights to and from the transformers reference models, with identical outputs.

`from_transformers(model)` takes an instance of a supported transformers class (for example a
`BertForPreTraining` loaded with `from_pretrained("google-bert/bert-base-uncased")`) and returns the matching
Lineage model; `to_transformers(model)` goes back. Each family contributes a `Conversion`: the pair of classes,
the config translation both ways and the state-dict translation both ways. Key renames are written once as
pairs of templates (`{}` stands for a layer index) and applied in either direction.

A reference model converts whenever transformers loads it: its config is read as a stored one (`from_dict`), so
special-token ids that index no weight (GPT-2's `eos_token_id=50256` in a config with a smaller vocabulary) are kept
with a warning, as transformers keeps them; everything that shapes a weight or an output is checked.

Supported pairs:
    BertModel, BertForPreTraining, BertForMaskedLM, BertLMHeadModel (decoder, with cross attention),
    BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering  <->  LineageBert*
    OpenAIGPTModel, OpenAIGPTLMHeadModel, OpenAIGPTForSequenceClassification  <->  post-norm LineageGpt*
    GPT2Model, GPT2LMHeadModel, GPT2ForSequenceClassification  <->  pre-norm LineageGpt*
    MarianModel, MarianMTModel  <->  LineageTransformerModel, LineageTransformerForConditionalGeneration

A padded vocabulary (`pad_vocab_to_multiple_of`) converts: `to_transformers` drops the padding rows of the embedding,
the output layer and its biases; `from_transformers(model, pad_vocab_to_multiple_of=64)` adds them.

Models with relative position representations (`position_embedding_type="relative"` or `"relative-keys"`) have no
transformers counterpart: `to_transformers` refuses them.
"""

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import transformers
from torch import nn

from .configuration_lineage_bert import LineageBertConfig
from .configuration_lineage_common import check_vocab_multiple
from .configuration_lineage_gpt import LineageGptConfig
from .configuration_lineage_transformer import LineageTransformerConfig
from .modeling_lineage_bert import (
    LineageBertForMaskedLM,
    LineageBertForPreTraining,
    LineageBertForQuestionAnswering,
    LineageBertForSequenceClassification,
    LineageBertForTokenClassification,
    LineageBertLMHeadModel,
    LineageBertModel,
)
from .modeling_lineage_gpt import (
    LineageGptForCausalLM,
    LineageGptForSequenceClassification,
    LineageGptModel,
)
from .modeling_lineage_transformer import (
    LineageTransformerForConditionalGeneration,
    LineageTransformerModel,
)

StateDict = dict[str, torch.Tensor]

# config fields every classification head carries, copied unchanged in both directions
_TASK_FIELDS = ("id2label", "label2id", "problem_type", "pad_token_id", "bos_token_id", "eos_token_id")


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


def _copy_fields(source, names: tuple[str, ...]) -> dict:
    return {name: getattr(source, name) for name in names if getattr(source, name, None) is not None}


def _with_task_fields(config, target_class, fields: dict):
    """`target_class` read as a stored config (`from_dict`), with `fields` and the classification fields."""
    task = _copy_fields(config, _TASK_FIELDS)
    if getattr(config, "id2label", None) is None:
        task["num_labels"] = config.num_labels
    return target_class.from_dict({**fields, **task})


# ----------------------------------------------------------------------------------------------------------
# BERT
# ----------------------------------------------------------------------------------------------------------

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


BERT_CONVERSIONS: tuple[Conversion, ...] = (
    _bert("BertModel", LineageBertModel),
    _bert("BertForPreTraining", LineageBertForPreTraining),
    _bert("BertForMaskedLM", LineageBertForMaskedLM),
    _bert("BertLMHeadModel", LineageBertLMHeadModel),
    _bert("BertForSequenceClassification", LineageBertForSequenceClassification),
    _bert("BertForTokenClassification", LineageBertForTokenClassification),
    _bert("BertForQuestionAnswering", LineageBertForQuestionAnswering),
)


# ----------------------------------------------------------------------------------------------------------
# GPT: transformers' OpenAIGPT* (post-norm) and GPT2* (pre-norm)
# ----------------------------------------------------------------------------------------------------------

# `Conv1D`, the references' projection, stores a Linear weight transposed: (in, out)
_GPT_CONV1D = re.compile(r"\.(c_attn|c_proj|c_fc)\.weight$")
_GPT_QKV = ("q_proj", "k_proj", "v_proj")

_GPT_BLOCK_KEYS = (
    ("h.{}.attn.q_proj", "layers.{}.self_attn.sublayer.q_proj"),
    ("h.{}.attn.k_proj", "layers.{}.self_attn.sublayer.k_proj"),
    ("h.{}.attn.v_proj", "layers.{}.self_attn.sublayer.v_proj"),
    ("h.{}.attn.c_proj", "layers.{}.self_attn.sublayer.o_proj"),
    ("h.{}.ln_1", "layers.{}.self_attn.norm"),
    ("h.{}.mlp.c_fc", "layers.{}.feed_forward.sublayer.up_proj"),
    ("h.{}.mlp.c_proj", "layers.{}.feed_forward.sublayer.down_proj"),
    ("h.{}.ln_2", "layers.{}.feed_forward.norm"),
)


def _gpt_key_pairs(embedding_keys: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    # heads hold the base model under "transformer." in both implementations; the base model has no prefix
    keys = embedding_keys + _GPT_BLOCK_KEYS
    pairs = [(prefix + ref, prefix + lin) for prefix in ("transformer.", "") for ref, lin in keys]
    return (*pairs, ("lm_head", "lm_head"), ("score", "score"))


OPENAI_GPT_KEY_PAIRS = _gpt_key_pairs((("tokens_embed", "embed_tokens"), ("positions_embed", "embed_positions")))
GPT2_KEY_PAIRS = _gpt_key_pairs((("wte", "embed_tokens"), ("wpe", "embed_positions"), ("ln_f", "final_norm")))

# OpenAI GPT's "gelu" is the tanh approximation (transformers' `gelu_new`), as in the original GPT code
_OPENAI_ACTIVATIONS = {"gelu": "gelu_new", "relu": "relu", "silu": "silu", "swish": "silu"}
_GPT2_ACTIVATIONS = {"gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "gelu": "gelu", "relu": "relu",
                     "silu": "silu", "swish": "silu"}


def _activation(name: str, table: dict[str, str], field: str) -> str:
    if name not in table:
        raise ValueError(f"`{field}`={name!r} has no equivalent; convertible values: {sorted(table)}.")
    return table[name]


def _gpt_config(source, target_class, fields: dict):
    config = _with_task_fields(source, target_class, {**fields, "tie_word_embeddings": source.tie_word_embeddings})
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        setattr(config, name, getattr(source, name, None))  # explicit None: GPT-2's config would default to 50256
    return config


def _gpt_config_to_lineage(config, norm_position: str, intermediate_size: int, hidden_act: str):
    if config.embd_pdrop != config.resid_pdrop:
        raise ValueError(
            f"Lineage uses one dropout for embeddings and sublayers; `embd_pdrop` ({config.embd_pdrop}) must equal "
            f"`resid_pdrop` ({config.resid_pdrop})."
        )
    return _gpt_config(config, LineageGptConfig, {
        "vocab_size": config.vocab_size, "hidden_size": config.n_embd, "num_hidden_layers": config.n_layer,
        "num_attention_heads": config.n_head, "intermediate_size": intermediate_size, "hidden_act": hidden_act,
        "hidden_dropout_prob": config.resid_pdrop, "attention_probs_dropout_prob": config.attn_pdrop,
        "max_position_embeddings": config.n_positions, "initializer_range": config.initializer_range,
        "layer_norm_eps": config.layer_norm_epsilon, "norm_position": norm_position,
    })


def _gpt_reference_fields(config: LineageGptConfig, norm_position: str, reference: str) -> dict:
    if config.norm_position != norm_position or config.gated_ffn:
        raise ValueError(
            f"transformers' {reference} is {norm_position}-norm with a plain feed-forward; a model with "
            f"norm_position={config.norm_position!r}, gated_ffn={config.gated_ffn} has no equivalent."
        )
    return {
        "vocab_size": config.vocab_size, "n_positions": config.max_position_embeddings, "n_embd": config.hidden_size,
        "n_layer": config.num_hidden_layers, "n_head": config.num_attention_heads,
        "resid_pdrop": config.hidden_dropout_prob, "embd_pdrop": config.hidden_dropout_prob,
        "attn_pdrop": config.attention_probs_dropout_prob, "layer_norm_epsilon": config.layer_norm_eps,
        "initializer_range": config.initializer_range,
    }


def _openai_config_to_lineage(config: transformers.OpenAIGPTConfig) -> LineageGptConfig:
    hidden_act = _activation(config.afn, _OPENAI_ACTIVATIONS, "afn")
    return _gpt_config_to_lineage(config, "post", 4 * config.n_embd, hidden_act)


def _openai_config_to_reference(config: LineageGptConfig) -> transformers.OpenAIGPTConfig:
    fields = _gpt_reference_fields(config, "post", "OpenAIGPT")
    if config.intermediate_size != 4 * config.hidden_size:
        raise ValueError(
            f"OpenAIGPT's feed-forward is 4 * hidden_size; `intermediate_size` must be {4 * config.hidden_size}."
        )
    afn = _activation(config.hidden_act, {"gelu_new": "gelu", "relu": "relu", "silu": "silu"}, "hidden_act")
    return _gpt_config(config, transformers.OpenAIGPTConfig, {**fields, "afn": afn})


def _gpt2_config_to_lineage(config: transformers.GPT2Config) -> LineageGptConfig:
    if not config.scale_attn_weights or config.scale_attn_by_inverse_layer_idx or config.add_cross_attention:
        raise ValueError(
            "Only GPT-2 with `scale_attn_weights=True`, `scale_attn_by_inverse_layer_idx=False` and "
            "`add_cross_attention=False` converts."
        )
    hidden_act = _activation(config.activation_function, _GPT2_ACTIVATIONS, "activation_function")
    return _gpt_config_to_lineage(config, "pre", config.n_inner or 4 * config.n_embd, hidden_act)


def _gpt2_config_to_reference(config: LineageGptConfig) -> transformers.GPT2Config:
    fields = _gpt_reference_fields(config, "pre", "GPT2")
    activation = _activation(config.hidden_act, {a: a for a in ("gelu_new", "gelu", "relu", "silu")}, "hidden_act")
    return _gpt_config(config, transformers.GPT2Config, {
        **fields, "n_inner": config.intermediate_size, "activation_function": activation,
    })


def _gpt_state_to_lineage(state: StateDict, pairs: tuple[tuple[str, str], ...]) -> StateDict:
    split = {}
    for key, tensor in state.items():
        if _GPT_CONV1D.search(key):
            tensor = tensor.t()  # (in, out) -> (out, in)
        if ".attn.c_attn." in key:
            for name, part in zip(_GPT_QKV, tensor.chunk(3)):  # (3C, ...) -> 3 x (C, ...)
                split[key.replace("c_attn", name)] = part
        else:
            split[key] = tensor
    return rename_keys(split, pairs)


def _gpt_state_to_reference(state: StateDict, pairs: tuple[tuple[str, str], ...]) -> StateDict:
    state = rename_keys(state, pairs, reverse=True)
    packed = {}
    for key, tensor in state.items():
        if ".attn.k_proj." in key or ".attn.v_proj." in key:
            continue
        if ".attn.q_proj." in key:
            tensor = torch.cat([state[key.replace("q_proj", name)] for name in _GPT_QKV])  # (3C, ...)
            key = key.replace("q_proj", "c_attn")
        packed[key] = tensor.t().contiguous() if _GPT_CONV1D.search(key) else tensor  # (out, in) -> (in, out)
    return packed


# norm_position -> (config to Lineage, config to reference, key pairs): post-norm is OpenAIGPT*, pre-norm GPT2*
_GPT_REFERENCES = {
    "post": (_openai_config_to_lineage, _openai_config_to_reference, OPENAI_GPT_KEY_PAIRS),
    "pre": (_gpt2_config_to_lineage, _gpt2_config_to_reference, GPT2_KEY_PAIRS),
}


def _gpt(reference_name: str, lineage_class: type[nn.Module], norm_position: str) -> Conversion:
    config_to_lineage, config_to_reference, pairs = _GPT_REFERENCES[norm_position]
    return Conversion(
        getattr(transformers, reference_name), lineage_class, config_to_lineage, config_to_reference,
        partial(_gpt_state_to_lineage, pairs=pairs), partial(_gpt_state_to_reference, pairs=pairs),
        takes_lineage_config=lambda config: config.norm_position == norm_position,
    )


GPT_CONVERSIONS: tuple[Conversion, ...] = (
    _gpt("OpenAIGPTModel", LineageGptModel, "post"),
    _gpt("OpenAIGPTLMHeadModel", LineageGptForCausalLM, "post"),
    _gpt("OpenAIGPTForSequenceClassification", LineageGptForSequenceClassification, "post"),
    _gpt("GPT2Model", LineageGptModel, "pre"),
    _gpt("GPT2LMHeadModel", LineageGptForCausalLM, "pre"),
    _gpt("GPT2ForSequenceClassification", LineageGptForSequenceClassification, "pre"),
)


# ----------------------------------------------------------------------------------------------------------
# Marian
# ----------------------------------------------------------------------------------------------------------

# Marian's activation names -> Lineage's (`swish` is SiLU)
_MARIAN_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_new", "silu": "silu", "swish": "silu"}
_MARIAN_TOKEN_FIELDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")
_MARIAN_LAYER_NORM_EPS = 1e-5  # Marian's nn.LayerNorm default, not configurable there

_MARIAN_LAYER_KEYS = (
    ("self_attn.q_proj", "self_attn.sublayer.q_proj"),
    ("self_attn.k_proj", "self_attn.sublayer.k_proj"),
    ("self_attn.v_proj", "self_attn.sublayer.v_proj"),
    ("self_attn.out_proj", "self_attn.sublayer.o_proj"),
    ("self_attn_layer_norm", "self_attn.norm"),
    ("encoder_attn.q_proj", "cross_attn.sublayer.q_proj"),
    ("encoder_attn.k_proj", "cross_attn.sublayer.k_proj"),
    ("encoder_attn.v_proj", "cross_attn.sublayer.v_proj"),
    ("encoder_attn.out_proj", "cross_attn.sublayer.o_proj"),
    ("encoder_attn_layer_norm", "cross_attn.norm"),
    ("fc1", "feed_forward.sublayer.up_proj"),
    ("fc2", "feed_forward.sublayer.down_proj"),
    ("final_layer_norm", "feed_forward.norm"),
)


def _marian_key_pairs() -> tuple[tuple[str, str], ...]:
    # MarianMTModel nests the encoder-decoder under "model.", MarianModel does not; both map to Lineage's layout
    pairs = [("final_logits_bias", "final_logits_bias"), ("lm_head", "lm_head")]
    for prefix in ("model.", ""):
        pairs.append((f"{prefix}encoder.embed_tokens", f"{prefix}encoder.embed_tokens"))
        for stack in ("encoder", "decoder"):
            pairs += [(f"{prefix}{stack}.layers.{{}}.{reference}", f"{prefix}{stack}.layers.{{}}.{lineage}")
                      for reference, lineage in _MARIAN_LAYER_KEYS]
    return tuple(pairs)


MARIAN_KEY_PAIRS = _marian_key_pairs()


def _marian_config_to_lineage(config: transformers.MarianConfig) -> LineageTransformerConfig:
    problems = [
        f"`{a}`={getattr(config, a)!r} differs from `{b}`={getattr(config, b)!r}"
        for a, b in (("decoder_layers", "encoder_layers"), ("decoder_attention_heads", "encoder_attention_heads"),
                     ("decoder_ffn_dim", "encoder_ffn_dim"), ("decoder_vocab_size", "vocab_size"))
        if getattr(config, a) != getattr(config, b)
    ]
    problems += [f"`{name}`={getattr(config, name)!r} is not 0"
                 for name in ("activation_dropout", "encoder_layerdrop", "decoder_layerdrop") if getattr(config, name)]
    if not config.share_encoder_decoder_embeddings:
        problems.append("`share_encoder_decoder_embeddings` is False")
    if config.activation_function not in _MARIAN_ACTIVATIONS:
        problems.append(
            f"`activation_function`={config.activation_function!r} is not one of {sorted(_MARIAN_ACTIVATIONS)}"
        )
    if problems:
        raise ValueError(
            "This Marian model has no Lineage Transformer equivalent (one shared vocabulary and embedding, equal "
            "encoder and decoder stacks, no activation dropout or layer drop): " + "; ".join(problems) + "."
        )
    return LineageTransformerConfig.from_dict(dict(
        vocab_size=config.vocab_size, hidden_size=config.d_model, num_hidden_layers=config.encoder_layers,
        num_attention_heads=config.encoder_attention_heads, intermediate_size=config.encoder_ffn_dim,
        hidden_act=_MARIAN_ACTIVATIONS[config.activation_function], hidden_dropout_prob=config.dropout,
        attention_probs_dropout_prob=config.attention_dropout, max_position_embeddings=config.max_position_embeddings,
        initializer_range=config.init_std, layer_norm_eps=_MARIAN_LAYER_NORM_EPS, norm_position="post",
        position_embedding_type="sinusoidal", sinusoidal_layout="split", scale_embedding=config.scale_embedding,
        label_smoothing=0.0, final_logits_bias=True, tie_word_embeddings=config.tie_word_embeddings,
        **{name: getattr(config, name) for name in _MARIAN_TOKEN_FIELDS},
    ))


def _marian_config_to_reference(config: LineageTransformerConfig) -> transformers.MarianConfig:
    # label smoothing is a training objective, not a weight: Marian's loss is plain cross-entropy
    required = {"norm_position": "post", "gated_ffn": False, "position_embedding_type": "sinusoidal",
                "sinusoidal_layout": "split", "layer_norm_eps": _MARIAN_LAYER_NORM_EPS}
    problems = [f"`{name}`={getattr(config, name)!r} (Marian: {value!r})"
                for name, value in required.items() if getattr(config, name) != value]
    if config.decoder_start_token_id is None:
        problems.append("`decoder_start_token_id`=None (Marian needs an id)")
    if problems:
        raise ValueError("transformers' Marian has no equivalent of " + ", ".join(problems) + ".")
    return transformers.MarianConfig(
        vocab_size=config.vocab_size, decoder_vocab_size=config.vocab_size, d_model=config.hidden_size,
        encoder_layers=config.num_hidden_layers, decoder_layers=config.num_hidden_layers,
        encoder_attention_heads=config.num_attention_heads, decoder_attention_heads=config.num_attention_heads,
        encoder_ffn_dim=config.intermediate_size, decoder_ffn_dim=config.intermediate_size,
        activation_function=config.hidden_act, dropout=config.hidden_dropout_prob,
        attention_dropout=config.attention_probs_dropout_prob, activation_dropout=0.0,
        max_position_embeddings=config.max_position_embeddings, init_std=config.initializer_range,
        scale_embedding=config.scale_embedding, tie_word_embeddings=config.tie_word_embeddings,
        share_encoder_decoder_embeddings=True, forced_eos_token_id=None,
        **{name: getattr(config, name) for name in _MARIAN_TOKEN_FIELDS},
    )


def _marian_state_to_lineage(state: StateDict) -> StateDict:
    prefix = "model." if "model.shared.weight" in state else ""
    if not torch.equal(state[f"{prefix}encoder.embed_tokens.weight"], state[f"{prefix}decoder.embed_tokens.weight"]):
        raise ValueError("The Marian encoder and decoder embeddings differ; Lineage shares one embedding matrix.")
    # aliases of the shared embedding, and the sinusoid tables Lineage recomputes from its config
    derived = {f"{prefix}shared.weight", f"{prefix}decoder.embed_tokens.weight"}
    derived |= {f"{prefix}{stack}.embed_positions.weight" for stack in ("encoder", "decoder")}
    return rename_keys({k: v for k, v in state.items() if k not in derived}, MARIAN_KEY_PAIRS)


def _marian_state_to_reference(state: StateDict) -> StateDict:
    state = rename_keys(state, MARIAN_KEY_PAIRS, reverse=True)
    prefix = "model." if "model.encoder.embed_tokens.weight" in state else ""
    embeddings = state[f"{prefix}encoder.embed_tokens.weight"]  # (V, C)
    state[f"{prefix}shared.weight"] = state[f"{prefix}decoder.embed_tokens.weight"] = embeddings
    if prefix:
        state.setdefault("final_logits_bias", embeddings.new_zeros(1, embeddings.shape[0]))  # (1, V)
    return state


def _marian(reference_name: str, lineage_class: type[nn.Module]) -> Conversion:
    prefix = "model." if reference_name == "MarianMTModel" else ""
    return Conversion(
        getattr(transformers, reference_name), lineage_class, _marian_config_to_lineage, _marian_config_to_reference,
        _marian_state_to_lineage, _marian_state_to_reference,
        reference_computed_keys=tuple(f"{prefix}{stack}.embed_positions.weight" for stack in ("encoder", "decoder")),
    )


MARIAN_CONVERSIONS: tuple[Conversion, ...] = (
    _marian("MarianModel", LineageTransformerModel),
    _marian("MarianMTModel", LineageTransformerForConditionalGeneration),
)

CONVERSIONS: tuple[Conversion, ...] = BERT_CONVERSIONS + GPT_CONVERSIONS + MARIAN_CONVERSIONS


# ----------------------------------------------------------------------------------------------------------
# Entry points
# ----------------------------------------------------------------------------------------------------------


def _find(model: nn.Module, attribute: str) -> Conversion:
    for conversion in CONVERSIONS:
        if type(model) is getattr(conversion, attribute) and (
            attribute == "reference_class" or conversion.takes_lineage_config(model.config)
        ):
            return conversion
    supported = sorted(getattr(c, attribute).__name__ for c in CONVERSIONS)
    raise TypeError(f"No conversion for {type(model).__name__}; supported classes: {', '.join(supported)}.")


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
    """The Lineage model with the same weights (and the same outputs) as a transformers reference model;
    `pad_vocab_to_multiple_of` (see `LineageConfig`) pads its embedding and output layer with freshly initialised
    rows that no output ever shows."""
    check_vocab_multiple(pad_vocab_to_multiple_of)
    conversion = _find(model, "reference_class")
    config = conversion.config_to_lineage(model.config)
    config.pad_vocab_to_multiple_of = pad_vocab_to_multiple_of
    return _build(conversion.lineage_class, config, conversion.state_to_lineage(model.state_dict()), model)


def to_transformers(model: nn.Module) -> nn.Module:
    """The transformers reference model with the same weights (and the same outputs) as a Lineage model."""
    conversion = _find(model, "lineage_class")
    if model.config.relative_attention is not None:
        raise ValueError(
            f"This {type(model).__name__} has relative position representations (`position_embedding_type`="
            f"{model.config.position_embedding_type!r}), which no transformers model offers, so it cannot be "
            "converted. Share it as it is: `save_pretrained(folder)`, then `from_pretrained(folder, "
            "trust_remote_code=True)` loads it anywhere."
        )
    config = conversion.config_to_reference(model.config)
    state = model.state_dict()
    for key, dim in _vocab_keys(model).items():  # drop the rows of a padded vocabulary
        state[key] = state[key].narrow(dim, 0, model.config.vocab_size)
    state = conversion.state_to_reference(state)
    return _build(conversion.reference_class, config, state, model, conversion.reference_computed_keys)


__all__ = ["CONVERSIONS", "Conversion", "from_transformers", "rename_keys", "to_transformers"]
