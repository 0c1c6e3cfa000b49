"""Transformer weights to and from transformers' `MarianModel` / `MarianMTModel`: Marian's split sin|cos positions
and its fixed logits bias are Lineage config choices (`sinusoidal_layout`, `final_logits_bias`), so the conversion is
a renaming of keys and config fields; the sinusoid tables are computed, not converted.
"""

import torch
import transformers
from torch import nn

from .configuration_lineage_transformer import LineageTransformerConfig
from .conversion_base import Conversion, StateDict, check_reference_fields, rename_keys
from .modeling_lineage_transformer import (
    LineageTransformerForConditionalGeneration,
    LineageTransformerModel,
)

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
    check_reference_fields(config, "Marian", required, () if config.decoder_start_token_id is not None
                           else ("`decoder_start_token_id`=None (Marian needs an id)",))
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
        reference_class=getattr(transformers, reference_name), lineage_class=lineage_class,
        config_to_lineage=_marian_config_to_lineage, config_to_reference=_marian_config_to_reference,
        state_to_lineage=_marian_state_to_lineage, state_to_reference=_marian_state_to_reference,
        reference_computed_keys=tuple(f"{prefix}{stack}.embed_positions.weight" for stack in ("encoder", "decoder")),
    )


MARIAN_CONVERSIONS: tuple[Conversion, ...] = (
    _marian("MarianModel", LineageTransformerModel),
    _marian("MarianMTModel", LineageTransformerForConditionalGeneration),
)


__all__ = ["MARIAN_CONVERSIONS", "MARIAN_KEY_PAIRS"]
