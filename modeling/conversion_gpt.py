"""GPT weights to and from transformers' `OpenAIGPT*` (post-norm, Radford et al. 2018) and `GPT2*` (pre-norm)
models: their `Conv1D` layers hold the transpose of a linear weight and pack q, k, v in one `c_attn`, which the
conversion splits and transposes; OpenAI GPT's `afn="gelu"` is the tanh approximation (Lineage's `gelu_new`).
"""

import re
from functools import partial

import torch
import transformers
from torch import nn

from .configuration_lineage_gpt import LineageGptConfig
from .conversion_base import Conversion, StateDict, check_reference_fields, rename_keys, with_task_fields
from .modeling_lineage_gpt import (
    LineageGptForCausalLM,
    LineageGptForSequenceClassification,
    LineageGptModel,
)

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
    config = with_task_fields(source, target_class, {**fields, "tie_word_embeddings": source.tie_word_embeddings})
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


def _gpt_reference_fields(config: LineageGptConfig, reference: str, required: dict,
                          activations: tuple[str, ...]) -> dict:
    # the fields both references share, once every field the reference cannot express is refused
    check_reference_fields(config, reference, {"gated_ffn": False, **required}, () if config.hidden_act in activations
                           else (f"`hidden_act`={config.hidden_act!r} ({reference}: one of {list(activations)})",))
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


# Lineage's activation -> OpenAIGPT's `afn` name for it
_OPENAI_AFN = {"gelu_new": "gelu", "relu": "relu", "silu": "silu"}


def _openai_config_to_reference(config: LineageGptConfig) -> transformers.OpenAIGPTConfig:
    # OpenAIGPT's feed-forward is 4 * hidden_size, with no field to set it
    required = {"norm_position": "post", "intermediate_size": 4 * config.hidden_size}
    fields = _gpt_reference_fields(config, "OpenAIGPT", required, tuple(_OPENAI_AFN))
    return _gpt_config(config, transformers.OpenAIGPTConfig, {**fields, "afn": _OPENAI_AFN[config.hidden_act]})


def _gpt2_config_to_lineage(config: transformers.GPT2Config) -> LineageGptConfig:
    if not config.scale_attn_weights or config.scale_attn_by_inverse_layer_idx or config.add_cross_attention:
        raise ValueError(
            "Only GPT-2 with `scale_attn_weights=True`, `scale_attn_by_inverse_layer_idx=False` and "
            "`add_cross_attention=False` converts."
        )
    hidden_act = _activation(config.activation_function, _GPT2_ACTIVATIONS, "activation_function")
    return _gpt_config_to_lineage(config, "pre", config.n_inner or 4 * config.n_embd, hidden_act)


def _gpt2_config_to_reference(config: LineageGptConfig) -> transformers.GPT2Config:
    fields = _gpt_reference_fields(config, "GPT2", {"norm_position": "pre"}, ("gelu_new", "gelu", "relu", "silu"))
    return _gpt_config(config, transformers.GPT2Config, {
        **fields, "n_inner": config.intermediate_size, "activation_function": config.hidden_act,
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
        reference_class=getattr(transformers, reference_name), lineage_class=lineage_class,
        config_to_lineage=config_to_lineage, config_to_reference=config_to_reference,
        state_to_lineage=partial(_gpt_state_to_lineage, pairs=pairs),
        state_to_reference=partial(_gpt_state_to_reference, pairs=pairs),
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


__all__ = ["GPT_CONVERSIONS", "OPENAI_GPT_KEY_PAIRS"]
