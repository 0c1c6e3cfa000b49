"""Lineage: from-scratch, Hugging Face-compatible implementations of the classic attention architectures. Importing it
registers every family with `AutoConfig` and the `AutoModel*` classes; saved folders also carry their code.
"""

import transformers

from . import (
    modeling_lineage_bert,
    modeling_lineage_gpt,
    modeling_lineage_rnn,
    modeling_lineage_transformer,
)
from .configuration_lineage_bert import LineageBertConfig
from .configuration_lineage_gpt import LineageGptConfig
from .configuration_lineage_rnn import LineageRnnConfig
from .configuration_lineage_transformer import LineageTransformerConfig
from .modeling_lineage_bert import (
    LineageBertForMaskedLM,
    LineageBertForMultipleChoice,
    LineageBertForNextSentencePrediction,
    LineageBertForPreTraining,
    LineageBertForQuestionAnswering,
    LineageBertForSequenceClassification,
    LineageBertForTokenClassification,
    LineageBertLMHeadModel,
    LineageBertModel,
    LineageBertPreTrainedModel,
)
from .modeling_lineage_gpt import (
    LineageGptForCausalLM,
    LineageGptForMultipleChoice,
    LineageGptForSequenceClassification,
    LineageGptModel,
    LineageGptPreTrainedModel,
)
from .modeling_lineage_rnn import (
    LineageRnnForConditionalGeneration,
    LineageRnnModel,
    LineageRnnPreTrainedModel,
)
from .modeling_lineage_transformer import (
    LineageTransformerForConditionalGeneration,
    LineageTransformerModel,
    LineageTransformerPreTrainedModel,
)

_FAMILIES = (
    (LineageBertConfig, LineageBertPreTrainedModel, modeling_lineage_bert),
    (LineageTransformerConfig, LineageTransformerPreTrainedModel, modeling_lineage_transformer),
    (LineageGptConfig, LineageGptPreTrainedModel, modeling_lineage_gpt),
    (LineageRnnConfig, LineageRnnPreTrainedModel, modeling_lineage_rnn),
)


def _register(config_class, pretrained_class, module) -> None:
    transformers.AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    for auto_name, class_name in pretrained_class.auto_classes.items():
        getattr(transformers, auto_name).register(config_class, getattr(module, class_name), exist_ok=True)


for _family in _FAMILIES:
    _register(*_family)

# peft's default LoRA targets for the families built from `LineageBlock`: every attention and feed-forward
# projection (the LoRA paper adapted W_q and W_v; adapting all of them fine-tunes better at the same rank)
LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "gate_proj", "down_proj")


def _register_lora_targets(model_types: tuple[str, ...]) -> None:
    """Let `peft.get_peft_model(model, LoraConfig(...))` find the targets without `target_modules` (peft looks them
    up by `config.model_type`); nothing happens when peft is not installed."""
    try:
        from peft.utils.constants import (
            TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING,
        )
    except ImportError:
        return
    for model_type in model_types:
        TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.setdefault(model_type, list(LORA_TARGET_MODULES))


_register_lora_targets((LineageBertConfig.model_type, LineageGptConfig.model_type, LineageTransformerConfig.model_type))

__all__ = [
    "LineageBertConfig",
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
    "LineageGptConfig",
    "LineageGptForCausalLM",
    "LineageGptForMultipleChoice",
    "LineageGptForSequenceClassification",
    "LineageGptModel",
    "LineageGptPreTrainedModel",
    "LineageRnnConfig",
    "LineageRnnForConditionalGeneration",
    "LineageRnnModel",
    "LineageRnnPreTrainedModel",
    "LineageTransformerConfig",
    "LineageTransformerForConditionalGeneration",
    "LineageTransformerModel",
    "LineageTransformerPreTrainedModel",
]
