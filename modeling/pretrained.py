"""`LineagePreTrainedModel`, the transformers base every Lineage family derives from: weight initialisation,
attention-backend flags, output capture, vocabulary-padding-aware resizing and saving with complete `auto_map`s; and
`LineageGenerationMixin`, transformers' `generate()` as the generative heads run it.
"""

import functools
import inspect
from contextlib import nullcontext

from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
from transformers.utils.output_capturing import OutputRecorder

from .arguments import CACHE_NAME, OLD_CACHE_NAME
from .checks import check_generation_config, check_generation_length, generating
from .configuration_lineage_common import check_vocab_multiple
from .layers import LineageBlock, SinusoidalPositionalEmbedding

# what `generate()` takes for its own use and then passes on with the model inputs (transformers 5.24)
GENERATION_TOKENIZERS = ("tokenizer", "assistant_tokenizer")


class LineagePreTrainedModel(PreTrainedModel):
    """Weight initialisation, attention-backend flags, output capture and complete `auto_map` saving for all families.

    A family's base class sets `config_class`, `base_model_prefix` and `auto_classes` (Auto class name -> Lineage class
    name), so that every head loads from a saved folder with `trust_remote_code=True`. `@capture_outputs` records each
    `LineageBlock`'s input and output hidden states and its self-attention weights."""

    auto_classes: dict[str, str] = {}
    # Trainer passes `num_items_in_batch` to a head that says so (a forward's signature shows no `**kwargs`,
    # `arguments.forward_arguments`); heads whose loss is a per-example mean set False.
    accepts_loss_kwargs = True
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_attention_backend = True
    _can_record_outputs = {
        "hidden_states": OutputRecorder(LineageBlock, index=0),
        "attentions": OutputRecorder(LineageBlock, index=1),
    }

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, SinusoidalPositionalEmbedding):
            init.copy_(module.weight, module.reset_table())

    def resize_token_embeddings(self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None,
                                mean_resizing: bool = True) -> nn.Embedding:
        """transformers' resize, keeping `pad_vocab_to_multiple_of`: `new_num_tokens` rows rounded up to
        `pad_to_multiple_of` (default the config's), and `config.vocab_size` the real vocabulary, where transformers
        would count padded rows."""
        if isinstance(pad_to_multiple_of, int):  # a non-integer is refused by transformers, with its own message
            check_vocab_multiple(pad_to_multiple_of, "pad_to_multiple_of")
        vocab_size = new_num_tokens if new_num_tokens is not None else self.config.vocab_size
        multiple = pad_to_multiple_of if pad_to_multiple_of is not None else self.config.pad_vocab_to_multiple_of
        embeddings = super().resize_token_embeddings(vocab_size, multiple, mean_resizing)
        self.config.vocab_size = self.vocab_size = vocab_size
        self.config.pad_vocab_to_multiple_of = multiple
        return embeddings

    @classmethod
    def auto_class_name(cls) -> str:
        """The transformers Auto class this class is registered under in `auto_classes` (`"AutoModel"` if none)."""
        return next((auto for auto, name in cls.auto_classes.items() if name == cls.__name__), "AutoModel")

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Save weights, config and this family's code, with an `auto_map` entry for every head, and the Lineage
        pipelines this head serves (`custom_pipelines`; their file is copied as an import of this one)."""
        from .pipelines_lineage import custom_pipelines_for

        config_class, model_class = type(self.config), type(self)
        config_class.register_for_auto_class("AutoConfig")
        model_class.register_for_auto_class(model_class.auto_class_name())
        config_module = config_class.__module__.rsplit(".", 1)[-1]
        model_module = model_class.__module__.rsplit(".", 1)[-1]
        self.config.auto_map = {
            "AutoConfig": f"{config_module}.{config_class.__name__}",
            **{auto: f"{model_module}.{name}" for auto, name in self.auto_classes.items()},
        }
        pipelines = custom_pipelines_for(model_class.auto_class_name())
        if pipelines:
            self.config.custom_pipelines = pipelines
        return super().save_pretrained(save_directory, *args, **kwargs)


def causal_lm(model_class: type[PreTrainedModel]) -> type[PreTrainedModel]:
    """Name a causal LM head in transformers' table of causal LMs under its model type, as its own causal LMs stand
    there. `Trainer` with `label_smoothing_factor` computes the loss itself, shifting the labels only for a class it
    finds in that table (trainer.py, `compute_loss`); `register` does not add it there. Done where the class is
    defined, so that a class loaded with `trust_remote_code=True` is named too."""
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.setdefault(model_class.config_class.model_type, model_class.__name__)
    return model_class


class LineageGenerationMixin(GenerationMixin):
    """transformers' `generate()` with its settings and lengths checked before the first step, and decoding steps that
    read no value back (`checks.generating`): on an accelerator a read waits for the device, and transformers' loop
    reads once per token itself. The steps skip their checks only where `generate()` made their inputs: a given cache
    that already holds tokens (a continued generation, whose first step may be a single token of the caller's) or
    the caller's `position_ids` (counted on from the caller's values) keep every step's checks. `generation_window`
    names, in the refusals, what the config's `max_position_embeddings` bounds (a family without that field, the RNN,
    has no position table)."""

    generation_window = {"name": "input_ids", "prompt": "prompt", "window": "the context window"}

    @functools.wraps(GenerationMixin.generate)
    def generate(self, *args, **kwargs):
        assistant = kwargs.get("assistant_model")
        # transformers refuses a stateful model (its own message), not a stateful assistant
        if getattr(assistant, "_is_stateful", False) and not self._is_stateful:
            raise ValueError(
                f"assisted generation is not supported with a stateful assistant model, such as "
                f"{type(assistant).__name__}: its state cannot be cut back past a rejected draft token."
            )
        given = kwargs.get(CACHE_NAME, kwargs.get(OLD_CACHE_NAME))
        held = given.get_seq_length() if given is not None else 0  # (a static cache's length is a tensor)
        own = isinstance(held, int) and held == 0 and kwargs.get("position_ids") is None
        with generating() if own else nullcontext():
            return super().generate(*args, **kwargs)

    def prepare_inputs_for_generation(self, *args, **kwargs):
        """transformers' inputs of a decoding step, without the tokenizers `generate()` hands its decoding loop among
        the model's keywords (`stop_strings=` with `tokenizer=`, `assistant_tokenizer=`): a forward taking `**kwargs`
        drops them; Lineage's forward names what it takes and refuses the rest."""
        for name in GENERATION_TOKENIZERS:
            kwargs.pop(name, None)
        return super().prepare_inputs_for_generation(*args, **kwargs)

    # transformers' signature: `generate(inputs_embeds=...)` is served only where it names `inputs_embeds`
    prepare_inputs_for_generation.__signature__ = inspect.signature(GenerationMixin.prepare_inputs_for_generation)

    def _prepare_generation_config(self, generation_config, **kwargs):
        """transformers' merge of the generation settings, then the checks of settings it would fail on deep inside
        (`checks.check_generation_config`)."""
        generation_config, model_kwargs = super()._prepare_generation_config(generation_config, **kwargs)
        check_generation_config(generation_config)
        return generation_config, model_kwargs

    def _prepare_generated_length(self, generation_config, has_default_max_length, has_default_min_length,
                                  model_input_name, input_ids_length, inputs_tensor):
        """transformers' lengths, then a refusal, before any forward pass, of a (padded) prompt or a total length past
        the position table: the decoding steps do not check their positions. A decoder-only prompt given as
        `inputs_embeds` takes its positions too, though `input_ids` (and `max_length`) count none of it."""
        generation_config = super()._prepare_generated_length(
            generation_config=generation_config, has_default_max_length=has_default_max_length,
            has_default_min_length=has_default_min_length, model_input_name=model_input_name,
            input_ids_length=input_ids_length, inputs_tensor=inputs_tensor)
        positions = getattr(self.config, "max_position_embeddings", None)
        if positions is not None:
            window, prompt = self.generation_window, input_ids_length
            if model_input_name == "inputs_embeds" and not self.config.is_encoder_decoder:
                window, prompt = {**window, "name": "inputs_embeds"}, inputs_tensor.shape[1]
            check_generation_length(prompt, generation_config.max_length - input_ids_length + prompt, positions,
                                    **window)
        return generation_config


__all__ = ["LineageGenerationMixin", "LineagePreTrainedModel", "causal_lm"]
