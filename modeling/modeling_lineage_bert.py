"""BERT (Devlin et al. 2018): a bidirectional Transformer encoder pretrained with masked-LM and next-sentence
prediction (section 3.1), and its fine-tuning heads (section 4), convertible to and from transformers' `Bert*`.

Token + segment + learned position embeddings, post-norm blocks with exact GELU, a tanh pooler over `[CLS]`, a tied
masked-LM head and a two-way NSP classifier; `is_decoder=True` makes the blocks causal, `add_cross_attention=True`
adds cross attention, as in transformers. Training options, per call: `sparse_prediction=True` runs the masked-LM
head at labelled positions only; `unpad_inputs=True` runs an encoder on the real tokens only (MosaicBERT, Portes et
al. 2023), `last_hidden_state` then zero at padded positions. Departures: docs/models.md.
"""

from dataclasses import dataclass
from typing import Unpack

import torch
from torch import nn
from transformers.cache_utils import Cache
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
from transformers.utils import logging
from transformers.utils.generic import TransformersKwargs, can_return_tuple
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .arguments import cache_keyword, encoder_decoder_cache, forward_arguments, model_cache, output_cache
from .checks import (
    check_choice_inputs,
    check_class_labels,
    check_inputs,
    check_labels_shape,
    check_lm_labels,
    check_sequence_labels,
)
from .configuration_lineage_bert import LineageBertConfig
from .layers import (
    ACTIVATION_MODULES,
    LearnedPositionalEmbedding,
    LineageBlock,
    classifier_dropout,
    final_norm,
    run_blocks,
)
from .layout import SequenceLayout
from .linear import LineageLinear
from .losses import lm_output, sequence_classification_loss, skips_logits
from .packing import PackedSequences
from .pretrained import LineageGenerationMixin, LineagePreTrainedModel, causal_lm
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
        self.final_norm = final_norm(config)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, memory: tuple = (),
                **kwargs) -> torch.Tensor:
        """`memory`: for a decoder with cross attention, `encoder_hidden_states` and their mask."""
        return run_blocks(self.layers, self.final_norm, hidden_states, attention_mask, memory, **kwargs)


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

    def get_output_embeddings(self) -> nn.Linear | None:
        """The masked-LM head's decoder (tied to the word embeddings), for the heads that have one."""
        lm_head = getattr(self, "lm_head", None)
        return lm_head.decoder if lm_head is not None else None

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head.decoder = value


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
        """A decoder's `attention_mask` covers cached + new tokens. `unpad_inputs` (a training option) runs an encoder
        on the real tokens only (see the module docstring); the collators' `packed_sequences` say on the host
        where the real tokens or the packed sequences lie. Neither changes an output at a real position."""
        config = self.config
        cache, use_cache = (cache, use_cache) if config.is_decoder else (None, False)  # an encoder never caches
        past_length = cache.get_seq_length() if cache is not None else 0
        batch, _ = check_inputs(config, self.embeddings.word_embeddings.weight.device, input_ids=input_ids,
                                inputs_embeds=inputs_embeds, attention_mask=attention_mask, position_ids=position_ids,
                                past_length=past_length, token_type_ids=token_type_ids,
                                encoder_hidden_states=encoder_hidden_states,
                                encoder_attention_mask=encoder_attention_mask)
        layout = SequenceLayout.of(config, batch, attention_mask=attention_mask, position_ids=position_ids,
                                   packed_sequences=packed_sequences, cache=cache, use_cache=use_cache,
                                   encoder_attention_mask=encoder_attention_mask)
        new_cache = encoder_decoder_cache if encoder_hidden_states is not None else None
        cache, use_cache = model_cache(self, cache, use_cache, new_cache, packed=layout.packed)
        if layout.unpad(unpad_inputs=unpad_inputs, cross_attention=encoder_hidden_states is not None, kwargs=kwargs):
            positions, ids, types, embeds = layout.gather(position_ids, input_ids, token_type_ids, inputs_embeds)
            hidden_states = self.embeddings(ids, types, positions, embeds)  # (1, N, C): the real tokens end to end
            _, attention = layout.self_attention(hidden_states)
            hidden_states = layout.restore(self.encoder(hidden_states, None, **attention, **kwargs))  # (B, T, C)
        else:
            hidden_states = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds, past_length)
            mask, attention = layout.self_attention(hidden_states, cache=cache, is_causal=config.is_decoder,
                                                    varlen=encoder_hidden_states is None,
                                                    output_attentions=kwargs.get("output_attentions"))
            memory = () if encoder_hidden_states is None else (encoder_hidden_states, layout.cross_attention(
                hidden_states, encoder_hidden_states=encoder_hidden_states, cache=cache))
            relative = relative_attention_inputs(config, hidden_states, position_ids, past_length, attention_mask)
            hidden_states = self.encoder(hidden_states, mask, memory, **cache_keyword(cache), **attention,
                                         **relative, **kwargs)
        return BaseModelOutputWithPoolingAndCrossAttentions(
            last_hidden_state=hidden_states,
            pooler_output=self.pooler(hidden_states) if self.pooler is not None else None,
            **cache_keyword(cache if use_cache else None),
        )


@dataclass
class LineageBertForPreTrainingOutput(ModelOutput):
    """Outputs of `LineageBertForPreTraining`: `loss` = `mlm_loss` + `nsp_loss` for the label sets given. The fields
    of `BertForPreTrainingOutput` come first, in its order, so that a tuple (`return_dict=False`) starts as its does;
    the two terms come last (and `Trainer` leaves them out of its predictions: `keys_to_ignore_at_inference`)."""

    loss: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None
    seq_relationship_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    mlm_loss: torch.Tensor | None = None
    nsp_loss: torch.Tensor | None = None


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
        """A training forward with `labels` returns `prediction_logits=None` (`losses.skips_logits`);
        `sparse_prediction`: with `labels`, the (N, V) MLM logits of the N labelled positions only."""
        skip_logits = skips_logits(self, self.lm_head.decoder, labels, return_logits)
        check_lm_labels(labels, input_ids, inputs_embeds, self.config.vocab_size)
        outputs = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, unpad_inputs=unpad_inputs, return_dict=True,
            **kwargs
        )
        prediction_logits, mlm_loss = lm_output(self, outputs.last_hidden_state, labels=labels,
                                                output_layer=self.lm_head.decoder, skip_logits=skip_logits,
                                                transform=self.lm_head.transform,
                                                sparse_prediction=sparse_prediction, **kwargs)
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
        """A training forward with `labels` returns `logits=None` (`losses.skips_logits`); `sparse_prediction`:
        with `labels`, the (N, V) logits of the N labelled positions only."""
        skip_logits = skips_logits(self, self.lm_head.decoder, labels, return_logits)
        check_lm_labels(labels, input_ids, inputs_embeds, self.config.vocab_size)
        outputs = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, unpad_inputs=unpad_inputs, return_dict=True,
            **kwargs
        )
        logits, loss = lm_output(self, outputs.last_hidden_state, labels=labels, output_layer=self.lm_head.decoder,
                                 skip_logits=skip_logits, transform=self.lm_head.transform,
                                 sparse_prediction=sparse_prediction, **kwargs)
        return MaskedLMOutput(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


@causal_lm
class LineageBertLMHeadModel(LineageBertPreTrainedModel, LineageGenerationMixin):
    """BERT as a left-to-right language model (`is_decoder=True`) with `generate()`; with `add_cross_attention=True` the
    decoder of a bert2bert `EncoderDecoderModel`."""

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
        shift_labels: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> CausalLMOutputWithCrossAttentions:
        """`labels` are the input ids (shifted inside); -100 marks positions left out of the loss; `shift_labels`, given
        with them, are the targets already aligned with the positions, and the loss is computed against them as they
        are. A training forward with `labels` returns `logits=None` (`return_logits`: `losses.skips_logits`)."""
        skip_logits = skips_logits(self, self.lm_head.decoder, labels, return_logits)
        check_lm_labels(labels, input_ids, inputs_embeds, self.config.vocab_size, shift_labels)
        if labels is not None:
            use_cache = False
        outputs = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask, cache=cache, use_cache=use_cache, return_dict=True,
            **kwargs,
        )
        logits, loss = lm_output(self, outputs.last_hidden_state, labels=labels, output_layer=self.lm_head.decoder,
                                 skip_logits=skip_logits, transform=self.lm_head.transform, shift=True,
                                 logits_to_keep=logits_to_keep, shift_labels=shift_labels, **kwargs)
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
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, unpad_inputs=unpad_inputs, return_dict=True,
            **kwargs
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
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, unpad_inputs=unpad_inputs, return_dict=True,
            **kwargs
        )
        logits = self.classifier(self.dropout(outputs.pooler_output))  # (B, num_labels)
        check_sequence_labels(labels, logits.shape[0], self.num_labels, self.config.problem_type)
        loss = sequence_classification_loss(self, labels, logits)
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
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, unpad_inputs=unpad_inputs, return_dict=True,
            **kwargs
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
    and end cross-entropies over every position, padding included, as transformers' BERT (positions outside the
    sequence are ignored). Only the padded path computes the padding positions' logits, so a call with positions
    takes it whatever `unpad_inputs` says."""

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
        unpad_inputs = unpad_inputs and start_positions is None and end_positions is None  # see the class docstring
        outputs = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, unpad_inputs=unpad_inputs, return_dict=True,
            **kwargs
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
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids,
                  "position_ids": position_ids, "inputs_embeds": inputs_embeds}
        flat = {name: x.flatten(0, 1) if x is not None else None for name, x in inputs.items()}
        outputs = self.bert(**flat, unpad_inputs=unpad_inputs, return_dict=True, **kwargs)
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
