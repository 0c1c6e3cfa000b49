"""Sequences laid end to end: packed documents (GPT) and unpadded rows (BERT), and the attention that keeps each
sequence to itself (flash-attn's varlen kernel, or SDPA over length buckets). `LineageAttention`
(`layers.py`) runs `varlen_sdpa_forward` when a model hands its blocks `packed_sequences`.

Dimension legend as in `layers.py`; L is the length of a flattened stream of tokens.
"""

import torch
from torch import nn


# flash-attn, whose varlen kernel (run by transformers from the `cu_seq_lens_*` keywords) keeps attention inside each
# sequence of a flattened stream from its boundaries alone, as `varlen_sdpa_forward` does under sdpa.
FLASH_IMPLEMENTATIONS = ("flash_attention_2", "flash_attention_3", "flash_attention_4")
# Implementations whose masks (`masking_utils`) split a row at restarting `position_ids`.
DOCUMENT_MASKING_IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention", *FLASH_IMPLEMENTATIONS)


def document_masking_error(config) -> str | None:
    """Why attention under `config` cannot be kept within each document of a packed row, or None when it can.
    Relative positions add a (T, S) bias that only the eager and sdpa paths mask; flash and flex take no bias."""
    implementation = config._attn_implementation
    if implementation not in DOCUMENT_MASKING_IMPLEMENTATIONS:
        return (f"`attn_implementation={implementation!r}` does not split packed rows into documents; use one of "
                f"{', '.join(DOCUMENT_MASKING_IMPLEMENTATIONS)}")
    if config.relative_attention is not None and implementation not in ("eager", "sdpa"):
        return (f"relative positions (`position_embedding_type={config.position_embedding_type!r}`) under "
                f"`attn_implementation={implementation!r}` cannot keep attention within documents (that kernel "
                "takes no position bias); use `attn_implementation` 'sdpa' or 'eager'")
    return None


class PackedSequences:
    """N sequences laid end to end in a flattened stream of tokens (a packed row's documents, or the real tokens of
    a padded batch), given by their start offsets `cu_seqlens` (N + 1,), and the attention that keeps each sequence
    to itself.

    `attend` runs SDPA on the sequences grouped by length into power-of-two buckets (lengths in (2^(b-1), 2^b]),
    each bucket right-padded to its longest sequence: at most log2(longest) + 1 kernel calls, padded tokens fewer
    than real ones, so memory is linear in the stream length and no (T, T) mask is built. Causal attention needs
    no mask (a real query never reaches the right padding); bidirectional attention masks the padded keys with a
    (n, 1, 1, width) mask. The index tensors are built once per forward and shared by every layer.
    """

    def __init__(self, cu_seqlens: torch.Tensor):
        device = cu_seqlens.device
        self.cu_seqlens = cu_seqlens.to(torch.int32)
        starts, lengths = cu_seqlens[:-1].tolist(), cu_seqlens.diff().tolist()
        self.max_length = max(lengths, default=0)
        buckets: dict[int, list[int]] = {}
        for sequence, length in enumerate(lengths):
            if length == 0:  # a row with no real token: nothing to attend
                continue
            buckets.setdefault((length - 1).bit_length(), []).append(sequence)
        self.buckets = []  # (index (n, width) into the stream, valid (n, width)) per bucket
        for members in buckets.values():
            width = max(lengths[i] for i in members)
            offsets = torch.arange(width, device=device)
            valid = offsets < torch.tensor([lengths[i] for i in members], device=device)[:, None]  # (n, width)
            index = torch.tensor([starts[i] for i in members], device=device)[:, None] + offsets
            self.buckets.append((index.masked_fill(~valid, 0), valid))
        order = torch.cat([index[valid] for index, valid in self.buckets])  # stream index of each bucketed token
        self.inverse = torch.empty_like(order)
        self.inverse[order] = torch.arange(order.numel(), device=device)

    @classmethod
    def from_lengths(cls, lengths: torch.Tensor) -> "PackedSequences":
        """Consecutive sequences of the given (N,) lengths."""
        return cls(nn.functional.pad(lengths.cumsum(0), (1, 0)))

    @classmethod
    def from_position_ids(cls, position_ids: torch.Tensor) -> "PackedSequences | None":
        """The documents of (B, T) rows whose `position_ids` restart (a position not one more than the previous
        one starts a document, as transformers' `find_packed_sequence_indices` reads them), over the flattened
        B * T tokens; None when no row restarts."""
        starts = nn.functional.pad(position_ids.diff(dim=-1) != 1, (1, 0), value=True)  # (B, T)
        if int(starts.sum()) == position_ids.shape[0]:
            return None
        boundaries = starts.flatten().nonzero().squeeze(1)
        return cls(nn.functional.pad(boundaries, (0, 1), value=position_ids.numel()))

    def attention_inputs(self, config) -> dict:
        """The keywords that make the blocks' attention keep to these sequences: transformers' varlen keywords for
        flash-attn, else this object for `varlen_sdpa_forward`."""
        if config._attn_implementation in FLASH_IMPLEMENTATIONS:
            return {"cu_seq_lens_q": self.cu_seqlens, "cu_seq_lens_k": self.cu_seqlens,
                    "max_length_q": self.max_length, "max_length_k": self.max_length}
        return {"packed_sequences": self}

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, is_causal: bool, scaling: float,
               dropout: float) -> torch.Tensor:
        """Attention within each sequence of the flattened (L, H, D) stream; returns (L, H, D)."""
        outputs = []
        for index, valid in self.buckets:
            q, k, v = (x[index].transpose(1, 2) for x in (query, key, value))  # (n, H, width, D)
            mask = None if is_causal else valid[:, None, None, :]  # (n, 1, 1, width): padded keys masked
            out = nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal, scale=scaling
            )
            outputs.append(out.transpose(1, 2)[valid])  # (real tokens of the bucket, H, D)
        return torch.cat(outputs)[self.inverse]


def varlen_attention_inputs(config, sequences: PackedSequences | None, output_attentions: bool) -> dict | None:
    """The blocks' keywords for attention within `sequences` without a mask, or None when no such kernel serves
    `config` (eager, flex, relative positions, or attention weights requested: these need a mask)."""
    if sequences is None or output_attentions or config.relative_attention is not None:
        return None
    if config._attn_implementation not in ("sdpa", *FLASH_IMPLEMENTATIONS):
        return None
    return sequences.attention_inputs(config)


def varlen_sdpa_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    packed_sequences: PackedSequences | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """SDPA within each of the `packed_sequences` laid end to end along the B * T tokens (see `PackedSequences`);
    the model passes no `attention_mask` with them: the sequence boundaries replace it."""
    batch, heads, length, dim = query.shape
    flat = [x.transpose(1, 2).reshape(batch * length, heads, dim) for x in (query, key, value)]  # (B*T, H, D)
    output = packed_sequences.attend(*flat, is_causal=module.is_causal, scaling=scaling, dropout=dropout)
    return output.view(batch, length, heads, dim), None


__all__ = ["DOCUMENT_MASKING_IMPLEMENTATIONS", "FLASH_IMPLEMENTATIONS", "PackedSequences", "document_masking_error",
           "varlen_attention_inputs", "varlen_sdpa_forward"]
