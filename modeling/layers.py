"""The shared core of every Lineage family: attention, feed-forward, norms, residual blocks, the block loop, positions.

Follows "Attention Is All You Need" (Vaswani et al. 2017, section 3). One attention module serves bidirectional,
causal and cross attention; the kernel is chosen through transformers' attention interface
(`config._attn_implementation`), the cache through transformers' `Cache` classes. Departures, by config: pre-norm
(as GPT-2), a gated feed-forward, Marian's split sin|cos positions, relative positions (Shaw et al. 2018,
`relative_positions.py`).

Dimension legend:
    B  batch size
    T  query length (tokens of the current input)
    S  key/value length (cached + current tokens, or encoder length for cross attention)
    H  number of attention heads
    D  head dimension (hidden_size // H)
    C  hidden size (H * D)
    N  tokens of a flattened batch (B * T, or the labelled ones)
    V  vocabulary size (`vocab_size`); V' the rows of a padded output layer (`padded_vocab_size`)
"""

from collections.abc import Callable

import torch
from torch import nn
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .arguments import forward_arguments
from .linear import LineageLinear
from .packing import varlen_sdpa_forward
from .relative_positions import (
    relative_key_scores,
    relative_position_index,
    relative_value_term,
)

ACTIVATION_MODULES: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "gelu_new": lambda: nn.GELU(approximate="tanh"),
    "silu": nn.SiLU,
}


# ----------------------------------------------------------------------------------------------------------
# Attention
# ----------------------------------------------------------------------------------------------------------


def apply_attention_mask(scores: torch.Tensor, attention_mask: torch.Tensor | None, is_causal: bool) -> torch.Tensor:
    """Scores (B, H, T, S) under either mask transformers prepares: eager's additive float mask, or sdpa's boolean one
    (True = attend; `None` for a pure causal pattern, rebuilt here for causal attention)."""
    if attention_mask is None and is_causal and scores.shape[2] > 1:
        length, total = scores.shape[2], scores.shape[3]
        attention_mask = torch.ones(length, total, dtype=torch.bool, device=scores.device).tril(total - length)
    if attention_mask is None:
        return scores
    if attention_mask.dtype == torch.bool:
        return scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
    return scores + attention_mask


def relative_table(embedding: nn.Embedding, device: torch.device) -> torch.Tensor:
    """The (2k+1, D) table, read in its module's call, where accelerate's offload (`device_map`) has loaded it."""
    return embedding(torch.arange(embedding.num_embeddings, device=device))


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    relative_position_index: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T * scaling + mask) V and the probabilities; with `relative_position_index` (B or 1, T, S), Shaw et
    al. (2018) eqs. 4 and 3: `e_ij = q_i (k_j + a^K_ij)^T * scaling`, `z_i = sum_j alpha_ij (v_j + a^V_ij)`."""
    scores = torch.matmul(query, key.transpose(2, 3))  # (B, H, T, S)
    index = relative_position_index[:, None] if relative_position_index is not None else None  # (B|1, 1, T, S)
    if index is not None:
        scores = scores + relative_key_scores(query, index, relative_table(module.relative_keys, query.device))
    scores = apply_attention_mask(scores * scaling, attention_mask, module.is_causal)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    probs = nn.functional.dropout(probs, p=dropout, training=module.training)
    output = torch.matmul(probs, value)  # (B, H, T, D)
    if index is not None and module.relative_values is not None:
        output = output + relative_value_term(probs, index, relative_table(module.relative_values, query.device))
    return output.transpose(1, 2).contiguous(), probs  # (B, T, H, D)


def sdpa_relative_keys_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    relative_position_index: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Keys-only relative attention through SDPA: `q_i a^K_ij^T * scaling` is an additive bias, merged with the
    mask into SDPA's float `attn_mask`, so `softmax(Q K^T * scaling + bias + mask) V` runs in the fused kernel."""
    table = relative_table(module.relative_keys, query.device)  # (2k+1, D)
    bias = relative_key_scores(query, relative_position_index[:, None], table) * scaling
    bias = apply_attention_mask(bias, attention_mask, module.is_causal)  # (B, H, T, S)
    return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, bias, scaling=scaling, dropout=dropout, **kwargs)


class LineageAttention(nn.Module):
    """Multi-head attention: self (bidirectional or causal) or cross, with an optional KV cache (cross keys and values
    projected once per generation under an `EncoderDecoderCache`).

    With relative positions, self-attention holds the layer's tables `relative_keys` (a^K) and, for `"relative"`,
    `relative_values` (a^V), 2k + 1 vectors of head size, indexed by `relative_position_index` (B or 1, T, S). Kernels:
    absolute positions `config._attn_implementation`; `"relative-keys"` SDPA with a bias (`sdpa_relative_keys_forward`)
    but eager under eager or for attention weights; `"relative"` always eager (the value term needs the probabilities);
    `packed_sequences` `varlen_sdpa_forward`."""

    def __init__(self, config, layer_idx: int, is_causal: bool = False, is_cross_attention: bool = False):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        # sdpa reads `module.is_causal`; encoder and cross attention must say False or they turn causal
        self.is_causal = is_causal
        self.is_cross_attention = is_cross_attention
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = config.attention_probs_dropout_prob
        self.q_proj = LineageLinear(config.hidden_size, config.hidden_size)
        self.k_proj = LineageLinear(config.hidden_size, config.hidden_size)
        self.v_proj = LineageLinear(config.hidden_size, config.hidden_size)
        self.o_proj = LineageLinear(config.hidden_size, config.hidden_size)
        relative = None if is_cross_attention else config.relative_attention
        table_size = 2 * config.max_relative_position + 1 if relative else 0
        self.relative_keys = nn.Embedding(table_size, self.head_dim) if relative else None
        self.relative_values = nn.Embedding(table_size, self.head_dim) if relative == "relative" else None

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, D)

    def _key_value(self, hidden_states: torch.Tensor, key_value_states: torch.Tensor | None,
                   cache: Cache | None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.is_cross_attention:
            cross = cache.cross_attention_cache if isinstance(cache, EncoderDecoderCache) else None
            if cross is not None and cache.is_updated.get(self.layer_idx):
                layer = cross.layers[self.layer_idx]
                return layer.keys, layer.values
            key, value = self._heads(self.k_proj(key_value_states)), self._heads(self.v_proj(key_value_states))
            if cross is not None:
                key, value = cross.update(key, value, self.layer_idx)
                cache.is_updated[self.layer_idx] = True
            return key, value
        key, value = self._heads(self.k_proj(hidden_states)), self._heads(self.v_proj(hidden_states))
        if isinstance(cache, EncoderDecoderCache):
            cache = cache.self_attention_cache
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)  # (B, H, S, D)
        return key, value

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        key_value_states: torch.Tensor | None = None,
        cache: Cache | None = None,
        output_attentions: bool = False,
        relative_position_index: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, length, _ = hidden_states.shape
        query = self._heads(self.q_proj(hidden_states))  # (B, H, T, D)
        key, value = self._key_value(hidden_states, key_value_states, cache)
        if self.relative_keys is not None:
            kwargs["relative_position_index"] = self._relative_index(relative_position_index, length, key.shape[2],
                                                                      query.device)
        output, weights = self._kernel(output_attentions, "packed_sequences" in kwargs)(
            self, query, key, value, attention_mask,
            scaling=self.scaling, dropout=self.dropout if self.training else 0.0, **kwargs,
        )
        output = output.reshape(batch, length, -1)  # (B, T, C)
        return self.o_proj(output), weights

    def _kernel(self, output_attentions: bool, packed: bool = False) -> Callable:
        """The attention function for this call (see the class docstring)."""
        if packed:
            return varlen_sdpa_forward
        implementation = self.config._attn_implementation
        if output_attentions and implementation == "sdpa":
            implementation = "eager"  # sdpa never materialises the probabilities; its masks are eager-compatible
        if self.relative_keys is not None and implementation != "eager":
            keys_only = self.relative_values is None and not output_attentions
            return sdpa_relative_keys_forward if keys_only else eager_attention_forward
        return ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)

    def _relative_index(self, index: torch.Tensor | None, length: int, total: int,
                        device: torch.device) -> torch.Tensor:
        """The model's (B or 1, T, S) distance rows, else those of consecutive positions; padded with row 0 over the
        empty (masked) slots of a static cache, whose keys are longer than the tokens seen so far."""
        if index is None:
            positions = torch.arange(total, device=device)[None]  # (1, S)
            index = relative_position_index(positions[:, total - length:], positions, self.config.max_relative_position)
        if index.shape[-1] < total:
            index = nn.functional.pad(index, (0, total - index.shape[-1]))
        return index


# ----------------------------------------------------------------------------------------------------------
# Feed-forward, residual sublayer, block
# ----------------------------------------------------------------------------------------------------------


class LineageFeedForward(nn.Module):
    """Position-wise feed-forward: `down(act(up(x)))`, or gated `down(act(gate(x)) * up(x))`."""

    def __init__(self, config):
        super().__init__()
        self.up_proj = LineageLinear(config.hidden_size, config.intermediate_size)
        self.gate_proj = LineageLinear(config.hidden_size, config.intermediate_size) if config.gated_ffn else None
        self.act = ACTIVATION_MODULES[config.hidden_act]()
        self.down_proj = LineageLinear(config.intermediate_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.gate_proj is None:
            return self.down_proj(self.act(self.up_proj(hidden_states)))
        return self.down_proj(self.act(self.gate_proj(hidden_states)) * self.up_proj(hidden_states))


def classifier_dropout(config) -> nn.Dropout:
    """Dropout before a classification layer: `config.classifier_dropout`, else `hidden_dropout_prob` (the papers)."""
    rate = config.classifier_dropout
    return nn.Dropout(rate if rate is not None else config.hidden_dropout_prob)


class ResidualSublayer(nn.Module):
    """`LayerNorm(x + Dropout(Sublayer(x)))` (post-norm, the papers) or `x + Dropout(Sublayer(LayerNorm(x)))` (pre-norm,
    GPT-2); a sublayer's extra outputs (attention weights) pass through."""

    def __init__(self, sublayer: nn.Module, config):
        super().__init__()
        self.sublayer = sublayer
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.pre_norm = config.norm_position == "pre"

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        residual = hidden_states
        if self.pre_norm:
            hidden_states = self.norm(hidden_states)
        output = self.sublayer(hidden_states, *args, **kwargs)
        output, extras = (output[0], output[1:]) if isinstance(output, tuple) else (output, ())
        hidden_states = residual + self.dropout(output)
        if not self.pre_norm:
            hidden_states = self.norm(hidden_states)
        return (hidden_states, *extras) if extras else hidden_states


class LineageBlock(GradientCheckpointingLayer):
    """Self-attention, optional cross attention, feed-forward, each a `ResidualSublayer`. Returns `(hidden_states,
    self_attention_weights, cross_attention_weights)`, the weights `None` unless eager computed them."""

    def __init__(self, config, layer_idx: int, is_causal: bool = False, has_cross_attention: bool = False):
        super().__init__()
        self.self_attn = ResidualSublayer(LineageAttention(config, layer_idx, is_causal=is_causal), config)
        self.cross_attn = (
            ResidualSublayer(LineageAttention(config, layer_idx, is_cross_attention=True), config)
            if has_cross_attention else None
        )
        self.feed_forward = ResidualSublayer(LineageFeedForward(config), config)

    @forward_arguments(strict=False)  # the extra keywords are the attention kernel's
    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        hidden_states, self_weights = self.self_attn(hidden_states, attention_mask, cache=cache, **kwargs)
        cross_weights = None
        if self.cross_attn is not None and encoder_hidden_states is not None:  # none given: a decoder-only pass
            hidden_states, cross_weights = self.cross_attn(
                hidden_states, encoder_attention_mask, encoder_hidden_states, cache=cache, **kwargs
            )
        return self.feed_forward(hidden_states), self_weights, cross_weights


def final_norm(config) -> nn.LayerNorm | None:
    """The LayerNorm after the last block of a pre-norm stack (GPT-2), None under post-norm (each block ends normed)."""
    return nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.norm_position == "pre" else None


def run_blocks(blocks: nn.ModuleList, norm: nn.LayerNorm | None, hidden_states: torch.Tensor,
               attention_mask: torch.Tensor | None, memory: tuple = (), **kwargs) -> torch.Tensor:
    """Every block, then `final_norm`. `memory` (the encoder states and their mask) is handed on positionally, as
    gradient checkpointing requires of tensors with gradients; `kwargs`: the cache and the kernel's keywords."""
    for block in blocks:
        hidden_states = block(hidden_states, attention_mask, *memory, **kwargs)[0]
    return norm(hidden_states) if norm is not None else hidden_states


# ----------------------------------------------------------------------------------------------------------
# Positions
# ----------------------------------------------------------------------------------------------------------


def sinusoidal_table(num_positions: int, dim: int, interleaved: bool = True) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (section 3.5), shape (P, C): sin on even and cos
    on odd dimensions (`interleaved`), else all sin then all cos (Marian's); computed in float64, returned in the
    default dtype."""
    positions = torch.arange(num_positions, dtype=torch.float64)[:, None]  # (P, 1)
    inv_freq = torch.pow(10000.0, -torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (ceil(C/2),)
    angles = positions * inv_freq  # (P, ceil(C/2))
    sin, cos = torch.sin(angles), torch.cos(angles)[:, : dim // 2]
    if interleaved:
        table = torch.zeros(num_positions, dim, dtype=torch.float64)
        table[:, 0::2], table[:, 1::2] = sin, cos
    else:
        table = torch.cat([sin, cos], dim=-1)
    return table.to(torch.get_default_dtype())


class SinusoidalPositionalEmbedding(nn.Module):
    """Fixed sinusoidal positions; a non-persistent buffer, so it is never saved and recomputed on load."""

    def __init__(self, num_positions: int, dim: int, interleaved: bool = True):
        super().__init__()
        self.interleaved = interleaved
        self.register_buffer("weight", sinusoidal_table(num_positions, dim, interleaved), persistent=False)

    def reset_table(self) -> torch.Tensor:
        return sinusoidal_table(self.weight.shape[0], self.weight.shape[1], self.interleaved)

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        return nn.functional.embedding(position_ids, self.weight)  # (B, T, C)


class LearnedPositionalEmbedding(nn.Embedding):
    """Learned absolute positions (BERT, GPT), indexed by `position_ids`."""


__all__ = [
    "ACTIVATION_MODULES",
    "LearnedPositionalEmbedding",
    "LineageAttention",
    "LineageBlock",
    "LineageFeedForward",
    "ResidualSublayer",
    "SinusoidalPositionalEmbedding",
    "apply_attention_mask",
    "classifier_dropout",
    "eager_attention_forward",
    "final_norm",
    "run_blocks",
    "sdpa_relative_keys_forward",
    "sinusoidal_table",
]
