"""The encoder-decoder Transformer (Vaswani et al. 2017, "Attention Is All You Need"), with `generate()`.

An encoder of N bidirectional blocks and a decoder of N blocks with masked self-attention and cross attention
(section 3.1), both of the shared `LineageBlock`. Source and target share one embedding matrix, scaled by
sqrt(d_model), which is also the pre-softmax projection (section 3.4); sinusoidal positions (section 3.5); the loss
label-smoothed when `config.label_smoothing` > 0 (section 5.4). As in transformers' Marian, encoder and decoder are
pretrained models of their own, each capturing its hidden states and attentions. Weights convert to and from
`MarianModel` / `MarianMTModel` (`conversion_marian.py`); departures by config: docs/models.md.

Shapes: B batch, S source length, T target length (of this call), C hidden size, V vocabulary size.
"""

from typing import Unpack

import torch
from torch import nn
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.initialization import normal_, zeros_
from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithPastAndCrossAttentions
from transformers.utils.generic import TransformersKwargs
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .arguments import CACHE_NAME, cache_keyword, encoder_decoder_cache, forward_arguments
from .checks import (
    check_cached_mask,
    check_inputs,
    check_sequence_length,
)
from .configuration_lineage_transformer import LineageTransformerConfig
from .layers import (
    LearnedPositionalEmbedding,
    LineageBlock,
    SinusoidalPositionalEmbedding,
    final_norm,
    run_blocks,
)
from .layout import SequenceLayout
from .linear import LineageLinear
from .packing import PackedSequences
from .pretrained import LineageGenerationMixin, LineagePreTrainedModel
from .relative_positions import relative_attention_inputs
from .seq2seq import Seq2SeqBase, Seq2SeqLMBase, check_decoder_inputs, shift_tokens_right


class LineageTransformerPreTrainedModel(LineagePreTrainedModel):
    config_class = LineageTransformerConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _no_split_modules = ["LineageBlock"]
    _can_compile_fullgraph = True  # input checks that read values run eagerly only (checks.py)
    auto_classes = {
        "AutoModel": "LineageTransformerModel",
        "AutoModelForSeq2SeqLM": "LineageTransformerForConditionalGeneration",
    }

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, LineageTransformerForConditionalGeneration) and module.final_logits_bias is not None:
            zeros_(module.final_logits_bias)


class LineageTransformerStack(LineageTransformerPreTrainedModel):
    """N blocks over `Dropout(scale * token embeddings + positions)`: the encoder or the decoder (plus cross attention);
    a final LayerNorm only under pre-norm. A pretrained model of its own (as Marian's), so each captures its own
    outputs."""

    def __init__(self, config: LineageTransformerConfig, is_decoder: bool):
        super().__init__(config)
        self.embed_scale = config.hidden_size**0.5 if config.scale_embedding else 1.0
        if not config.uses_absolute_positions:
            self.embed_positions = None  # relative positions only
        elif config.position_embedding_type == "learned":
            self.embed_positions = LearnedPositionalEmbedding(config.max_position_embeddings, config.hidden_size)
        else:  # sinusoidal, also beside relative positions (`absolute_and_relative`)
            interleaved = config.sinusoidal_layout == "interleaved"
            self.embed_positions = SinusoidalPositionalEmbedding(
                config.max_position_embeddings, config.hidden_size, interleaved
            )
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.layers = nn.ModuleList(
            LineageBlock(config, i, is_causal=is_decoder, has_cross_attention=is_decoder)
            for i in range(config.num_hidden_layers)
        )
        self.final_norm = final_norm(config)

    def init_weights(self) -> None:
        """Left to the model holding both stacks, which initialises them in one pass once both are built: each stack
        initialising itself as it is built would reorder the random draws, so a seed would give other weights."""

    def embed(self, inputs_embeds: torch.Tensor, offset: int | torch.Tensor = 0) -> torch.Tensor:
        """Positions offset..offset+T-1, `offset` (the cache length) a 0-d tensor under a static cache, so that a
        compiled step does not branch on it. No `position_ids`, as in Marian: packed pairs would need a cross mask per
        pair."""
        embeddings = inputs_embeds * self.embed_scale  # (B, T, C)
        if self.embed_positions is not None:
            positions = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device)[None] + offset  # (1, T)
            embeddings = embeddings + self.embed_positions(positions)
        return self.dropout(embeddings)


class LineageTransformerEncoder(LineageTransformerStack):
    """The encoder; it owns the token embedding shared with the decoder, so `generate()` can run it alone."""

    def __init__(self, config: LineageTransformerConfig):
        super().__init__(config, is_decoder=False)
        self.embed_tokens = nn.Embedding(config.padded_vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if module is self.embed_tokens:
            normal_(module.weight, mean=0.0, std=self.config.hidden_size**-0.5)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                zeros_(module.weight[module.padding_idx])

    @forward_arguments
    @capture_outputs
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        packed_sequences: PackedSequences | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        """`packed_sequences`: the collate's account of the source rows' padding (`masks.mask_inputs`), so that
        the mask is made without reading `attention_mask` back; it changes no output."""
        config = self.config
        check_inputs(config, self.embed_tokens.weight.device, input_ids=input_ids, inputs_embeds=inputs_embeds,
                     attention_mask=attention_mask)
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # (B, S, C)
        hidden_states = self.embed(inputs_embeds)
        layout = SequenceLayout.of(config, hidden_states.shape[0], attention_mask=attention_mask,
                                   packed_sequences=packed_sequences)
        mask, _ = layout.self_attention(hidden_states)
        relative = relative_attention_inputs(config, hidden_states)
        return BaseModelOutput(last_hidden_state=run_blocks(self.layers, self.final_norm, hidden_states, mask,
                                                            **relative, **kwargs))


class LineageTransformerDecoder(LineageTransformerStack):
    """The decoder, over (unscaled) target token embeddings looked up by the model in the shared matrix."""

    _can_record_outputs = {
        **LineagePreTrainedModel._can_record_outputs,
        "cross_attentions": OutputRecorder(LineageBlock, index=2),
    }

    def __init__(self, config: LineageTransformerConfig):
        super().__init__(config, is_decoder=True)
        self.post_init()

    @forward_arguments
    @capture_outputs
    def forward(
        self,
        inputs_embeds: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        encoder_packed_sequences: PackedSequences | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """`encoder_packed_sequences`: the collate's account of the source rows' padding, as the encoder's."""
        offset = cache.get_seq_length() if cache is not None else 0
        hidden_states = self.embed(inputs_embeds, offset)
        layout = SequenceLayout.of(self.config, hidden_states.shape[0], attention_mask=attention_mask,
                                   encoder_attention_mask=encoder_attention_mask,
                                   encoder_sequences=encoder_packed_sequences)
        causal_mask, _ = layout.self_attention(hidden_states, cache=cache, is_causal=True)
        cross_mask = layout.cross_attention(hidden_states, encoder_hidden_states=encoder_hidden_states, cache=cache)
        relative = relative_attention_inputs(self.config, hidden_states, past_length=offset)  # consecutive positions
        hidden_states = run_blocks(
            self.layers, self.final_norm, hidden_states, causal_mask, memory=(encoder_hidden_states, cross_mask),
            **cache_keyword(cache), **relative, **kwargs,
        )
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states, **cache_keyword(cache)
        )


class LineageTransformerModel(Seq2SeqBase, LineageTransformerPreTrainedModel):
    """The bare encoder-decoder, without the output projection. Its forward is `seq2seq.Seq2SeqBase.forward`, which
    calls these hooks in order: `as_encoder_outputs`, `_check_target`, `encode` (unless given `encoder_outputs`),
    `_new_cache`, `_decode`."""

    def __init__(self, config: LineageTransformerConfig):
        super().__init__(config)
        self.encoder = LineageTransformerEncoder(config)
        self.decoder = LineageTransformerDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.encoder.embed_tokens = value

    def encode(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        packed_sequences: PackedSequences | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        """Run the encoder once over the source: (B, S) ids -> (B, S, C) memory."""
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds,
                            packed_sequences=packed_sequences, return_dict=True, **kwargs)

    @forward_arguments
    def decode(
        self,
        decoder_input_ids: torch.Tensor | None,
        encoder_hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        packed_sequences: PackedSequences | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """One decoder pass over (B, T) target ids given the (B, S, C) encoder memory and its (B, S) mask."""
        self._check_target(
            decoder_input_ids, decoder_inputs_embeds, decoder_attention_mask=decoder_attention_mask, cache=cache,
            source_shape=encoder_hidden_states.shape[:2], attention_mask=attention_mask,
        )
        return self._decode(
            decoder_input_ids, decoder_inputs_embeds,
            encoder_outputs=BaseModelOutput(last_hidden_state=encoder_hidden_states), attention_mask=attention_mask,
            decoder_attention_mask=decoder_attention_mask, cache=cache, packed_sequences=packed_sequences, **kwargs,
        )

    @staticmethod
    def as_encoder_outputs(encoder_outputs: BaseModelOutput | tuple | None) -> BaseModelOutput | None:
        """Given `encoder_outputs` as a `BaseModelOutput` (a tuple holds its fields in order)."""
        if encoder_outputs is not None and not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        return encoder_outputs

    def _new_cache(self) -> EncoderDecoderCache:
        return encoder_decoder_cache()

    def _check_target(
        self,
        decoder_input_ids: torch.Tensor | None,
        decoder_inputs_embeds: torch.Tensor | None,
        *,
        decoder_attention_mask: torch.Tensor | None,
        cache: Cache | None,
        source_shape: torch.Size,
        attention_mask: torch.Tensor | None,
    ) -> None:
        if cache is not None and not isinstance(cache, EncoderDecoderCache):
            raise ValueError(
                f"`{CACHE_NAME}` must be an `EncoderDecoderCache` (self-attention and cross-attention caches), "
                f"got {type(cache).__name__}."
            )
        past = cache.get_seq_length() if cache is not None else 0
        shape = check_decoder_inputs(decoder_input_ids, decoder_inputs_embeds, self.config.vocab_size, source_shape,
                                     attention_mask, past_length=past)
        check_sequence_length(shape[1], self.config.max_position_embeddings, "decoder_input_ids", past)
        check_cached_mask(decoder_attention_mask, shape[0], shape[1], past, name="decoder_attention_mask",
                          against="decoder_input_ids")

    def _decode(
        self,
        decoder_input_ids: torch.Tensor | None,
        decoder_inputs_embeds: torch.Tensor | None,
        *,
        encoder_outputs: BaseModelOutput,
        attention_mask: torch.Tensor | None,
        decoder_attention_mask: torch.Tensor | None,
        cache: Cache | None,
        packed_sequences: PackedSequences | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        if decoder_inputs_embeds is None:
            decoder_inputs_embeds = self.get_input_embeddings()(decoder_input_ids)  # (B, T, C)
        return self.decoder(
            decoder_inputs_embeds, encoder_outputs.last_hidden_state, attention_mask=decoder_attention_mask,
            encoder_attention_mask=attention_mask, cache=cache, encoder_packed_sequences=packed_sequences,
            return_dict=True, **kwargs,
        )


class LineageTransformerForConditionalGeneration(Seq2SeqLMBase, LineageTransformerPreTrainedModel,
                                                 LineageGenerationMixin):
    """Sequence-to-sequence model with the pre-softmax projection, the (label-smoothed) loss and `generate()` (the
    paper's beam of 4; its alpha = 0.6 is GNMT's penalty, not transformers' `length_penalty`: docs/models.md)."""

    _tied_weights_keys = {"lm_head.weight": "model.encoder.embed_tokens.weight"}
    # the decoder's positions bound generation (the source was checked against the encoder's when the encoder ran)
    generation_window = {"name": "decoder_input_ids", "prompt": "decoder prompt",
                         "window": "the decoder's context window"}

    def __init__(self, config: LineageTransformerConfig):
        super().__init__(config)
        self.model = LineageTransformerModel(config)
        self.lm_head = LineageLinear(config.hidden_size, config.padded_vocab_size, bias=False)
        bias = torch.zeros(1, config.padded_vocab_size) if config.final_logits_bias else None
        self.register_buffer("final_logits_bias", bias, persistent=True)
        self.post_init()

    def resize_token_embeddings(self, *args, **kwargs) -> nn.Embedding:
        embeddings = super().resize_token_embeddings(*args, **kwargs)
        if self.final_logits_bias is not None:
            bias = self.final_logits_bias[:, : embeddings.num_embeddings]  # (1, V')
            self.final_logits_bias = nn.functional.pad(bias, (0, embeddings.num_embeddings - bias.shape[1]))
        return embeddings

    def lm_head_inputs(self) -> dict:
        """Marian's fixed logits bias (`config.final_logits_bias`), added to the output layer's logits."""
        return {"logits_bias": self.final_logits_bias}


__all__ = [
    "LineageTransformerForConditionalGeneration",
    "LineageTransformerModel",
    "LineageTransformerPreTrainedModel",
    "shift_tokens_right",
]
