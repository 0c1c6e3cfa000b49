"""The shared core of every Lineage family: attention, feed-forward, norms, positions, residual blocks.

Follows "Attention Is All You Need" (Vaswani et al. 2017, section 3): scaled dot-product multi-head attention,
position-wise feed-forward, residual sublayers with LayerNorm, sinusoidal or learned positions. One attention
module serves bidirectional (BERT, encoder), causal (GPT, decoder) and cross attention; the kernel is chosen
through transformers' attention interface (`config._attn_implementation`: `eager`, `sdpa`, flash where
installed). Key/value caching goes through transformers' `Cache` classes (`DynamicCache` for decoder-only
models, `EncoderDecoderCache` for encoder-decoders).

Departures from the paper, all selected by config: pre-norm (`x + Sublayer(LayerNorm(x))`, as GPT-2) besides
the paper's post-norm; a gated feed-forward variant; the split sin/cos position layout used by Marian; relative
position representations in self-attention (Shaw et al. 2018, "Self-Attention with Relative Position
Representations"; `LineageAttention` says which kernel runs when).

The output layer: logits over the real vocabulary of a padded one (`pad_vocab_to_multiple_of`, `vocab_logits`), and
the LM loss computed without the (N, V) logits (`lm_head_loss`: chunked in PyTorch, or Liger Kernel's fused kernel on
CUDA), which the heads use in training (`skips_logits`).

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

import importlib.util
from collections.abc import Callable

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils.output_capturing import OutputRecorder

from .configuration_lineage_common import check_vocab_multiple
from .checks import (  # the families import the checks and the packing API from here
    check_cached_mask,
    check_ids_or_embeds,
    check_label_ids,
    check_labels_shape,
    check_mask_shape,
    check_sequence_length,
    check_token_ids,
)
from .packing import (
    PackedSequences,
    document_masking_error,
    varlen_attention_inputs,
    varlen_sdpa_forward,
)

ACTIVATION_MODULES: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "gelu_new": lambda: nn.GELU(approximate="tanh"),
    "silu": nn.SiLU,
}


# ----------------------------------------------------------------------------------------------------------
# Linear
# ----------------------------------------------------------------------------------------------------------

# oneDNN's fp32 matmul; present in x86 CPU builds of torch. Inductor uses the same op for CPU linears.
_ONEDNN_LINEAR = getattr(torch.ops.mkldnn, "_linear_pointwise", None) if torch.backends.mkldnn.is_available() else None
# Below this many weights (a 512 x 512 matrix) the kernel's fixed cost per call (15-30 us) outweighs what it
# saves: a 128-wide GPT generated about 2x slower through oneDNN than through `F.linear`.
_ONEDNN_MIN_WEIGHTS = 2**18


def _onednn_reads(parameter: torch.Tensor) -> bool:
    """A weight or bias the oneDNN kernel reads correctly: a dense float32 CPU tensor (a strided bias is misread)."""
    return (type(parameter) in (torch.Tensor, nn.Parameter) and parameter.device.type == "cpu"
            and parameter.dtype == torch.float32 and parameter.is_contiguous())


class LineageLinear(nn.Linear):
    """`nn.Linear` (same parameters, same checkpoint keys) with a faster kernel for CPU inference.

    For a float32 CPU input without autograd, `F.linear` goes to MKL, whose matrix-vector path runs on one
    thread: decoding one token at a time spends most of its time there. oneDNN's matmul uses every core and
    was 1.4x-2.3x faster for 1-128 rows on a 2-core x86 machine (12-layer 768-wide stack; docs/performance.md,
    "Sparse prediction and the CPU inference kernel"); it serves weights of at least 512 x 512 elements, where
    that gain exceeds its fixed cost per call. The two kernels round differently (about 1e-6 relative); set
    `LineageLinear.fast_cpu_inference = False` for results bit-identical to `nn.Linear`. Training, other
    devices and dtypes, autocast, tensor subclasses, strided weights or biases and `torch.compile` always
    take `F.linear`.
    """

    fast_cpu_inference: bool = _ONEDNN_LINEAR is not None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if (
            self.fast_cpu_inference
            and not torch.is_grad_enabled()  # first: training returns to `F.linear` after one check
            and type(input) is torch.Tensor
            and input.device.type == "cpu"
            and input.dtype == torch.float32
            and self.weight.numel() >= _ONEDNN_MIN_WEIGHTS
            and _onednn_reads(self.weight)
            and (self.bias is None or _onednn_reads(self.bias))
            and not torch.is_autocast_enabled("cpu")
            and not torch.compiler.is_compiling()
        ):
            return _ONEDNN_LINEAR(input, self.weight, self.bias, "none", [], "")
        return super().forward(input)


# ----------------------------------------------------------------------------------------------------------
# Attention
# ----------------------------------------------------------------------------------------------------------


def apply_attention_mask(scores: torch.Tensor, attention_mask: torch.Tensor | None, is_causal: bool) -> torch.Tensor:
    """Scores (B, H, T, S) with a mask in either format transformers prepares: eager's additive float mask is added;
    sdpa's boolean mask (True = attend) sets the masked scores to the dtype's minimum, and sdpa's `None`, which
    leaves a pure causal pattern to the kernel, is rebuilt as one for causal attention (queries are the last T of
    S positions)."""
    if attention_mask is None and is_causal and scores.shape[2] > 1:
        length, total = scores.shape[2], scores.shape[3]
        attention_mask = torch.ones(length, total, dtype=torch.bool, device=scores.device).tril(total - length)
    if attention_mask is None:
        return scores
    if attention_mask.dtype == torch.bool:
        return scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
    return scores + attention_mask


def relative_position_index(query_positions: torch.Tensor, key_positions: torch.Tensor,
                            max_distance: int) -> torch.Tensor:
    """Shaw et al.'s clip(j - i, k) + k for query positions i (B or 1, T) and key positions j (B or 1, S): the
    (B or 1, T, S) rows in [0, 2k] of a relative table; distances beyond k (or -k) share the last (or first) row."""
    distance = key_positions[:, None, :] - query_positions[:, :, None]  # (B|1, T, S)
    return distance.clamp(-max_distance, max_distance) + max_distance


def key_positions(query_positions: torch.Tensor, past_length: int | torch.Tensor = 0,
                  attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Positions (B or 1, past + T) of the keys of self-attention over `past_length` cached tokens and T new ones.

    A new token's key has its query's position (`query_positions`, from `position_ids` or the cache offset). A cached
    token lies as many positions before the first new token as there are real tokens from it to the end of the
    cache: counted in a (B, past + T) `attention_mask`, so padding takes no position (GPT's positions count real
    tokens), or consecutive without one (a 4D mask, a static cache's generate, the Transformer's decoder).
    """
    past = int(past_length)
    if past == 0:
        return query_positions
    if attention_mask is None or attention_mask.dim() != 2:
        real = torch.ones(1, past, dtype=torch.long, device=query_positions.device)
    else:
        real = attention_mask[:, :past].long()
    behind = real.flip(-1).cumsum(-1).flip(-1)  # (B|1, past): real cached tokens from each slot to the cache's end
    cached = query_positions[:, :1] - behind
    return torch.cat([cached, query_positions.expand(cached.shape[0], -1)], dim=-1)


def relative_attention_inputs(config, hidden_states: torch.Tensor, position_ids: torch.Tensor | None = None,
                              past_length: int | torch.Tensor = 0,
                              attention_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The keyword a model hands its blocks for relative self-attention, `relative_position_index` (computed once per
    forward for every layer), or nothing when `config` has absolute positions only. The (B, T, C) `hidden_states`
    are at `position_ids` (B or 1, T), by default past_length..past_length+T-1."""
    if config.relative_attention is None:
        return {}
    if position_ids is None:
        position_ids = torch.arange(hidden_states.shape[1], device=hidden_states.device)[None] + past_length  # (1, T)
    keys = key_positions(position_ids, past_length, attention_mask)
    return {"relative_position_index": relative_position_index(position_ids, keys, config.max_relative_position)}


def relative_key_scores(query: torch.Tensor, index: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """`q_i a^K_ij^T` for every query i and key j, (B, H, T, S): one (B, H, T, D) x (D, 2k+1) matmul against the
    table, then a gather by distance row `index` (B or 1, 1, T, S); never a (T, S, D) tensor of gathered vectors."""
    per_distance = torch.matmul(query, table.transpose(0, 1))  # (B, H, T, 2k+1)
    return torch.gather(per_distance, -1, index.expand(*query.shape[:3], index.shape[-1]))


def relative_value_term(probs: torch.Tensor, index: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """`sum_j alpha_ij a^V_ij`, (B, H, T, D): the probabilities (B, H, T, S) summed into their 2k+1 distance
    buckets (a scatter-add by `index`), then one (B, H, T, 2k+1) x (2k+1, D) matmul."""
    buckets = probs.new_zeros(*probs.shape[:3], table.shape[0])  # (B, H, T, 2k+1)
    buckets = buckets.scatter_add(-1, index.expand_as(probs), probs)
    return torch.matmul(buckets, table)


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
    """softmax(Q K^T * scaling + mask) V, returning the probabilities too (`output_attentions`).

    With `relative_position_index` (B or 1, T, S) and a module holding relative tables, Shaw et al. (2018) eqs. 4
    and 3: `e_ij = q_i (k_j + a^K_ij)^T * scaling` and `z_i = sum_j alpha_ij (v_j + a^V_ij)` (the value term only
    when the module has `relative_values`).
    """
    scores = torch.matmul(query, key.transpose(2, 3))  # (B, H, T, S)
    index = relative_position_index[:, None] if relative_position_index is not None else None  # (B|1, 1, T, S)
    if index is not None:
        scores = scores + relative_key_scores(query, index, module.relative_keys.weight)
    scores = apply_attention_mask(scores * scaling, attention_mask, module.is_causal)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    probs = nn.functional.dropout(probs, p=dropout, training=module.training)
    output = torch.matmul(probs, value)  # (B, H, T, D)
    if index is not None and module.relative_values is not None:
        output = output + relative_value_term(probs, index, module.relative_values.weight)
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
    bias = relative_key_scores(query, relative_position_index[:, None], module.relative_keys.weight) * scaling
    bias = apply_attention_mask(bias, attention_mask, module.is_causal)  # (B, H, T, S)
    return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, bias, scaling=scaling, dropout=dropout, **kwargs)


class LineageAttention(nn.Module):
    """Multi-head attention: self (bidirectional or causal) or cross, with an optional KV cache.

    Cross attention takes its keys and values from `key_value_states` (the encoder output); under an
    `EncoderDecoderCache` they are projected once per generation and reused at every step.

    With `config.position_embedding_type` `"relative"` or `"relative-keys"`, self-attention (never cross attention,
    as in Shaw et al. 2018) holds the layer's relative tables, shared by its heads: `relative_keys` (a^K) and, for
    `"relative"`, `relative_values` (a^V), 2k + 1 vectors of head size each (k = `max_relative_position`), indexed
    by the `relative_position_index` (B or 1, T, S) its model computes from positions (consecutive positions ending
    at the last key when none is given). The kernel that runs:
    - absolute positions: `config._attn_implementation` (sdpa, eager, flash, ...), as always;
    - `"relative-keys"`: SDPA with the relative term as an additive bias (`sdpa_relative_keys_forward`) for every
      implementation but eager (flash and flex kernels take no bias); `eager_attention_forward` under eager or
      when the attention weights are requested;
    - `"relative"`: `eager_attention_forward`, whatever the implementation: the value term needs the
      probabilities, which no fused kernel returns;
    - with `packed_sequences` (sequences laid end to end, absolute positions, sdpa: see `PackedSequences`):
      `varlen_sdpa_forward`, attention within each sequence and no mask.
    """

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
                   past_key_values: Cache | None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.is_cross_attention:
            cache = past_key_values.cross_attention_cache if isinstance(past_key_values, EncoderDecoderCache) else None
            if cache is not None and past_key_values.is_updated.get(self.layer_idx):
                layer = cache.layers[self.layer_idx]
                return layer.keys, layer.values
            key, value = self._heads(self.k_proj(key_value_states)), self._heads(self.v_proj(key_value_states))
            if cache is not None:
                key, value = cache.update(key, value, self.layer_idx)
                past_key_values.is_updated[self.layer_idx] = True
            return key, value
        key, value = self._heads(self.k_proj(hidden_states)), self._heads(self.v_proj(hidden_states))
        if isinstance(past_key_values, EncoderDecoderCache):
            past_key_values = past_key_values.self_attention_cache
        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)  # (B, H, S, D)
        return key, value

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        key_value_states: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        output_attentions: bool = False,
        relative_position_index: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, length, _ = hidden_states.shape
        query = self._heads(self.q_proj(hidden_states))  # (B, H, T, D)
        key, value = self._key_value(hidden_states, key_value_states, past_key_values)
        if self.relative_keys is not None:
            kwargs["relative_position_index"] = self._relative_index(relative_position_index, length, key.shape[2])
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

    def _relative_index(self, index: torch.Tensor | None, length: int, total: int) -> torch.Tensor:
        """The model's (B or 1, T, S) distance rows, else those of consecutive positions; padded with row 0 over the
        empty (masked) slots of a static cache, whose keys are longer than the tokens seen so far."""
        if index is None:
            positions = torch.arange(total, device=self.relative_keys.weight.device)[None]  # (1, S)
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
    return nn.Dropout(config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob)


def labelled_positions(hidden_states: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`sparse_prediction`: the (N, C) states and (N,) labels of the N positions whose label is not -100, in
    row-major order, so an output head and its softmax skip the positions the loss ignores."""
    labelled = labels != -100  # (B, T)
    return hidden_states[labelled], labels[labelled]


def shift_tokens_right(
    labels: torch.Tensor, pad_token_id: int | None, decoder_start_token_id: int | None
) -> torch.Tensor:
    """Teacher forcing: decoder inputs are the labels delayed by one step, starting from `decoder_start_token_id`;
    ignored label positions (-100) become padding."""
    if decoder_start_token_id is None or pad_token_id is None:
        raise ValueError(
            "`decoder_start_token_id` and `pad_token_id` must be set in the config (ids in [0, vocab_size)) to derive "
            "`decoder_input_ids` from `labels`."
        )
    shifted = labels.new_full(labels.shape, decoder_start_token_id)
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == -100, pad_token_id)


def check_decoder_inputs(decoder_input_ids: torch.Tensor | None, decoder_inputs_embeds: torch.Tensor | None,
                         vocab_size: int, source_shape: torch.Size, attention_mask: torch.Tensor | None) -> torch.Size:
    """A seq2seq decoder's inputs against its source: exactly one of ids (in the vocabulary) or embeddings, one target
    per source, and the source mask (B, S), also when the encoder outputs are given. Returns the target's (B, T)."""
    shape = check_ids_or_embeds(decoder_input_ids, decoder_inputs_embeds, vocab_size, "decoder_input_ids",
                                "decoder_inputs_embeds")
    if source_shape[0] != shape[0]:
        raise ValueError(
            f"`encoder_outputs` have batch size {source_shape[0]} but `decoder_input_ids` have {shape[0]}; "
            "they must match (one source per target sequence)."
        )
    check_mask_shape(attention_mask, source_shape)
    return shape


def teacher_forcing_inputs(
    labels: torch.Tensor | None, decoder_input_ids: torch.Tensor | None, decoder_inputs_embeds: torch.Tensor | None,
    config,
) -> torch.Tensor | None:
    """The decoder input ids of a seq2seq forward: the given ones, else with `labels` the labels shifted right
    (`shift_tokens_right`); checks that `labels` are (B, T) like the decoder inputs, and that the decoder has an input."""
    if labels is None:
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError(
                "Give `decoder_input_ids` (or `decoder_inputs_embeds`), or `labels` to derive them by teacher forcing."
            )
        return decoder_input_ids
    if decoder_input_ids is None and decoder_inputs_embeds is None:
        decoder_input_ids = shift_tokens_right(labels, config.pad_token_id, config.decoder_start_token_id)
    target = decoder_input_ids if decoder_input_ids is not None else decoder_inputs_embeds
    check_labels_shape(labels, target.shape[:2])  # (B, T), the logits' (B, T, V) without V
    return decoder_input_ids


def seq2seq_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    label_smoothing: float,
    num_items_in_batch: torch.Tensor | int | None = None,
) -> torch.Tensor:
    """Cross-entropy over target tokens (label-smoothed when `label_smoothing` > 0), ignoring -100; a mean over
    tokens, or a sum divided by `num_items_in_batch` (the token count of all accumulated micro-batches) when the
    Trainer gives it."""
    loss = nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1).to(logits.device), ignore_index=-100,
        label_smoothing=label_smoothing, reduction="mean" if num_items_in_batch is None else "sum",
    )
    if num_items_in_batch is not None:
        loss = loss / torch.as_tensor(num_items_in_batch, device=loss.device)
    return loss


# ----------------------------------------------------------------------------------------------------------
# Output layer: logits over the real vocabulary, and the loss without the (N, V) logits
# ----------------------------------------------------------------------------------------------------------


def vocab_logits(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Logits (..., V) of the real vocabulary: an output layer padded by `pad_vocab_to_multiple_of` has extra columns,
    dropped (a contiguous copy of the real ones, as losses and users `view` logits) so that softmax, losses,
    `generate()` and pipelines never see a padded id, and the width matches the tokenizer and the transformers
    reference models. Masking them to -inf instead would keep a width no tokenizer or reference model has."""
    return logits[..., :vocab_size].contiguous() if logits.shape[-1] != vocab_size else logits


def skips_logits(model: nn.Module, head: nn.Module, labels: torch.Tensor | None, return_logits: bool | None) -> bool:
    """Whether a head computes its loss with `lm_head_loss` and returns `logits=None`.

    `return_logits` None (the default) follows the model's mode, as Liger's transformers integration does: a training
    forward with `labels` skips the logits (Trainer and the engine read only the loss there); evaluation, Trainer's
    `predict`, pipelines and `generate()` run in eval mode and get them. True always returns logits (and the loss
    from them, the dense path); False skips them in eval mode too and needs `labels`. The output layer's weight is
    read directly, so a head wrapped by another module (a PEFT adapter, a quantised layer) takes the dense path;
    so must a model whose weights are gathered per module call (DeepSpeed ZeRO-3): pass `return_logits=True`.
    """
    if return_logits is False and labels is None:
        raise ValueError("`return_logits=False` skips the logits to compute the loss without them: it needs `labels`.")
    if labels is None or return_logits or (return_logits is None and not model.training):
        return False
    return type(head) in (nn.Linear, LineageLinear)


LM_LOSS_CHUNK_ELEMENTS = 2**25  # float32 logits per chunk of `lm_head_loss` (128 MiB)


def _liger_installed() -> bool:
    return importlib.util.find_spec("liger_kernel") is not None


def lm_loss_backend(device: torch.device) -> str:
    """`"liger"` (Liger Kernel's fused linear cross-entropy, Triton) when `liger_kernel` is installed and the hidden
    states are on CUDA, else `"chunked"` (`ChunkedLinearCrossEntropy`, plain PyTorch, any device)."""
    return "liger" if device.type == "cuda" and _liger_installed() else "chunked"


def _smoothed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int,
                            label_smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row losses (n,) and their gradient w.r.t. `logits` (n, V'), which it overwrites. Columns past `vocab_size`
    (padding) are -inf, so they add nothing to the softmax. As `F.cross_entropy`: (1 - eps) * nll + eps * the mean
    over the V real classes of -log p, and 0 (with zero gradient) for rows labelled -100."""
    kept = labels != -100  # (n,)
    target = labels.clamp(min=0)[:, None]  # (n, 1); ignored rows point at class 0, then are zeroed
    lse = torch.logsumexp(logits, dim=-1)  # (n,)
    losses = (1.0 - label_smoothing) * (lse - logits.gather(1, target)[:, 0])
    if label_smoothing:
        losses = losses + label_smoothing * (lse - logits[:, :vocab_size].mean(-1))
    grad = logits.sub_(lse[:, None]).exp_()  # softmax, in place: (n, V')
    grad.scatter_add_(1, target, grad.new_full(target.shape, label_smoothing - 1.0))
    if label_smoothing:
        grad[:, :vocab_size] -= label_smoothing / vocab_size
    return losses * kept, grad.mul_(kept[:, None])


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of `hidden @ weight.T + bias` against `labels`, chunk by chunk over the N tokens.

    Each chunk's float32 (n, V') logits are made, turned into the chunk's losses and the gradient of the logits, and
    freed; the gradients w.r.t. `hidden` (N, C), `weight` (V', C, accumulated in float32) and `bias` are computed in
    the forward pass (as Liger does), so neither pass ever holds (N, V') logits and the backward only scales them by
    the incoming gradient. Matmuls run in autocast's dtype when autocast is on (as the dense head's would), else in
    the dtype of `hidden`; logits in float32, as transformers' losses upcast them. Gradients are computed only for
    inputs that require them and only when autograd records the call.
    """

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, labels: torch.Tensor,
                vocab_size: int, label_smoothing: float, chunk_size: int,
                grads: tuple[bool, bool, bool]) -> torch.Tensor:
        """`grads`: which of `hidden`, `weight`, `bias` need a gradient (grad mode is off in here: the caller says)."""
        device = hidden.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
        with torch.autocast(device, enabled=False):
            w = weight.to(dtype)
            b = bias.to(dtype) if bias is not None else None
            grad_hidden = torch.empty_like(hidden) if grads[0] else None
            grad_weight = torch.zeros_like(weight, dtype=torch.float32) if grads[1] else None
            grad_bias = torch.zeros_like(bias, dtype=torch.float32) if grads[2] else None
            total = hidden.new_zeros((), dtype=torch.float32)
            for start in range(0, hidden.shape[0], chunk_size):
                rows = slice(start, start + chunk_size)
                h = hidden[rows].to(dtype)  # (n, C)
                logits = nn.functional.linear(h, w, b).float()  # (n, V')
                logits[:, vocab_size:] = float("-inf")
                losses, grad = _smoothed_cross_entropy(logits, labels[rows], vocab_size, label_smoothing)
                total += losses.sum()
                if grad_hidden is not None:
                    grad_hidden[rows] = grad.to(dtype) @ w
                if grad_weight is not None:
                    grad_weight.addmm_(grad.T, h.float())
                if grad_bias is not None:
                    grad_bias += grad.sum(0)
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.dtypes = (hidden.dtype, weight.dtype, bias.dtype if bias is not None else None)
        return total

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output: torch.Tensor):
        scaled = [None if grad is None else (grad * grad_output).to(dtype)
                  for grad, dtype in zip(ctx.saved_tensors, ctx.dtypes)]
        return (*scaled, None, None, None, None, None)


def lm_head_loss(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    labels: torch.Tensor,
    vocab_size: int,
    label_smoothing: float = 0.0,
    num_items_in_batch: torch.Tensor | int | None = None,
    shift: bool = False,
    chunk_size: int | None = None,
    dense: bool = False,
) -> torch.Tensor:
    """The cross-entropy of the output layer `hidden_states @ weight.T + bias` against `labels`, equal to the loss of
    the materialised float32 logits (transformers' `ForCausalLMLoss` / `ForMaskedLMLoss`, `F.cross_entropy` with
    `label_smoothing`) without ever holding the (N, V) logits of all N tokens.

    Args:
        hidden_states: (..., C) inputs of the output layer; `labels` (...) their targets, -100 left out of the loss.
        weight, bias: the output layer's (V', C) weight and (V',) bias (or None); V' >= `vocab_size` (rows past it are
            `pad_vocab_to_multiple_of` padding, outside the softmax).
        shift: causal LM: position t predicts `labels[..., t + 1]` (labels are the input ids, as in transformers).
        num_items_in_batch: Trainer's gradient-accumulation contract: the loss is the sum over tokens divided by this
            count (of all accumulated micro-batches); None gives the mean over this batch's labelled tokens (NaN with
            zero gradients when there are none, as `F.cross_entropy`).
        chunk_size: tokens per chunk; by default as many as fit `LM_LOSS_CHUNK_ELEMENTS` float32 logits (128 MiB:
            667 tokens at 50304 columns). Each chunk reads the weight and updates its gradient once, which on a CPU
            made chunks of 32 tokens (Liger's rule, chunk logits the size of the hidden states) 2.2x slower than the
            dense head at 2048 x 768 -> 50257; from about 500 tokens a chunk matched it.
        dense: the (N, V) logits at once, for a token count only known at run time under `torch.compile` (the labelled
            positions of `sparse_prediction`), on which a chunk loop would break the graph.

    Runs Liger Kernel's fused kernel where `lm_loss_backend` says so (it has no padded columns to skip, so it gets the
    first `vocab_size` rows of the weight), else `ChunkedLinearCrossEntropy`.
    """
    check_label_ids(labels, vocab_size)  # a no-op for the labels the calling forward has just checked
    if shift:
        labels = nn.functional.pad(labels, (0, 1), value=-100)[..., 1:]  # (..., T): the next token
    hidden = hidden_states.reshape(-1, hidden_states.shape[-1])  # (N, C)
    labels = labels.reshape(-1).to(hidden.device)  # (N,)
    if chunk_size is None:
        chunk_size = max(1, LM_LOSS_CHUNK_ELEMENTS // weight.shape[0])
    elif isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"`chunk_size` must be a positive integer (tokens per chunk), got {chunk_size!r}.")
    if dense:
        logits = vocab_logits(nn.functional.linear(hidden, weight, bias), vocab_size).float()  # (N, V)
        total = nn.functional.cross_entropy(logits, labels, ignore_index=-100, label_smoothing=label_smoothing,
                                            reduction="sum")
    elif lm_loss_backend(hidden.device) == "liger":
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        loss_fn = LigerFusedLinearCrossEntropyLoss(ignore_index=-100, label_smoothing=label_smoothing, reduction="sum")
        total = loss_fn(weight[:vocab_size], hidden, labels, bias[:vocab_size] if bias is not None else None)
    else:
        grads = tuple(torch.is_grad_enabled() and x is not None and x.requires_grad for x in (hidden, weight, bias))
        total = ChunkedLinearCrossEntropy.apply(hidden, weight, bias, labels, vocab_size, label_smoothing, chunk_size,
                                                grads)
    if num_items_in_batch is not None:
        return total / torch.as_tensor(num_items_in_batch, device=total.device)
    count = (labels != -100).sum()
    return torch.where(count > 0, total / count.clamp(min=1), torch.nan)  # no token: NaN with zero gradients, as dense


class ResidualSublayer(nn.Module):
    """Residual connection around `sublayer` with dropout on its output and LayerNorm placed by config.

    post-norm (the papers): `LayerNorm(x + Dropout(Sublayer(x)))`
    pre-norm (GPT-2):       `x + Dropout(Sublayer(LayerNorm(x)))`
    A sublayer that returns a tuple (attention: output, weights) has its extra values passed through.
    """

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
    """Self-attention, optional cross attention, feed-forward; each a `ResidualSublayer`.

    BERT and encoders: bidirectional, no cross attention. GPT: causal. Transformer decoder: causal with cross
    attention. Returns `(hidden_states, self_attention_weights, cross_attention_weights)`, the outputs a model's
    `_can_record_outputs` records; weights are `None` unless the `eager` implementation computed them.
    """

    def __init__(self, config, layer_idx: int, is_causal: bool = False, has_cross_attention: bool = False):
        super().__init__()
        self.self_attn = ResidualSublayer(LineageAttention(config, layer_idx, is_causal=is_causal), config)
        self.cross_attn = (
            ResidualSublayer(LineageAttention(config, layer_idx, is_cross_attention=True), config)
            if has_cross_attention else None
        )
        self.feed_forward = ResidualSublayer(LineageFeedForward(config), config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        hidden_states, self_weights = self.self_attn(
            hidden_states, attention_mask, past_key_values=past_key_values, **kwargs
        )
        cross_weights = None
        if self.cross_attn is not None and encoder_hidden_states is not None:  # none given: a decoder-only pass
            hidden_states, cross_weights = self.cross_attn(
                hidden_states, encoder_attention_mask, encoder_hidden_states, past_key_values=past_key_values, **kwargs
            )
        return self.feed_forward(hidden_states), self_weights, cross_weights


# ----------------------------------------------------------------------------------------------------------
# Positions
# ----------------------------------------------------------------------------------------------------------


def sinusoidal_table(num_positions: int, dim: int, interleaved: bool = True) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (section 3.5), shape (P, C).

    `interleaved=True` puts sin on even and cos on odd dimensions as the paper writes it; `False` puts all sin
    features in the first half and all cos features in the second (Marian's layout). Computed in float64 and
    returned in the default dtype, which `from_pretrained(dtype=...)` sets while it builds the model.
    """
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


# ----------------------------------------------------------------------------------------------------------
# Pretrained base shared by every family
# ----------------------------------------------------------------------------------------------------------


class LineagePreTrainedModel(PreTrainedModel):
    """Weight initialisation, attention-backend flags, output capture and complete `auto_map` saving for all
    families.

    A family's base class sets `config_class`, `base_model_prefix` and `auto_classes` (transformers Auto class
    name -> Lineage class name); `save_pretrained` then writes an `auto_map` entry for every head, so each
    head loads from the saved folder with `trust_remote_code=True`. A base model's `forward` decorated with
    transformers' `@capture_outputs` returns, on `output_hidden_states` / `output_attentions`, what hooks on
    every `LineageBlock` record: its input (the embedding output, for the first block) and output hidden states,
    and its self-attention weights; the last hidden state is replaced by the model's `last_hidden_state` (after
    a final LayerNorm).
    """

    auto_classes: dict[str, str] = {}
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_attention_backend = True
    _can_record_outputs = {
        "hidden_states": OutputRecorder(LineageBlock, index=0),
        "attentions": OutputRecorder(LineageBlock, index=1),
    }

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, SinusoidalPositionalEmbedding):
            init.copy_(module.weight, module.reset_table())

    def resize_token_embeddings(self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None,
                                mean_resizing: bool = True) -> nn.Embedding:
        """transformers' resize, keeping `pad_vocab_to_multiple_of` (`LineageConfig`): the embedding and the output
        layer get `new_num_tokens` rows rounded up to `pad_to_multiple_of` (default: the config's multiple, which an
        explicit value replaces), and `config.vocab_size` becomes `new_num_tokens`, the real vocabulary, where
        transformers would count the padded rows as tokens (and could then generate them)."""
        if not hasattr(self.config, "pad_vocab_to_multiple_of"):  # a family without vocabulary padding (the RNN)
            return super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        check_vocab_multiple(pad_to_multiple_of, "pad_to_multiple_of")
        vocab_size = new_num_tokens if new_num_tokens is not None else self.config.vocab_size
        multiple = pad_to_multiple_of if pad_to_multiple_of is not None else self.config.pad_vocab_to_multiple_of
        embeddings = super().resize_token_embeddings(vocab_size, multiple, mean_resizing)
        self.config.vocab_size = self.vocab_size = vocab_size
        self.config.pad_vocab_to_multiple_of = multiple
        return embeddings

    @classmethod
    def auto_class_name(cls) -> str:
        """The transformers Auto class this class is registered under in `auto_classes` (`"AutoModel"` if none)."""
        return next((auto for auto, name in cls.auto_classes.items() if name == cls.__name__), "AutoModel")

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Save weights, config and this family's code, with an `auto_map` entry for every head, and the Lineage
        pipelines this head serves (`custom_pipelines`; their file is copied as an import of this one)."""
        from .pipelines_lineage import custom_pipelines_for

        config_class, model_class = type(self.config), type(self)
        config_class.register_for_auto_class("AutoConfig")
        model_class.register_for_auto_class(model_class.auto_class_name())
        config_module = config_class.__module__.rsplit(".", 1)[-1]
        model_module = model_class.__module__.rsplit(".", 1)[-1]
        self.config.auto_map = {
            "AutoConfig": f"{config_module}.{config_class.__name__}",
            **{auto: f"{model_module}.{name}" for auto, name in self.auto_classes.items()},
        }
        pipelines = custom_pipelines_for(model_class.auto_class_name())
        if pipelines:
            self.config.custom_pipelines = pipelines
        return super().save_pretrained(save_directory, *args, **kwargs)


__all__ = [
    "ACTIVATION_MODULES",
    "ChunkedLinearCrossEntropy",
    "LearnedPositionalEmbedding",
    "LineageAttention",
    "LineageBlock",
    "LineageFeedForward",
    "LineageLinear",
    "LineagePreTrainedModel",
    "PackedSequences",
    "ResidualSublayer",
    "SinusoidalPositionalEmbedding",
    "apply_attention_mask",
    "check_cached_mask",
    "check_decoder_inputs",
    "check_ids_or_embeds",
    "check_label_ids",
    "check_labels_shape",
    "check_mask_shape",
    "check_sequence_length",
    "check_token_ids",
    "classifier_dropout",
    "document_masking_error",
    "eager_attention_forward",
    "key_positions",
    "labelled_positions",
    "lm_head_loss",
    "lm_loss_backend",
    "relative_attention_inputs",
    "relative_key_scores",
    "relative_position_index",
    "relative_value_term",
    "sdpa_relative_keys_forward",
    "seq2seq_loss",
    "shift_tokens_right",
    "sinusoidal_table",
    "skips_logits",
    "teacher_forcing_inputs",
    "varlen_attention_inputs",
    "vocab_logits",
]
