"""What the encoder-decoders share: the base model's forward (`Seq2SeqBase`), the LM head's (`Seq2SeqLMBase`: teacher
forcing, output layer, loss) and the checks of decoder inputs. A family supplies `encode`, `_decode`,
`_check_target`, `as_encoder_outputs` and `_new_cache`.
"""

from typing import Unpack

import torch
from transformers.cache_utils import Cache
from transformers.modeling_outputs import Seq2SeqLMOutput, Seq2SeqModelOutput
from transformers.utils.generic import TransformersKwargs, can_return_tuple

from .arguments import cache_keyword, forward_arguments, model_cache, output_cache
from .checks import (
    check_devices,
    check_ids_or_embeds,
    check_label_ids,
    check_labels_shape,
    check_mask_shape,
    unless_decoding,
)
from .losses import lm_output, seq2seq_loss, skips_logits


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
                         vocab_size: int, source_shape: torch.Size, attention_mask: torch.Tensor | None,
                         *, past_length: int | torch.Tensor = 0) -> torch.Size:
    """A seq2seq decoder's inputs after `past_length` cached tokens, against its source: exactly one of ids (in the
    vocabulary, but in a decoding step of `generate()`: `checks.decoding_step`) or embeddings, one target per source,
    and the source mask (B, S), also when the encoder outputs are given. Returns the target's (B, T)."""
    with unless_decoding(decoder_input_ids if decoder_input_ids is not None else decoder_inputs_embeds, past_length):
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
    """The decoder input ids: the given ones, else `labels` shifted right; `labels` checked against them."""
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


class Seq2SeqBase:
    """The forward of an encoder-decoder base model: decoder (and encoder) hidden states, no output layer."""

    @forward_arguments
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs=None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        packed_sequences=None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        """Both sides are checked before the encoder runs; `encoder_outputs` (what `get_encoder()` returns) skip it.
        `packed_sequences` (from the collators): the source rows, known on the host; they change no output."""
        check_devices(self.get_input_embeddings().weight.device, input_ids=input_ids, attention_mask=attention_mask,
                      decoder_input_ids=decoder_input_ids, decoder_attention_mask=decoder_attention_mask,
                      inputs_embeds=inputs_embeds, decoder_inputs_embeds=decoder_inputs_embeds)
        encoder_outputs = self.as_encoder_outputs(encoder_outputs)
        source_shape = (encoder_outputs.last_hidden_state.shape[:2] if encoder_outputs is not None
                        else check_ids_or_embeds(input_ids, inputs_embeds))
        self._check_target(decoder_input_ids, decoder_inputs_embeds, decoder_attention_mask=decoder_attention_mask,
                           cache=cache, source_shape=source_shape, attention_mask=attention_mask)
        if encoder_outputs is None:
            encoder_outputs = self.encode(input_ids=input_ids, attention_mask=attention_mask,
                                          inputs_embeds=inputs_embeds, packed_sequences=packed_sequences, **kwargs)
        cache, _ = model_cache(self, cache, use_cache, self._new_cache)
        decoded = self._decode(decoder_input_ids, decoder_inputs_embeds, encoder_outputs=encoder_outputs,
                               attention_mask=attention_mask, decoder_attention_mask=decoder_attention_mask,
                               cache=cache, packed_sequences=packed_sequences, **kwargs)
        return Seq2SeqModelOutput(
            last_hidden_state=decoded.last_hidden_state,
            **cache_keyword(output_cache(decoded)),
            decoder_hidden_states=decoded.hidden_states,
            decoder_attentions=decoded.attentions,
            cross_attentions=decoded.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=getattr(encoder_outputs, "attentions", None),
        )


class Seq2SeqLMBase:
    """The forward of an encoder-decoder with its output layer (`lm_head` over `model`): teacher forcing from `labels`,
    the loss, and the LM heads' training options; a family adds to the output layer through `lm_head_inputs`."""

    def lm_head_inputs(self) -> dict:
        return {}

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @property
    def label_smoothing(self) -> float:
        """`config.label_smoothing` in training mode; 0 in eval mode, whose loss is the NLL."""
        return self.config.label_smoothing if self.training else 0.0

    @property
    def loss_function(self):
        """Cross-entropy over target tokens (`label_smoothing`), where transformers would pick a causal-LM loss
        (shifting the labels) from the class name."""
        def loss(logits, labels, vocab_size=None, num_items_in_batch=None, **kwargs):
            return seq2seq_loss(logits, labels, self.label_smoothing, num_items_in_batch)
        return loss

    @forward_arguments(takes=("packed_sequences",))
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs=None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        use_cache: bool | None = None,
        num_items_in_batch: torch.Tensor | int | None = None,
        return_logits: bool | None = None,
        sparse_prediction: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        """A training forward with `labels` computes the loss without the (B, T, V) logits and returns `logits=None`
        (`return_logits`: see `losses.skips_logits`). `sparse_prediction` (a training option): with `labels`,
        the output layer and the softmax run only at labelled positions (label != -100), so the logits are the
        (N, V) ones of the N labelled positions in row-major order, skipping the padding of ragged batches."""
        skip_logits = skips_logits(self, self.lm_head, labels, return_logits)
        check_label_ids(labels, self.config.vocab_size)
        decoder_input_ids = teacher_forcing_inputs(labels, decoder_input_ids, decoder_inputs_embeds, self.config)
        if labels is not None:
            use_cache = False
        outputs = self.model(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask, encoder_outputs=encoder_outputs, cache=cache,
            inputs_embeds=inputs_embeds, decoder_inputs_embeds=decoder_inputs_embeds, use_cache=use_cache,
            return_dict=True, **kwargs,
        )
        logits, loss = lm_output(self, outputs.last_hidden_state, labels=labels, output_layer=self.lm_head,
                                 skip_logits=skip_logits,
                                 sparse_prediction=sparse_prediction, label_smoothing=self.label_smoothing,
                                 num_items_in_batch=num_items_in_batch, **self.lm_head_inputs())
        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            **cache_keyword(output_cache(outputs)),
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )


__all__ = ["Seq2SeqBase", "Seq2SeqLMBase", "check_decoder_inputs", "shift_tokens_right", "teacher_forcing_inputs"]
