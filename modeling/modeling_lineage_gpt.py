"""GPT (Radford et al. 2018, "Improving Language Understanding by Generative Pre-Training"): a decoder-only
Transformer language model and its fine-tuning heads.

Token + learned position embeddings, causal post-norm blocks with tanh-approximated GELU, an LM head tied to the
token embeddings (section 3.1). Fine-tuning (sections 3.2-3.3) reads the final state at the `[EXTRACT]` token through
a bias-free W_y, for single texts, pairs and multiple choice, and can add `lm_loss_weight` times the LM loss
(L3 = L2 + lambda * L1). `norm_position="pre"` gives GPT-2 (Radford et al. 2019). Weights convert to and from
`OpenAIGPT*` and `GPT2*` (`conversion_gpt.py`). Positions follow `attention_mask`, so a left-padded row gives the
outputs of the same row unpadded; other departures: docs/models.md.
"""

import math
import warnings
from dataclasses import dataclass
from typing import Unpack

import torch
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import Cache
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    CausalLMOutputWithPast,
    ModelOutput,
)
from transformers.utils.generic import TransformersKwargs, can_return_tuple
from transformers.utils.output_capturing import capture_outputs

from .arguments import cache_keyword, forward_arguments, model_cache, output_cache
from .checks import (
    check_choice_inputs,
    check_class_labels,
    check_ids_or_embeds,
    check_inputs,
    check_labels_shape,
    check_lm_labels,
    check_mask_shape,
    check_sequence_labels,
    value_checks_enabled,
)
from .configuration_lineage_gpt import LineageGptConfig
from .layers import LearnedPositionalEmbedding, LineageBlock, classifier_dropout, final_norm, run_blocks
from .layout import SequenceLayout
from .linear import LineageLinear
from .losses import lm_head_loss, lm_output, sequence_classification_loss, skips_logits
from .packing import VARLEN_KEYWORDS, PackedSequences
from .pretrained import LineageGenerationMixin, LineagePreTrainedModel, causal_lm
from .relative_positions import relative_attention_inputs


class LineageGptPreTrainedModel(LineagePreTrainedModel):
    config_class = LineageGptConfig
    base_model_prefix = "transformer"
    _no_split_modules = ["LineageBlock"]
    _can_compile_fullgraph = True  # input checks that read values run eagerly only (checks.py)
    auto_classes = {
        "AutoModel": "LineageGptModel",
        "AutoModelForCausalLM": "LineageGptForCausalLM",
        "AutoModelForSequenceClassification": "LineageGptForSequenceClassification",
        "AutoModelForMultipleChoice": "LineageGptForMultipleChoice",
    }

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, LineageBlock) and self.config.norm_position == "pre":
            # GPT-2: projections into the residual stream scaled by 1/sqrt(number of residual sublayers)
            std = self.config.initializer_range / math.sqrt(2 * self.config.num_hidden_layers)
            init.normal_(module.self_attn.sublayer.o_proj.weight, mean=0.0, std=std)
            init.normal_(module.feed_forward.sublayer.down_proj.weight, mean=0.0, std=std)


class LineageGptModel(LineageGptPreTrainedModel):
    """The bare decoder: token + position embeddings, causal blocks, a final LayerNorm under pre-norm."""

    def __init__(self, config: LineageGptConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.padded_vocab_size, config.hidden_size)
        self.embed_positions = (  # off for relative positions unless `absolute_and_relative`
            LearnedPositionalEmbedding(config.max_position_embeddings, config.hidden_size)
            if config.uses_absolute_positions else None
        )
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.layers = nn.ModuleList(
            LineageBlock(config, layer_idx=i, is_causal=True) for i in range(config.num_hidden_layers)
        )
        self.final_norm = final_norm(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    @staticmethod
    def _position_ids(attention_mask: torch.Tensor | None, past_length: int | torch.Tensor, length: int,
                      device: torch.device) -> torch.Tensor:
        """Positions of the new tokens: counted over real tokens only, so left padding does not shift them.
        A prepared 4D mask carries no token padding to count: its caller passes `position_ids` (as generate does).
        `past_length` may be a static cache's 0-d tensor: added, never branched on (`torch.compile`)."""
        if attention_mask is None or attention_mask.dim() == 4:
            return torch.arange(length, device=device)[None] + past_length  # (1, T)
        positions = attention_mask.long().cumsum(-1) - 1  # (B, S); left padding gives -1
        return positions[:, -length:].clamp(min=0)  # (B, T)

    @forward_arguments(takes=VARLEN_KEYWORDS)
    @capture_outputs
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        packed_sequences: PackedSequences | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPast:
        """`use_cache` defaults to `config.use_cache` outside training; `attention_mask` covers cached + new tokens;
        `output_hidden_states` / `output_attentions` in `kwargs` are collected by `@capture_outputs`. The collators'
        `packed_sequences` and transformers' `cu_seq_lens_*` / `max_length_*` (in `kwargs`) say on the host where
        the sequences lie (`packing.py`), so that the forward reads nothing back; they change no output."""
        config = self.config
        past_length = cache.get_seq_length() if cache is not None else 0
        batch, length = check_inputs(config, self.embed_tokens.weight.device, input_ids=input_ids,
                                     inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                                     position_ids=position_ids, past_length=past_length)
        boundaries = {key: kwargs.pop(key) for key in VARLEN_KEYWORDS if key in kwargs}
        layout = SequenceLayout.of(config, batch, attention_mask=attention_mask, position_ids=position_ids,
                                   packed_sequences=packed_sequences, boundaries=boundaries, cache=cache,
                                   use_cache=use_cache)
        cache, use_cache = model_cache(self, cache, use_cache, packed=layout.packed)
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # (B, T, C)
        positions = position_ids
        if positions is None:
            positions = self._position_ids(attention_mask, past_length, length, inputs_embeds.device)
        if self.embed_positions is not None:
            inputs_embeds = inputs_embeds + self.embed_positions(positions)
        hidden_states = self.dropout(inputs_embeds)
        mask, attention = layout.self_attention(hidden_states, cache=cache, is_causal=True,
                                                output_attentions=kwargs.get("output_attentions"))
        relative = relative_attention_inputs(config, hidden_states, positions, past_length, attention_mask)
        hidden_states = run_blocks(self.layers, self.final_norm, hidden_states, mask, **cache_keyword(cache),
                                   **attention, **relative, **kwargs)
        return BaseModelOutputWithPast(last_hidden_state=hidden_states, **cache_keyword(cache if use_cache else None))


@causal_lm
class LineageGptForCausalLM(LineageGptPreTrainedModel, LineageGenerationMixin):
    """Language modelling (section 3.1) and generation: greedy, sampling and beam search through `generate()`."""

    _tied_weights_keys = {"lm_head.weight": "transformer.embed_tokens.weight"}

    def __init__(self, config: LineageGptConfig):
        super().__init__(config)
        self.transformer = LineageGptModel(config)
        self.lm_head = LineageLinear(config.hidden_size, config.padded_vocab_size, bias=False)
        self.post_init()

    @forward_arguments(takes=("packed_sequences", *VARLEN_KEYWORDS))
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        return_logits: bool | None = None,
        shift_labels: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> CausalLMOutputWithPast:
        """`labels` are the input ids (shifted inside); -100 marks positions left out of the loss; `shift_labels`, given
        with them, are the targets already aligned with the positions (as context-parallel training passes them), and
        the loss is computed against them as they are. A training forward with `labels` computes the loss without the
        (B, T, V) logits and returns `logits=None` (`return_logits`: see `losses.skips_logits`). `packed_sequences`
        and the `cu_seq_lens_*` / `max_length_*` of packed rows go to the base model (`LineageGptModel.forward`)."""
        skip_logits = skips_logits(self, self.lm_head, labels, return_logits)
        check_lm_labels(labels, input_ids, inputs_embeds, self.config.vocab_size, shift_labels)
        outputs = self.transformer(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
            inputs_embeds=inputs_embeds, use_cache=use_cache, return_dict=True, **kwargs,
        )
        logits, loss = lm_output(self, outputs.last_hidden_state, labels=labels, output_layer=self.lm_head,
                                 skip_logits=skip_logits, shift=True,
                                 logits_to_keep=logits_to_keep, shift_labels=shift_labels, **kwargs)
        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            **cache_keyword(output_cache(outputs)),
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


# ----------------------------------------------------------------------------------------------------------
# Fine-tuning heads: classification at the [EXTRACT] token, with the optional auxiliary LM loss
# ----------------------------------------------------------------------------------------------------------


@dataclass
class LineageGptClassifierOutput(ModelOutput):
    """Outputs of the classification heads: `loss` = `classification_loss` + lm_loss_weight * `lm_loss`. The fields of
    transformers' classifier outputs come first, so that a tuple (`return_dict=False`) starts as theirs does; the two
    terms come last (and `Trainer` leaves them out of its predictions: `keys_to_ignore_at_inference`)."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    classification_loss: torch.Tensor | None = None
    lm_loss: torch.Tensor | None = None


def _real_tokens(input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None,
                 attention_mask: torch.Tensor | None, pad_token_id: int | None) -> torch.Tensor:
    """(B, T) bool, True at real tokens: from `attention_mask`, else `input_ids != pad_token_id`."""
    check_ids_or_embeds(input_ids, inputs_embeds)
    reference = input_ids if input_ids is not None else inputs_embeds[..., 0]  # (B, T)
    if attention_mask is not None:
        check_mask_shape(attention_mask, reference.shape)
        real = attention_mask.bool()
    elif input_ids is not None and pad_token_id is not None:
        real = input_ids != pad_token_id
    elif reference.shape[0] == 1:
        real = torch.ones_like(reference, dtype=torch.bool)
    else:
        raise ValueError(
            f"A batch of {reference.shape[0]} sequences needs `attention_mask` or `config.pad_token_id` to find "
            "each row's `[EXTRACT]` (last non-padding) token; neither was given."
        )
    if value_checks_enabled() and not bool(real.any(-1).all()):
        row = int((~real.any(-1)).nonzero()[0, 0])
        raise ValueError(
            f"Row {row} of `input_ids` has no non-padding token, hence no `[EXTRACT]` token to classify; every row "
            "needs at least one token with `attention_mask` 1 (or different from `pad_token_id`)."
        )
    return real


def _at_extract(hidden_states: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """The hidden state at each row's last real token (`[EXTRACT]`), for right or left padding alike."""
    positions = torch.arange(real.shape[-1], device=real.device)
    index = (positions * real).argmax(-1)  # (B,)
    return hidden_states[torch.arange(hidden_states.shape[0], device=hidden_states.device), index]  # (B, C)


class _LineageGptClassifier(LineageGptPreTrainedModel):
    """Backbone, dropout and bias-free W_y shared by the classification heads, and the auxiliary LM loss."""

    accepts_loss_kwargs = False  # per-example mean losses; Trainer's token count does not apply

    def __init__(self, config: LineageGptConfig, num_outputs: int):
        super().__init__(config)
        self.transformer = LineageGptModel(config)
        self.dropout = classifier_dropout(config)
        self.score = LineageLinear(config.hidden_size, num_outputs, bias=False)
        self.post_init()

    def _check_auxiliary_inputs(self, input_ids: torch.Tensor | None, labels: torch.Tensor | None) -> None:
        weight = self.config.lm_loss_weight
        if labels is not None and weight > 0 and input_ids is None:
            raise ValueError("The auxiliary LM loss (`lm_loss_weight` > 0) needs `input_ids`, not `inputs_embeds`.")
        if labels is None and weight > 0 and self.training:  # a loss computed outside sees `logits` only
            warnings.warn(
                f"`lm_loss_weight`={weight} adds the auxiliary LM loss only to the loss this model computes from "
                "`labels`; this training forward has none, so a loss computed from its `logits` leaves the LM term "
                "out (transformers' `Trainer` takes the labels when `label_smoothing_factor` > 0 or a "
                "`compute_loss_func` is given). Leave `label_smoothing_factor` at 0 to train on L2 + lm_loss_weight * "
                "L1, or set `lm_loss_weight`=0 for the classification loss alone.", stacklevel=3
            )

    def _scores(self, input_ids, real, position_ids, inputs_embeds,
                **kwargs: Unpack[TransformersKwargs]) -> tuple[torch.Tensor, BaseModelOutputWithPast]:
        """Run the backbone on (N, T) rows masked by `real` (see `_real_tokens`); the (N, num_outputs) scores."""
        outputs = self.transformer(
            input_ids=input_ids, attention_mask=real, position_ids=position_ids, inputs_embeds=inputs_embeds,
            use_cache=False, return_dict=True, **kwargs
        )
        return self.score(self.dropout(_at_extract(outputs.last_hidden_state, real))), outputs

    def _output(self, logits, classification_loss, input_ids, real, outputs) -> LineageGptClassifierOutput:
        """L3 = L2 + lambda * L1 (section 3.2) when labels were given and `lm_loss_weight` lambda > 0."""
        loss, lm_loss, weight = classification_loss, None, self.config.lm_loss_weight
        if classification_loss is not None and weight > 0:  # the LM head is the tied embedding: no (N, T, V) logits
            lm_loss = lm_head_loss(outputs.last_hidden_state, self.get_input_embeddings().weight, None,
                                   input_ids.masked_fill(~real, -100), self.config.vocab_size, shift=True,
                                   check_labels=False)  # the input ids, checked by the backbone
            loss = classification_loss + weight * lm_loss
        return LineageGptClassifierOutput(
            loss=loss,
            classification_loss=classification_loss,
            lm_loss=lm_loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class LineageGptForSequenceClassification(_LineageGptClassifier):
    """Single texts or pairs classified from the `[EXTRACT]` state; regression (MSE) when `num_labels == 1`, multi-label
    (BCE) by `problem_type`."""

    def __init__(self, config: LineageGptConfig):
        super().__init__(config, config.num_labels)
        self.num_labels = config.num_labels

    @forward_arguments(takes=("packed_sequences",))
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> LineageGptClassifierOutput:
        self._check_auxiliary_inputs(input_ids, labels)
        real = _real_tokens(input_ids, inputs_embeds, attention_mask, self.config.pad_token_id)  # (B, T)
        check_sequence_labels(labels, real.shape[0], self.num_labels, self.config.problem_type)
        logits, outputs = self._scores(input_ids, real, position_ids, inputs_embeds, **kwargs)
        classification_loss = sequence_classification_loss(self, labels, logits)
        return self._output(logits, classification_loss, input_ids, real, outputs)


class LineageGptForMultipleChoice(_LineageGptClassifier):
    """Scores each `[START] context [DELIM] answer [EXTRACT]` of a (batch, num_choices, length) input at its
    `[EXTRACT]` token and normalises over the choices (cross-entropy against the index of the right one)."""

    def __init__(self, config: LineageGptConfig):
        super().__init__(config, 1)

    @forward_arguments(takes=("packed_sequences",))
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> LineageGptClassifierOutput:
        self._check_auxiliary_inputs(input_ids, labels)
        batch, num_choices = check_choice_inputs(input_ids, inputs_embeds)
        check_labels_shape(labels, (batch,))
        check_class_labels(labels, num_choices, limit_name="num_choices")
        inputs = (input_ids, attention_mask, position_ids, inputs_embeds)
        ids, mask, positions, embeds = [x.flatten(0, 1) if x is not None else None for x in inputs]  # (B * choices, T)
        real = _real_tokens(ids, embeds, mask, self.config.pad_token_id)
        scores, outputs = self._scores(ids, real, positions, embeds, **kwargs)
        logits = scores.view(batch, num_choices)  # (B, num_choices)
        classification_loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return self._output(logits, classification_loss, ids, real, outputs)


__all__ = [
    "LineageGptClassifierOutput",
    "LineageGptForCausalLM",
    "LineageGptForMultipleChoice",
    "LineageGptForSequenceClassification",
    "LineageGptModel",
    "LineageGptPreTrainedModel",
]
