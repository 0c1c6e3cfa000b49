"""The blocks' attention masks: transformers' causal or bidirectional mask over the padding, kept within each packed
document; the collate's `PackedSequences` answer on the host what the mask functions would read back.
"""

import torch
from transformers.cache_utils import EncoderDecoderCache
from transformers.masking_utils import (
    create_bidirectional_mask,
    create_causal_mask,
    find_packed_sequence_indices,
    packed_sequence_mask_function,
)

from .checks import decoding_step
from .packing import PackedSequences


def mask_inputs(attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None,
                sequences: PackedSequences | None, batch: int, *, padding_known: bool = False
                ) -> tuple[torch.Tensor | None, torch.Tensor | None, bool]:
    """What to hand transformers' mask functions: the 2D `attention_mask`, the `position_ids` whose restarts split rows,
    and whether they may test the mask for padding (`allow_is_*_skip`, a read back under sdpa). The collate's
    `sequences` answer on the host instead: no mask for rows without padding, the mask untested for rows with it, no
    positions for documents none of which restarts; without them, or under `torch.compile`, the arguments pass as they
    came, the mask untested where the first forward of a generation tested it (`padding_known`, `decoding`)."""
    if torch.compiler.is_compiling() or sequences is None:
        return attention_mask, position_ids, attention_mask is None or not padding_known
    if sequences.tokens is not None and attention_mask is not None and attention_mask.dim() == 2:
        sequences.check_batch(*attention_mask.shape, name="attention_mask")
        return (attention_mask, None, False) if sequences.padding else (None, None, True)
    if sequences.tokens is None and attention_mask is None and position_ids is not None:  # (batch rows)
        sequences.check_batch(batch, position_ids.shape[-1])
        return None, position_ids if sequences.count > batch else None, True
    return attention_mask, position_ids, attention_mask is None or not padding_known


def decoding(hidden_states: torch.Tensor, cache) -> bool:
    """Whether the masks of `hidden_states` (B, T, C) over `cache` belong to a decoding step of `generate()`
    (`checks.decoding_step`). Its padding mask is not tested for padding (a read back per step under sdpa, to drop a
    mask without any): the padding of a prompt or a source stays in the cache and the encoder states to the end of the
    generation, so the mask stays, and `generate()` passes no decoder mask where no row holds padding. (A source mask
    without padding is then applied, not dropped: the same attention.)"""
    if isinstance(cache, EncoderDecoderCache):
        cache = cache.self_attention_cache
    return cache is not None and decoding_step(hidden_states, cache.get_seq_length())


def document_ids(documents: PackedSequences, batch: int, length: int) -> torch.Tensor:
    """(B, T) the document of each token of packed rows, from the boundaries alone (nothing is read back)."""
    starts = torch.zeros(batch * length, dtype=torch.long, device=documents.cu_seqlens.device)
    starts[documents.cu_seqlens[1:-1].long()] = 1  # every document after the first starts with a 1
    return starts.cumsum(0).view(batch, length)


def self_attention_mask(config, hidden_states: torch.Tensor, *, attention_mask: torch.Tensor | None,
                        position_ids: torch.Tensor | None = None, documents: PackedSequences | None = None,
                        sequences: PackedSequences | None = None, cache=None, is_causal: bool = False
                        ) -> torch.Tensor | None:
    """The blocks' self-attention mask for (B, T, C) `hidden_states`: transformers' causal or bidirectional mask over
    the padding, kept within each of packed rows' `documents`. The collate's `sequences` answer on the host what the
    mask functions would read back (`mask_inputs`); under `torch.compile` transformers finds the documents from the
    restarting `position_ids`."""
    batch, length = hidden_states.shape[:2]
    padding, restarts, test = mask_inputs(attention_mask, position_ids, sequences, batch,
                                          padding_known=decoding(hidden_states, cache))
    if not torch.compiler.is_compiling() or padding is not None:
        restarts = None  # (the documents were found once, by `layout.SequenceLayout.of`)
    same_document = None
    if documents is not None:
        same_document = packed_sequence_mask_function(document_ids(documents, batch, length))
    elif restarts is not None and not is_causal:
        same_document = packed_sequence_mask_function(find_packed_sequence_indices(restarts.expand(batch, -1)))
    if is_causal:
        if isinstance(cache, EncoderDecoderCache):
            cache = cache.self_attention_cache
        return create_causal_mask(config, hidden_states, padding, cache, restarts, allow_is_causal_skip=test,
                                  and_mask_function=same_document)
    return create_bidirectional_mask(config, hidden_states, padding, allow_is_bidirectional_skip=test,
                                     and_mask_function=same_document)


def cross_attention_mask(config, hidden_states: torch.Tensor, *, encoder_hidden_states: torch.Tensor,
                         encoder_attention_mask: torch.Tensor | None, sequences: PackedSequences | None = None,
                         cache=None):
    """The blocks' cross-attention mask of (B, T, C) `hidden_states` over the encoder states' padding; the collate's
    `sequences` of the source rows answer on the host whether they hold any (`mask_inputs`), and a decoding step
    over `cache` does not ask (`decoding`)."""
    padding, _, test = mask_inputs(encoder_attention_mask, None, sequences, encoder_hidden_states.shape[0],
                                   padding_known=decoding(hidden_states, cache))
    return create_bidirectional_mask(config=config, inputs_embeds=hidden_states, attention_mask=padding,
                                     encoder_hidden_states=encoder_hidden_states, allow_is_bidirectional_skip=test)


__all__ = ["cross_attention_mask", "decoding", "document_ids", "mask_inputs", "self_attention_mask"]
