"""Where the sequences of one forward's (B, T) rows lie, found once per forward (`SequenceLayout.of`): the documents of
packed rows, the collator's `PackedSequences`, BERT's unpadded rows, and the encoder rows a decoder cross-attends to.
The base models ask it for their blocks' self- and cross-attention inputs (masks from `masks.py`, or a varlen
kernel's keywords from `packing.py`).
"""

import torch

from .arguments import CACHE_NAME
from .masks import cross_attention_mask, self_attention_mask
from .packing import VARLEN_KEYWORDS, PackedSequences, document_masking_error, varlen_kernel


def packed_documents(position_ids: torch.Tensor, sequences: PackedSequences | None = None,
                     boundaries: dict | None = None) -> PackedSequences | None:
    """The documents of (B, T) rows whose `position_ids` restart within a row, None when none restarts: the collate's
    `sequences` (nothing read back), else transformers' varlen `boundaries`, else the restarts (read back, unless the
    rows are one token long)."""
    batch, length = position_ids.shape
    if sequences is not None and sequences.tokens is None:  # (an object of padded rows says nothing of documents)
        sequences.check_batch(batch, length)
        return sequences.to(position_ids.device) if sequences.count > batch else None
    if boundaries:
        if any(boundaries.get(key) is None for key in VARLEN_KEYWORDS):
            raise ValueError(f"Packed rows take all of {', '.join(VARLEN_KEYWORDS)} or none of them (as "
                             "`DataCollatorWithFlattening(return_flash_attn_kwargs=True)` emits them), got "
                             f"{', '.join(key for key in VARLEN_KEYWORDS if boundaries.get(key) is not None)}.")
        cu_seqlens, max_length = boundaries["cu_seq_lens_q"], boundaries["max_length_q"]
        if boundaries["cu_seq_lens_k"].shape != cu_seqlens.shape or boundaries["max_length_k"] != max_length:
            raise ValueError("Packed rows attend within themselves: `cu_seq_lens_k` / `max_length_k` must be those "
                             "of the queries (`cu_seq_lens_q` / `max_length_q`).")
        documents = PackedSequences(cu_seqlens, max_length)
        return documents if documents.count > batch else None
    if length == 1:  # one token per row restarts nothing (a decoding step: no read back)
        return None
    return PackedSequences.from_position_ids(position_ids)


class SequenceLayout:
    """One forward's sequences. `documents`: packed rows' documents (None for unpacked rows); `sequences` /
    `encoder_sequences`: the collate's `packed_sequences` of these rows / of the encoder's; `real`: the real tokens
    of unpadded rows once `unpad` says so (MosaicBERT, Portes et al. 2023)."""

    def __init__(self, config, *, attention_mask: torch.Tensor | None = None,
                 position_ids: torch.Tensor | None = None, documents: PackedSequences | None = None,
                 sequences: PackedSequences | None = None, encoder_attention_mask: torch.Tensor | None = None,
                 encoder_sequences: PackedSequences | None = None):
        self.config, self.attention_mask, self.position_ids = config, attention_mask, position_ids
        self.documents, self.sequences = documents, sequences
        self.encoder_attention_mask, self.encoder_sequences = encoder_attention_mask, encoder_sequences
        self.real: PackedSequences | None = None

    @classmethod
    def of(cls, config, batch: int, *, attention_mask: torch.Tensor | None = None,
           position_ids: torch.Tensor | None = None, packed_sequences: PackedSequences | None = None,
           boundaries: dict | None = None, cache=None, use_cache: bool | None = None,
           encoder_attention_mask: torch.Tensor | None = None,
           encoder_sequences: PackedSequences | None = None) -> "SequenceLayout":
        """The layout of `batch` rows, packed rows found once: `position_ids` (B or 1, T) restarting within a row and
        no `attention_mask` (transformers' convention), their documents as `packed_documents` finds them. Packed rows
        under a configuration that cannot keep documents apart, or with a key/value cache, are refused; under
        `torch.compile` their documents are left to transformers' mask, which reads the same restarts."""
        if boundaries and (position_ids is None or attention_mask is not None):
            raise ValueError(f"{', '.join(boundaries)} delimit packed rows, which take `position_ids` restarting at "
                             "each sequence and no `attention_mask`.")
        documents = None
        if position_ids is not None and attention_mask is None and not torch.compiler.is_compiling():
            documents = packed_documents(position_ids.expand(batch, -1), packed_sequences, boundaries)
        if documents is not None:
            problem = document_masking_error(config)
            if problem is not None:
                raise ValueError(f"Packed rows (`position_ids` restarting within a row): {problem}.")
            if cache is not None or use_cache:
                raise ValueError("Packed rows (`position_ids` restarting within a row) cannot use a key/value cache: "
                                 f"pass `use_cache=False` and no `{CACHE_NAME}`, or one sequence per row.")
        return cls(config, attention_mask=attention_mask, position_ids=position_ids, documents=documents,
                   sequences=packed_sequences, encoder_attention_mask=encoder_attention_mask,
                   encoder_sequences=encoder_sequences)

    @property
    def packed(self) -> bool:
        """Whether the rows are packed documents."""
        return self.documents is not None

    def unpad(self, *, unpad_inputs: bool, cross_attention: bool, kwargs: dict) -> bool:
        """Whether an encoder call runs on its real tokens only (`unpad_inputs`, a 2D `attention_mask`); not for a
        decoder, cross attention, hidden states or attention weights requested, no varlen kernel, or under
        `torch.compile`. The collate's `sequences` say where the real tokens lie without a read back."""
        config, attention_mask = self.config, self.attention_mask
        if (not unpad_inputs or attention_mask is None or attention_mask.dim() != 2 or config.is_decoder
                or cross_attention or torch.compiler.is_compiling()
                or kwargs.get("output_hidden_states", config.output_hidden_states)
                or not varlen_kernel(config, kwargs.get("output_attentions", config.output_attentions))):
            return False
        if self.sequences is not None and self.sequences.tokens is not None:
            self.sequences.check_batch(*attention_mask.shape, name="attention_mask")
            self.real = self.sequences.to(attention_mask.device)  # (where a caller moved the tensors of a batch only)
        else:
            self.real = PackedSequences.from_padding_mask(attention_mask)
        return True

    def gather(self, position_ids: torch.Tensor | None, *inputs: torch.Tensor | None) -> list[torch.Tensor | None]:
        """Unpadded rows: (1, N) positions (by default those of the padded path, 0..T-1 over each row) and (1, N[, C])
        inputs of the real tokens."""
        batch, length = self.attention_mask.shape
        if position_ids is None:
            position_ids = torch.arange(length, device=self.real.cu_seqlens.device)[None]
        real = self.real.tokens  # (N,) indices of the real tokens in the B * T grid
        return [x.flatten(0, 1)[real][None] if x is not None else None
                for x in (position_ids.expand(batch, length), *inputs)]

    def restore(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Unpadded rows: (1, N, C) states of the real tokens -> (B, T, C), zeros at padded positions."""
        batch, length = self.attention_mask.shape
        restored = hidden_states.new_zeros(batch * length, hidden_states.shape[-1])
        return restored.index_copy(0, self.real.tokens, hidden_states[0]).view(batch, length, -1)

    def self_attention(self, hidden_states: torch.Tensor, *, cache=None, is_causal: bool = False, varlen: bool = True,
                       output_attentions: bool | None = None) -> tuple[torch.Tensor | None, dict]:
        """The blocks' self-attention mask and keywords for (B, T, C) `hidden_states`: unpadded rows' or packed
        documents' boundaries for a kernel that takes them (`varlen` False where the blocks also cross-attend), else
        the mask of `masks.self_attention_mask`. `output_attentions` (None: the config's) needs a mask."""
        config = self.config
        if self.real is not None:
            return None, self.real.attention_inputs(config)
        output_attentions = config.output_attentions if output_attentions is None else output_attentions
        if varlen and self.documents is not None and varlen_kernel(config, output_attentions):
            return None, self.documents.attention_inputs(config)
        return self_attention_mask(config, hidden_states, attention_mask=self.attention_mask,
                                   position_ids=self.position_ids, documents=self.documents,
                                   sequences=self.sequences, cache=cache, is_causal=is_causal), {}

    def cross_attention(self, hidden_states: torch.Tensor, *, encoder_hidden_states: torch.Tensor, cache=None):
        """The blocks' cross-attention mask of (B, T, C) `hidden_states` (over `cache`) over the encoder rows'
        padding."""
        return cross_attention_mask(self.config, hidden_states, encoder_hidden_states=encoder_hidden_states,
                                    encoder_attention_mask=self.encoder_attention_mask,
                                    sequences=self.encoder_sequences, cache=cache)

    def host_lengths(self) -> torch.Tensor | None:
        """The (B,) real-token counts of padded rows as a CPU tensor (cuDNN's packed sequences take them on the
        host), from the collate's `sequences`; None without them."""
        sequences, attention_mask = self.sequences, self.attention_mask
        if sequences is None or sequences.tokens is None or attention_mask is None or torch.compiler.is_compiling():
            return None
        sequences.check_batch(*attention_mask.shape, name="attention_mask")
        return torch.tensor(sequences.lengths)


__all__ = ["SequenceLayout", "packed_documents"]
