"""Sequences laid end to end, packed documents (GPT) or unpadded rows (BERT), and the attention that keeps each to
itself: flash-attn's varlen kernel, or SDPA over length buckets (`varlen_sdpa_forward`). The collators build them
on the CPU (`PackedSequences.for_batch`) so that a forward reads nothing back (docs/performance.md). Dimension
legend as in `layers.py`; L is the length of a flattened stream of tokens.
"""

import copy
import itertools
from collections.abc import Callable, Sequence

import torch
from torch import nn

# flash-attn, whose varlen kernel (run by transformers from the `cu_seq_lens_*` keywords) keeps attention inside each
# sequence of a flattened stream from its boundaries alone, as `varlen_sdpa_forward` does under sdpa.
FLASH_IMPLEMENTATIONS = ("flash_attention_2", "flash_attention_3", "flash_attention_4")
# Implementations whose masks (`masking_utils`) split a row at restarting `position_ids`.
DOCUMENT_MASKING_IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention", *FLASH_IMPLEMENTATIONS)
# transformers' boundaries of packed sequences (`FlashAttentionKwargs`), as `DataCollatorWithFlattening` emits them
# with `return_flash_attn_kwargs=True`: int32 start offsets plus the end, and the longest length as a Python int.
VARLEN_KEYWORDS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")


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
    """N sequences laid end to end in a flattened stream of L tokens, given by their starts `cu_seqlens` (N + 1,) and
    longest length `max_length`; for padded rows `tokens` (L,) are their positions among the `grid` = B * T tokens.

    `attend` runs SDPA over power-of-two length buckets, each right-padded to its longest: at most log2(longest) + 1
    calls, memory linear in L, no (T, T) mask. The bucket index is built once, at once when the lengths are known on the
    host (`from_lengths`), else on the first `attend`."""

    def __init__(self, cu_seqlens: torch.Tensor, max_length: int, tokens: torch.Tensor | None = None,
                 grid: int | None = None, lengths: list[int] | None = None):
        self.cu_seqlens = cu_seqlens.to(torch.int32)
        self.max_length = max_length
        self.tokens = tokens
        self.grid = grid
        self._lengths = lengths  # on the host, when known
        self._index = None  # (buckets, inverse): built once, see `attend`
        if lengths is not None:
            self._index = self._bucket_index(lengths, self.cu_seqlens.device)

    @classmethod
    def from_lengths(cls, lengths: torch.Tensor | Sequence[int], tokens: torch.Tensor | None = None,
                     grid: int | None = None, device: torch.device | str | None = None) -> "PackedSequences":
        """Consecutive sequences of the given (N,) lengths (a tensor's are read back), with their index built at
        once on `device` (that of `lengths`, else the CPU)."""
        if isinstance(lengths, torch.Tensor):
            device, lengths = device or lengths.device, lengths.tolist()
        lengths = [int(n) for n in lengths]
        cu_seqlens = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)
        return cls(cu_seqlens, max(lengths, default=0), tokens, grid if grid is not None else sum(lengths), lengths)

    @classmethod
    def from_position_ids(cls, position_ids: torch.Tensor) -> "PackedSequences | None":
        """The documents of (B, T) rows whose `position_ids` restart, over the flattened B * T tokens; None when no
        row restarts. Reads the positions back (see `document_lengths`)."""
        lengths = document_lengths(position_ids)
        if len(lengths) == position_ids.shape[0]:
            return None
        return cls.from_lengths(lengths, grid=position_ids.numel(), device=position_ids.device)

    @classmethod
    def from_padding_mask(cls, attention_mask: torch.Tensor) -> "PackedSequences":
        """The real tokens of each row of a (B, T) padding mask (1 real, 0 padding), laid end to end in row order;
        reads the mask back."""
        tokens = attention_mask.flatten().nonzero().squeeze(1)  # (L,) positions of the real tokens among B * T
        return cls.from_lengths(attention_mask.sum(-1).tolist(), tokens, attention_mask.numel(),
                                attention_mask.device)

    @classmethod
    def for_batch(cls, attention_mask: torch.Tensor | None = None,
                  position_ids: torch.Tensor | None = None) -> "PackedSequences | None":
        """What a collate knows on the CPU of its (B, T) rows: their real tokens (an `attention_mask`), else their
        documents (`position_ids`; N == B: no row restarts), else None."""
        if attention_mask is not None:
            return cls.from_padding_mask(attention_mask)
        if position_ids is not None:
            return cls.from_lengths(document_lengths(position_ids), grid=position_ids.numel(),
                                    device=position_ids.device)
        return None

    @property
    def count(self) -> int:
        """N, the number of sequences (known on the host)."""
        return self.cu_seqlens.shape[0] - 1

    @property
    def padding(self) -> bool:
        """Whether the rows hold any padding: fewer real tokens than B * T (known on the host)."""
        return self.tokens is not None and self.tokens.shape[0] < self.grid

    @property
    def lengths(self) -> list[int]:
        """The N lengths, on the host (read back once if the boundaries came as a device tensor)."""
        self._built_index()
        return self._lengths

    @property
    def buckets(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(index (n, width) into the stream, valid (n, width)) per length bucket."""
        return self._built_index()[0]

    @property
    def inverse(self) -> torch.Tensor:
        """(L,) where each token of the stream lies among the bucketed real tokens."""
        return self._built_index()[1]

    def _built_index(self) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
        if self._index is None:  # boundaries handed over on the device: their lengths are read back once
            self._lengths = self.cu_seqlens.diff().tolist()
            self._index = self._bucket_index(self._lengths, self.cu_seqlens.device)
        return self._index

    @staticmethod
    def _bucket_index(lengths: list[int], device: torch.device) -> tuple[list, torch.Tensor]:
        starts = [0, *itertools.accumulate(lengths)][:-1]
        groups: dict[int, list[int]] = {}
        for sequence, length in enumerate(lengths):
            if length == 0:  # a row with no real token: nothing to attend
                continue
            groups.setdefault((length - 1).bit_length(), []).append(sequence)
        buckets = []
        for members in groups.values():
            width = max(lengths[i] for i in members)
            offsets = torch.arange(width, device=device)
            valid = offsets < torch.tensor([lengths[i] for i in members], device=device)[:, None]  # (n, width)
            index = torch.tensor([starts[i] for i in members], device=device)[:, None] + offsets
            buckets.append((index.masked_fill(~valid, 0), valid))
        order = torch.cat([index[valid] for index, valid in buckets]) if buckets else torch.zeros(
            0, dtype=torch.long, device=device)  # stream index of each bucketed token
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel(), device=device)
        return buckets, inverse

    def _map(self, apply: Callable[[torch.Tensor], torch.Tensor]) -> "PackedSequences":
        """A copy with `apply` applied to every tensor (the host values stay as they are)."""
        moved = copy.copy(self)
        moved.cu_seqlens = apply(self.cu_seqlens)
        moved.tokens = apply(self.tokens) if self.tokens is not None else None
        if self._index is not None:
            buckets, inverse = self._index
            moved._index = ([(apply(index), apply(valid)) for index, valid in buckets], apply(inverse))
        return moved

    def to(self, device: torch.device | str | int, non_blocking: bool = False) -> "PackedSequences":
        """The same sequences on `device` (Accelerate's `send_to_device` moves a batch's objects this way)."""
        if self.cu_seqlens.device == torch.device(device):
            return self
        return self._map(lambda tensor: tensor.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> "PackedSequences":
        """The same sequences in page-locked memory (a `DataLoader` with `pin_memory=True` calls this)."""
        return self._map(torch.Tensor.pin_memory)

    def check_batch(self, batch: int, length: int, name: str = "input_ids") -> None:
        """Refuse sequences built for another batch than the (batch, length) tokens they are handed with."""
        if self.grid is not None and self.grid != batch * length:
            raise ValueError(f"`packed_sequences` describe {self.grid} tokens but `{name}` holds {batch} x {length} = "
                             f"{batch * length}: pass those the collator built for this batch.")

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


def document_lengths(position_ids: torch.Tensor) -> list[int]:
    """The lengths of the documents of (B, T) rows, over the flattened B * T tokens: a position not one more than the
    previous one starts a document (as transformers' `find_packed_sequence_indices` reads them), and so does every
    row's first token. Reads the positions back."""
    starts = nn.functional.pad(position_ids.diff(dim=-1) != 1, (1, 0), value=True)  # (B, T)
    boundaries = nn.functional.pad(starts.flatten().nonzero().squeeze(1), (0, 1), value=position_ids.numel())
    return boundaries.diff().tolist()


def varlen_kernel(config, output_attentions: bool) -> bool:
    """Whether a kernel that takes sequence boundaries instead of a mask serves `config`: not under eager or flex,
    with relative positions, or when attention weights are requested (these need a mask)."""
    return (not output_attentions and config.relative_attention is None
            and config._attn_implementation in ("sdpa", *FLASH_IMPLEMENTATIONS))


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


__all__ = ["DOCUMENT_MASKING_IMPLEMENTATIONS", "FLASH_IMPLEMENTATIONS", "VARLEN_KEYWORDS", "PackedSequences",
           "document_lengths", "document_masking_error", "varlen_kernel", "varlen_sdpa_forward"]
