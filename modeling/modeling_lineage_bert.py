"""BERT (Devlin et al. 2018): a bidirectional Transformer encoder pretrained with masked-LM and next-sentence
prediction, and its fine-tuning heads.

Follows the paper and the reference implementation: token + segment + learned position embeddings summed and
normalised, post-norm encoder blocks with exact GELU, a tanh pooler over `[CLS]`, a masked-LM head (dense,
GELU, LayerNorm, decoder tied to the word embeddings with its own bias) and a two-way NSP classifier. Weights
convert to and from transformers' `Bert*` models (`conversion.py`) with identical outputs.

As in transformers' BERT, `is_decoder=True` makes the blocks causal, with a key/value cache for generation, and
`add_cross_attention=True` adds cross attention to `encoder_hidden_states` (through the shared `LineageBlock`, as
the Transformer's decoder): `LineageBertLMHeadModel` is then the decoder of a bert2bert `EncoderDecoderModel`.

Departures, by config only: `norm_position="pre"` moves each LayerNorm before its sublayer, drops the
embedding LayerNorm and adds a final one, so exactly one LayerNorm feeds every consumer; `position_embedding_type`
`"relative"` / `"relative-keys"` gives relative position representations (Shaw et al. 2018) in self-attention
instead of (or, with `absolute_and_relative`, besides) the learned positions. Without `attention_mask`,
rows whose `position_ids` restart (packed sequences, as `DataCollatorWithFlattening` makes) attend within each
sequence, as transformers' causal models and flash-attention paths do (under sdpa through `PackedSequences`, with
no (T, T) mask); transformers' BERT under eager or sdpa attention lets such sequences see each other. The collators'
`packed_sequences` say on the host where a batch's sequences and padding lie, so that a training forward reads none
of it back from the device.

Training options, per call (not configuration, so a saved model's outputs never depend on how it was trained):
`unpad_inputs=True` removes the padding of a batch before the encoder stack (MosaicBERT, Portes et al. 2023) and
restores it at the output; `sparse_prediction=True` runs the masked-LM head only at labelled positions.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Unpack

import torch
from torch import nn
from transformers import GenerationMixin
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import (
    create_bidirectional_mask,
    create_causal_mask,
    find_packed_sequence_indices,
    packed_sequence_mask_function,
)
from transformers.modeling_outputs import (
    BaseModelOutputWithPoolingAndCrossAttentions,
    CausalLMOutputWithCrossAttentions,
    MaskedLMOutput,
    ModelOutput,
    MultipleChoiceModelOutput,
    NextSentencePredictorOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.modeling_utils import slice_logits_to_keep
from transformers.utils import logging
from transformers.utils.generic import TransformersKwargs, can_return_tuple
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .arguments import CACHE_NAME, cache_keyword, forward_arguments, output_cache
from .checks import (
    check_cached_mask,
    check_choice_inputs,
    check_class_labels,
    check_devices,
    check_ids_or_embeds,
    check_label_ids,
    check_labels_shape,
    check_mask_shape,
    check_sequence_labels,
    check_sequence_length,
    check_token_ids,
)
from .configuration_lineage_bert import LineageBertConfig
from .layers import (
    ACTIVATION_MODULES,
    LearnedPositionalEmbedding,
    LineageBlock,
    classifier_dropout,
)
from .linear import LineageLinear
from .losses import labelled_positions, lm_head_loss, skips_logits, vocab_logits
from .packing import (
    PackedSequences,
    mask_inputs,
    packed_documents,
    unpadded_sequences,
    varlen_attention_inputs,
    varlen_kernel,
)
from .pretrained import LineagePreTrainedModel
from .relative_positions import relative_attention_inputs

logger = logging.get_logger(__name__)


class LineageBertEmbeddings(nn.Module):
    """word + segment + position embeddings, then LayerNorm (post-norm only) and dropout."""

    def __init__(self, config: LineageBertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(
            config.padded_vocab_size, config.hidden_size, padding_idx=config.pad_token_id
        )
        self.position_embeddings = (  # off for relative positions unless `absolute_and_relative`
            LearnedPositionalEmbedding(config.max_position_embeddings, config.hidden_size)
            if config.uses_absolute_positions else None
        )
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = (
            nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.norm_position == "post" else None
        )
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        past_length: int | torch.Tensor = 0,
    ) -> torch.Tensor:
        """Positions default to past_length..past_length+T-1 (a decoder continues from its cache)."""
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)  # (B, T, C)
        length = inputs_embeds.shape[1]
        if position_ids is None:
            position_ids = torch.arange(length, device=inputs_embeds.device)[None] + past_length  # (1, T)
        if token_type_ids is None:
            token_type_ids = torch.zeros(inputs_embeds.shape[:2], dtype=torch.long, device=inputs_embeds.device)
        embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids)
        if self.position_embeddings is not None:
            embeddings = embeddings + self.position_embeddings(position_ids)
        if self.norm is not None:
            embeddings = self.norm(embeddings)
        return self.dropout(embeddings)


class LineageBertEncoder(nn.Module):
    """A stack of bidirectional blocks (causal, with optional cross attention, for a decoder); a final LayerNorm
    under pre-norm."""

    def __init__(self, config: LineageBertConfig):
        super().__init__()
        self.layers = nn.ModuleList(
            LineageBlock(config, i, is_causal=config.is_decoder, has_cross_attention=config.add_cross_attention)
            for i in range(config.num_hidden_layers)
        )
        self.final_norm = (
            nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.norm_position == "pre" else None
        )

    def forward(self, hidden_states: torch.Tensor, *masks_and_memory: torch.Tensor | None, **kwargs) -> torch.Tensor:
        """`masks_and_memory`: the self-attention mask, then for a decoder `encoder_hidden_states` and their mask
        (tensors that carry gradients go positionally, as gradient checkpointing requires)."""
        for layer in self.layers:
            hidden_states = layer(hidden_states, *masks_and_memory, **kwargs)[0]
        return self.final_norm(hidden_states) if self.final_norm is not None else hidden_states


class LineageBertPooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence representation used by NSP and the classification heads."""

    def __init__(self, config: LineageBertConfig):
        super().__init__()
        self.dense = LineageLinear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden_states[:, 0]))  # (B, C)


class LineageBertLMHead(nn.Module):
    """Masked-LM head: dense, activation, LayerNorm, then a decoder tied to the word embeddings plus a bias."""

    def __init__(self, config: LineageBertConfig):
        super().__init__()
        self.dense = LineageLinear(config.hidden_size, config.hidden_size)
        self.act = ACTIVATION_MODULES[config.hidden_act]()
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = LineageLinear(config.hidden_size, config.padded_vocab_size)

    def transform(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The decoder's input: dense, activation, LayerNorm (B, T, C)."""
        return self.norm(self.act(self.dense(hidden_states)))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(hidden_states))  # (B, T, V'), V' = config.padded_vocab_size

    def loss(self, hidden_states: torch.Tensor, labels: torch.Tensor, vocab_size: int, **kwargs) -> torch.Tensor:
        """The LM loss of `hidden_states` against `labels` without the logits (`losses.lm_head_loss`); the heads'
        forwards have range-checked `labels`."""
        return lm_head_loss(self.transform(hidden_states), self.decoder.weight, self.decoder.bias, labels, vocab_size,
                            check_labels=False, **kwargs)


class LineageBertPreTrainedModel(LineagePreTrainedModel):
    config_class = LineageBertConfig
    base_model_prefix = "bert"
    _no_split_modules = ["LineageBlock"]
    _can_compile_fullgraph = True  # input checks that read values run eagerly only (checks.py)
    _can_record_outputs = {
        **LineagePreTrainedModel._can_record_outputs,
        "cross_attentions": OutputRecorder(LineageBlock, index=2),
    }
    auto_classes = {
        "AutoModel": "LineageBertModel",
        "AutoModelForPreTraining": "LineageBertForPreTraining",
        "AutoModelForMaskedLM": "LineageBertForMaskedLM",
        "AutoModelForCausalLM": "LineageBertLMHeadModel",
        "AutoModelForNextSentencePrediction": "LineageBertForNextSentencePrediction",
        "AutoModelForSequenceClassification": "LineageBertForSequenceClassification",
        "AutoModelForTokenClassification": "LineageBertForTokenClassification",
        "AutoModelForQuestionAnswering": "LineageBertForQuestionAnswering",
        "AutoModelForMultipleChoice": "LineageBertForMultipleChoice",
    }


class LineageBertModel(LineageBertPreTrainedModel):
    """The bare encoder: last hidden states and the pooled `[CLS]` representation."""

    def __init__(self, config: LineageBertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = LineageBertEmbeddings(config)
        self.encoder = LineageBertEncoder(config)
        self.pooler = LineageBertPooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.word_embeddings = value

    def _check_inputs(self, input_ids, inputs_embeds, attention_mask, token_type_ids, position_ids,
                      encoder_hidden_states, encoder_attention_mask, past_length: int | torch.Tensor) -> None:
        """Given `position_ids` are checked against the position table, not the row length: a packed row may be
        longer than the table."""
        config = self.config
        check_devices(self.embeddings.word_embeddings.weight.device, input_ids=input_ids, inputs_embeds=inputs_embeds,
                      attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids,
                      encoder_hidden_states=encoder_hidden_states)
        shape = check_ids_or_embeds(input_ids, inputs_embeds, config.vocab_size, width=config.hidden_size)
        check_cached_mask(attention_mask, shape[0], shape[1], past_length)
        check_mask_shape(token_type_ids, shape, "token_type_ids")
        if token_type_ids is not None:
            check_token_ids(token_type_ids, config.type_vocab_size, "token_type_ids", "type_vocab_size")
        if position_ids is None:
            check_sequence_length(shape[1], config.max_position_embeddings, past_length=past_length)
        else:
            check_mask_shape(position_ids, shape, "position_ids")
            check_token_ids(position_ids, config.max_position_embeddings, "position_ids", "max_position_embeddings")
        if encoder_hidden_states is not None:
            if not config.add_cross_attention:
                raise ValueError("`encoder_hidden_states` need a model built with `is_decoder=True` and "
                                 "`add_cross_attention=True`; this one has no cross attention.")
            check_mask_shape(encoder_attention_mask, encoder_hidden_states.shape[:2], "encoder_attention_mask",
                             "encoder_hidden_states")

    def _cache(self, cache: Cache | None, use_cache: bool | None,
               encoder_hidden_states: torch.Tensor | None, position_ids: torch.Tensor | None,
               attention_mask: torch.Tensor | None) -> Cache | None:
        """A decoder's cache (as transformers' BERT): a new one when asked for, with a cross-attention part when
        there is an encoder; an encoder never caches, nor does a model in training unless asked. Packed rows
        (`position_ids` restarting within a row, no `attention_mask`) get none by default and refuse one asked for:
        a cache would hold the keys of every document of the row, so the next token would attend across them."""
        config = self.config
        if not config.is_decoder:
            return None
        packed = not torch.compiler.is_compiling() and _packed_sequences(position_ids, attention_mask) is not None
        if packed and (use_cache or cache is not None):
            raise ValueError("Packed rows (`position_ids` restarting within a row) cannot use a key/value cache: "
                             f"pass `use_cache=False` and no `{CACHE_NAME}`, or one sequence per row.")
        if use_cache is None:
            use_cache = config.use_cache and not self.training and not packed
        if not use_cache:
            return None
        if cache is None and encoder_hidden_states is not None:
            return EncoderDecoderCache(DynamicCache(config=config), DynamicCache(config=config))
        return cache if cache is not None else DynamicCache(config=config)

    def _self_attention_mask(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                             position_ids: torch.Tensor | None, cache: Cache | None,
                             packed_sequences: PackedSequences | None):
        """Causal for a decoder, bidirectional otherwise; a packed row (restarting `position_ids`, no
        `attention_mask`) attends within each of its sequences either way. The collate's `packed_sequences` answer
        on the host what transformers would read back (`mask_inputs`)."""
        padding, restarts, test = mask_inputs(attention_mask, position_ids, packed_sequences, hidden_states.shape[0])
        if self.config.is_decoder:
            if isinstance(cache, EncoderDecoderCache):
                cache = cache.self_attention_cache
            return create_causal_mask(self.config, hidden_states, padding, cache, restarts, allow_is_causal_skip=test)
        return create_bidirectional_mask(self.config, hidden_states, padding, allow_is_bidirectional_skip=test,
                                         and_mask_function=_packed_sequences(restarts, padding))

    def _packed_attention(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                          position_ids: torch.Tensor | None, cache: Cache | None,
                          encoder_hidden_states: torch.Tensor | None, packed_sequences: PackedSequences | None,
                          kwargs: dict) -> dict | None:
        """Packed rows (restarting `position_ids`, no `attention_mask`, no cache, no cross attention): the blocks'
        keywords for attention within each sequence without a (T, T) mask (`PackedSequences`, the collate's or read
        from the positions), or None for the mask path (`_self_attention_mask`, which also splits packed rows)."""
        if (position_ids is None or attention_mask is not None or cache is not None
                or encoder_hidden_states is not None or torch.compiler.is_compiling()):
            return None
        sequences = packed_documents(position_ids.expand(hidden_states.shape[0], -1), packed_sequences)
        return varlen_attention_inputs(self.config, sequences,
                                       kwargs.get("output_attentions", self.config.output_attentions))

    def _unpadded_attention(self, attention_mask: torch.Tensor | None, encoder_hidden_states: torch.Tensor | None,
                            unpad_inputs: bool, packed_sequences: PackedSequences | None,
                            kwargs: dict) -> tuple[PackedSequences, dict] | None:
        """Each row's real tokens end to end (the collate's `packed_sequences`, or read from the mask) and the blocks'
        keywords for attention within them (`unpad_inputs`, see `forward`), or None for the padded path: no padding
        mask, a decoder, hidden states or attention weights requested, or no varlen kernel."""
        config = self.config
        if (not unpad_inputs or attention_mask is None or attention_mask.dim() != 2 or config.is_decoder
                or encoder_hidden_states is not None or torch.compiler.is_compiling()
                or kwargs.get("output_hidden_states", config.output_hidden_states)):
            return None
        output_attentions = kwargs.get("output_attentions", config.output_attentions)
        if not varlen_kernel(config, output_attentions):
            return None
        sequences = unpadded_sequences(attention_mask, packed_sequences)
        return sequences, varlen_attention_inputs(config, sequences, output_attentions)

    def _unpadded_forward(self, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                          sequences: PackedSequences, varlen: dict, **kwargs) -> torch.Tensor:
        """Embeddings and blocks on the real tokens only (`sequences.tokens`), laid end to end as one (1, N, C) row;
        returns the (B, T, C) states with zeros at padded positions. Positions are those of the padded path (0..T-1
        over the row)."""
        batch, length = attention_mask.shape
        real = sequences.tokens  # (N,) indices of real tokens in the B * T grid
        if position_ids is None:
            position_ids = torch.arange(length, device=attention_mask.device)[None]
        position_ids = position_ids.expand(batch, length)
        gathered = [x.flatten(0, 1)[real][None] if x is not None else None  # (1, N) or (1, N, C)
                    for x in (input_ids, token_type_ids, position_ids, inputs_embeds)]
        hidden_states = self.encoder(self.embeddings(*gathered), None, **varlen, **kwargs)  # (1, N, C)
        restored = hidden_states.new_zeros(batch * length, hidden_states.shape[-1])
        return restored.index_copy(0, real, hidden_states[0]).view(batch, length, -1)  # (B, T, C)

    @forward_arguments
    @capture_outputs
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = None,
        unpad_inputs: bool = False,
        packed_sequences: PackedSequences | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPoolingAndCrossAttentions:
        """A decoder's `attention_mask` covers cached + new tokens; `output_hidden_states` / `output_attentions` in
        `kwargs` are collected by `@capture_outputs`.

        `unpad_inputs` (a training option, which the heads pass on): with a 2D `attention_mask`, remove the padding
        before the encoder stack (MosaicBERT): the embeddings, feed-forward layers and LayerNorms run on real tokens
        only and attention runs per sequence (flash-attn's varlen kernel, else SDPA over length buckets); the padding
        is restored at the output, where `last_hidden_state` is zero at padded positions (the padded path leaves there
        the states of pad tokens). Outputs at real positions equal the padded path's; the heads' outputs at padded
        positions are those of a zero state, so the two paths differ there, in the pooled output of a row whose
        position 0 is padding (left padding), and in a loss that reads padded positions (question answering's softmax
        spans every position). Applies to an encoder (not `is_decoder`) with absolute positions under sdpa or flash
        attention, when neither hidden states nor attention weights are requested; other calls take the padded path.
        `pretrain_bert` and `finetune` pass it while training on a GPU.

        `packed_sequences` (from the collators, `packing.PackedSequences`) say on the host where the real tokens of
        padded rows, or the sequences of packed rows, lie, so that the forward reads none of it back from the device;
        they change no output."""
        cache = self._cache(cache, use_cache, encoder_hidden_states, position_ids, attention_mask)
        past_length = cache.get_seq_length() if cache is not None else 0
        self._check_inputs(input_ids, inputs_embeds, attention_mask, token_type_ids, position_ids,
                           encoder_hidden_states, encoder_attention_mask, past_length)
        unpadded = self._unpadded_attention(attention_mask, encoder_hidden_states, unpad_inputs, packed_sequences,
                                            kwargs)
        if unpadded is not None:
            hidden_states = self._unpadded_forward(input_ids, attention_mask, token_type_ids, position_ids,
                                                   inputs_embeds, *unpadded, **kwargs)
            return BaseModelOutputWithPoolingAndCrossAttentions(
                last_hidden_state=hidden_states,
                pooler_output=self.pooler(hidden_states) if self.pooler is not None else None,
            )
        hidden_states = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds, past_length)
        varlen = self._packed_attention(hidden_states, attention_mask, position_ids, cache,
                                        encoder_hidden_states, packed_sequences, kwargs)
        mask = None if varlen else self._self_attention_mask(hidden_states, attention_mask, position_ids,
                                                             cache, packed_sequences)
        memory = ()
        if encoder_hidden_states is not None:
            cross_mask = create_bidirectional_mask(self.config, hidden_states, encoder_attention_mask,
                                                   encoder_hidden_states=encoder_hidden_states)
            memory = (encoder_hidden_states, cross_mask)
        relative = relative_attention_inputs(self.config, hidden_states, position_ids, past_length, attention_mask)
        hidden_states = self.encoder(
            hidden_states, mask, *memory, **cache_keyword(cache), **(varlen or {}), **relative, **kwargs
        )
        return BaseModelOutputWithPoolingAndCrossAttentions(
            last_hidden_state=hidden_states,
            pooler_output=self.pooler(hidden_states) if self.pooler is not None else None,
            **cache_keyword(cache),
        )


def _packed_sequences(position_ids: torch.Tensor | None, attention_mask: torch.Tensor | None) -> Callable | None:
    """The mask function keeping each packed sequence to itself, when `position_ids` restart within a row and no
    `attention_mask` was given (transformers' own test for packed rows); None otherwise."""
    if position_ids is None or attention_mask is not None:
        return None
    segments = find_packed_sequence_indices(position_ids)  # (B, T) sequence index of each token, or None
    return packed_sequence_mask_function(segments) if segments is not None else None


@dataclass
class LineageBertForPreTrainingOutput(ModelOutput):
    """Outputs of `LineageBertForPreTraining`: `loss` = `mlm_loss` + `nsp_loss` for the label sets given."""

    loss: torch.Tensor | None = None
    mlm_loss: torch.Tensor | None = None
    nsp_loss: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None
    seq_relationship_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def _masked_lm(model: LineageBertPreTrainedModel, hidden_states: torch.Tensor, labels: torch.Tensor | None,
               skip_logits: bool, sparse_prediction: bool, **kwargs) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """MLM logits and loss: (B, T, V) logits, or with `sparse_prediction` and labels the (N, V) logits of the N
    labelled positions only, in row-major order, as the original BERT code gathers `masked_lm_positions` (the head and
    the softmax skip the rest, which the loss ignores anyway; at 15% masking a bert-base training step was about 1.3x
    as fast); with `skip_logits` (`skips_logits`: a training forward with labels) the loss alone. Calls without
    labels always get (B, T, V)."""
    lm_head, vocab_size = model.lm_head, model.config.vocab_size
    if labels is None:
        return vocab_logits(lm_head(hidden_states), vocab_size), None
    check_labels_shape(labels, hidden_states.shape[:-1])
    if sparse_prediction:
        hidden_states, labels = labelled_positions(hidden_states, labels)  # (N, C), (N,)
    if skip_logits:
        num_items_in_batch = kwargs.get("num_items_in_batch")
        return None, lm_head.loss(hidden_states, labels, vocab_size, num_items_in_batch=num_items_in_batch,
                                  dense=sparse_prediction and torch.compiler.is_compiling())
    logits = vocab_logits(lm_head(hidden_states), vocab_size)
    return logits, model.loss_function(logits, labels, vocab_size=vocab_size, **kwargs)


def _classification_loss(logits: torch.Tensor, labels: torch.Tensor | None, name: str = "labels",
                         limit_name: str = "num_labels") -> torch.Tensor | None:
    """The mean cross-entropy of (B, K) scores against (B,) class indices in [0, K) (NSP, multiple choice)."""
    if labels is None:
        return None
    check_labels_shape(labels, logits.shape[:-1], name)
    check_class_labels(labels, logits.shape[-1], name, limit_name)
    return nn.functional.cross_entropy(logits, labels)


class LineageBertForPreTraining(LineageBertPreTrainedModel):
    """Masked-LM and next-sentence-prediction heads; the pretraining objective of the paper (section 3.1)."""

    _tied_weights_keys = {"lm_head.decoder.weight": "bert.embeddings.word_embeddings.weight"}
    accepts_loss_kwargs = False  # the NSP term is a per-example mean

    def __init__(self, config: LineageBertConfig):
        super().__init__(config)
        self.loss_type = "ForMaskedLM"  # the MLM term's (transformers reads a loss type from the class name)
        self.bert = LineageBertModel(config)
        self.lm_head = LineageBertLMHead(config)
        self.nsp_head = LineageLinear(config.hidden_size, 2)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head.decoder

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head.decoder = value

    @forward_arguments(takes=("packed_sequences",))
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        return_logits: bool | None = None,
        sparse_prediction: bool = False,
        unpad_inputs: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> LineageBertForPreTrainingOutput:
        """A training forward with `labels` returns `prediction_logits=None` (`return_logits`: see
        `losses.skips_logits`). `sparse_prediction` (a training option): with `labels`, the MLM logits are the (N, V)
        ones of the N labelled positions only (`_masked_lm`)."""
        skip_logits = skips_logits(self, self.lm_head.decoder, labels, return_logits)
        check_label_ids(labels, self.config.vocab_size)
        outputs = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, unpad_inputs=unpad_inputs,
            return_dict=True, **kwargs
        )
        prediction_logits, mlm_loss = _masked_lm(self, outputs.last_hidden_state, labels, skip_logits,
                                                 sparse_prediction, **kwargs)
        seq_relationship_logits = self.nsp_head(outputs.pooler_output)
        nsp_loss = _classification_loss(seq_relationship_logits, next_sentence_label, "next_sentence_label",
                                        "the two NSP classes")
        losses = [loss for loss in (mlm_loss, nsp_loss) if loss is not None]
        return LineageBertForPreTrainingOutput(
            loss=sum(losses) if losses else None,
            mlm_loss=mlm_loss,
            nsp_loss=nsp_loss,
            prediction_logits=prediction_logits,
            seq_relationship_logits=seq_relationship_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class LineageBertForMaskedLM(LineageBertPreTrainedModel):
    """The masked-LM head alone (fill-mask)."""

    _tied_weights_keys = {"lm_head.decoder.weight": "bert.embeddings.word_embeddings.weight"}

    def __init__(self, config: LineageBertConfig):
        super().__init__(config)
        self.bert = LineageBertModel(config, add_pooling_layer=False)
        self.lm_head = LineageBertLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head.decoder

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head.decoder = value

    @forward_arguments(takes=("packed_sequences",))
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        return_logits: bool | None = None,
        sparse_prediction: bool = False,
        unpad_inputs: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MaskedLMOutput:
        """A training forward with `labels` returns `logits=None` (`return_logits`: `losses.skips_logits`).
        `sparse_prediction` (a training option): with `labels`, the logits are the (N, V) ones of the N labelled
        positions only (`_masked_lm`)."""
        skip_logits = skips_logits(self, self.lm_head.decoder, labels, return_logits)
        check_label_ids(labels, self.config.vocab_size)
        outputs = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, unpad_inputs=unpad_inputs,
            return_dict=True, **kwargs
        )
        logits, loss = _masked_lm(self, outputs.last_hidden_state, labels, skip_logits, sparse_prediction, **kwargs)
        return MaskedLMOutput(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class LineageBertLMHeadModel(LineageBertPreTrainedModel, GenerationMixin):
    """BERT as a left-to-right language model (`is_decoder=True`): the masked-LM head over causal blocks, predicting
    the next token, with `generate()`. With `add_cross_attention=True` it attends to `encoder_hidden_states`: the
    decoder of a bert2bert `EncoderDecoderModel` (`AutoModelForCausalLM` builds it from a Lineage BERT config)."""

    _tied_weights_keys = {"lm_head.decoder.weight": "bert.embeddings.word_embeddings.weight"}

    def __init__(self, config: LineageBertConfig):
        super().__init__(config)
        self.loss_type = "ForCausalLM"  # transformers reads a loss type from the class name, and no name says it
        if not config.is_decoder:
            logger.warning("`LineageBertLMHeadModel` without `is_decoder=True` sees later tokens: set "
                           "`is_decoder=True` for a left-to-right language model.")
        self.bert = LineageBertModel(config, add_pooling_layer=False)
        self.lm_head = LineageBertLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head.decoder

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head.decoder = value

    @forward_arguments(takes=("packed_sequences",))
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        return_logits: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> CausalLMOutputWithCrossAttentions:
        """`labels` are the input ids (shifted inside); -100 marks positions left out of the loss. A training forward
        with `labels` returns `logits=None` (`return_logits`: `losses.skips_logits`)."""
        skip_logits = skips_logits(self, self.lm_head.decoder, labels, return_logits)
        if labels is not None:
            check_labels_shape(labels, (input_ids if input_ids is not None else inputs_embeds[..., 0]).shape)
            check_label_ids(labels, self.config.vocab_size)
            use_cache = False
        outputs = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, encoder_hidden_states,
            encoder_attention_mask, cache, use_cache, return_dict=True, **kwargs,
        )
        hidden_states = slice_logits_to_keep(outputs.last_hidden_state, logits_to_keep)  # (B, T', C)
        vocab_size, logits, loss = self.config.vocab_size, None, None
        if skip_logits:
            loss = self.lm_head.loss(hidden_states, labels, vocab_size, shift=True,
                                     num_items_in_batch=kwargs.get("num_items_in_batch"))
        else:
            logits = vocab_logits(self.lm_head(hidden_states), vocab_size)  # (B, T', V)
            if labels is not None:
                loss = self.loss_function(logits, labels, vocab_size=vocab_size, **kwargs)
        return CausalLMOutputWithCrossAttentions(
            loss=loss,
            logits=logits,
            **cache_keyword(output_cache(outputs)),
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            cross_attentions=outputs.cross_attentions,
        )


class LineageBertForNextSentencePrediction(LineageBertPreTrainedModel):
    """Is sentence B the actual next sentence of A? Label 0 = IsNext, 1 = NotNext (as the reference)."""

    accepts_loss_kwargs = False

    def __init__(self, config: LineageBertConfig):
        super().__init__(config)
        self.bert = LineageBertModel(config)
        self.nsp_head = LineageLinear(config.hidden_size, 2)
        self.post_init()

    @forward_arguments(takes=("packed_sequences",))
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        unpad_inputs: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> NextSentencePredictorOutput:
        outputs = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, unpad_inputs=unpad_inputs,
            return_dict=True, **kwargs
        )
        logits = self.nsp_head(outputs.pooler_output)
        return NextSentencePredictorOutput(
            loss=_classification_loss(logits, labels),
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class LineageBertForSequenceClassification(LineageBertPreTrainedModel):
    """Single sentences (`[CLS] A [SEP]`) or pairs such as NLI (`[CLS] A [SEP] B [SEP]`) classified from the pooled
    `[CLS]`; regression (MSE) when `num_labels == 1`, multi-label (BCE) when `problem_type` says so."""

    accepts_loss_kwargs = False  # per-example mean loss

    def __init__(self, config: LineageBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = LineageBertModel(config)
        self.dropout = classifier_dropout(config)
        self.classifier = LineageLinear(config.hidden_size, config.num_labels)
        self.post_init()

    @forward_arguments(takes=("packed_sequences",))
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        unpad_inputs: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> SequenceClassifierOutput:
        outputs = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, unpad_inputs=unpad_inputs,
            return_dict=True, **kwargs
        )
        logits = self.classifier(self.dropout(outputs.pooler_output))  # (B, num_labels)
        loss = None
        if labels is not None:
            if labels.shape not in (logits.shape[:1], logits.shape):
                raise ValueError(
                    f"`labels` must have shape {tuple(logits.shape[:1])} (one class id or value per example) or "
                    f"{tuple(logits.shape)} (multi-label), got {tuple(labels.shape)}."
                )
            check_sequence_labels(labels, self.num_labels, self.config.problem_type)
            loss = self.loss_function(labels, logits, self.config)
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class LineageBertForTokenClassification(LineageBertPreTrainedModel):
    """A label per token (NER); labels of -100 (later sub-tokens, specials, padding) are ignored."""

    def __init__(self, config: LineageBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = LineageBertModel(config, add_pooling_layer=False)
        self.dropout = classifier_dropout(config)
        self.classifier = LineageLinear(config.hidden_size, config.num_labels)
        self.post_init()

    @forward_arguments(takes=("packed_sequences",))
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        unpad_inputs: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> TokenClassifierOutput:
        outputs = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, unpad_inputs=unpad_inputs,
            return_dict=True, **kwargs
        )
        logits = self.classifier(self.dropout(outputs.last_hidden_state))  # (B, T, num_labels)
        loss = None
        if labels is not None:
            check_labels_shape(labels, logits.shape[:-1])
            check_class_labels(labels, self.num_labels)
            loss = self.loss_function(logits, labels, self.config, **kwargs)
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class LineageBertForQuestionAnswering(LineageBertPreTrainedModel):
    """Extractive QA (SQuAD, section 4.2): start and end logits over the tokens; the loss is the mean of the start
    and end cross-entropies, positions outside the sequence are ignored."""

    accepts_loss_kwargs = False

    def __init__(self, config: LineageBertConfig):
        super().__init__(config)
        self.bert = LineageBertModel(config, add_pooling_layer=False)
        self.qa_outputs = LineageLinear(config.hidden_size, 2)
        self.post_init()

    @forward_arguments(takes=("packed_sequences",))
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        unpad_inputs: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> QuestionAnsweringModelOutput:
        outputs = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, unpad_inputs=unpad_inputs,
            return_dict=True, **kwargs
        )
        start_logits, end_logits = self.qa_outputs(outputs.last_hidden_state).unbind(dim=-1)  # 2 x (B, T)
        start_logits, end_logits = start_logits.contiguous(), end_logits.contiguous()
        check_labels_shape(start_positions, start_logits.shape[:1], "start_positions")
        check_labels_shape(end_positions, end_logits.shape[:1], "end_positions")
        return QuestionAnsweringModelOutput(
            loss=self.loss_function(start_logits, end_logits, start_positions, end_positions),
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class LineageBertForMultipleChoice(LineageBertPreTrainedModel):
    """Scores each `[CLS] context [SEP] choice [SEP]` from its pooled `[CLS]`; softmax over the choices (SWAG)."""

    accepts_loss_kwargs = False

    def __init__(self, config: LineageBertConfig):
        super().__init__(config)
        self.bert = LineageBertModel(config)
        self.dropout = classifier_dropout(config)
        self.classifier = LineageLinear(config.hidden_size, 1)
        self.post_init()

    @forward_arguments(takes=("packed_sequences",))
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        unpad_inputs: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MultipleChoiceModelOutput:
        _, num_choices = check_choice_inputs(input_ids, inputs_embeds)
        flat = [x.flatten(0, 1) if x is not None else None
                for x in (input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)]
        outputs = self.bert(*flat, unpad_inputs=unpad_inputs, return_dict=True, **kwargs)
        logits = self.classifier(self.dropout(outputs.pooler_output)).view(-1, num_choices)  # (B, num_choices)
        return MultipleChoiceModelOutput(
            loss=_classification_loss(logits, labels, limit_name="num_choices"),
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


__all__ = [
    "LineageBertForMaskedLM",
    "LineageBertForMultipleChoice",
    "LineageBertForNextSentencePrediction",
    "LineageBertForPreTraining",
    "LineageBertForQuestionAnswering",
    "LineageBertForSequenceClassification",
    "LineageBertForTokenClassification",
    "LineageBertLMHeadModel",
    "LineageBertModel",
    "LineageBertPreTrainedModel",
]
