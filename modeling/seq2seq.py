"""The decoder inputs of an encoder-decoder (the Transformer and the RNN): teacher forcing from `labels` and the
checks of decoder inputs against their source.
"""

import torch

from .checks import check_ids_or_embeds, check_labels_shape, check_mask_shape


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
    (`shift_tokens_right`); checks that `labels` are (B, T) like the decoder inputs, and that the decoder has an
    input."""
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



__all__ = ["check_decoder_inputs", "shift_tokens_right", "teacher_forcing_inputs"]
