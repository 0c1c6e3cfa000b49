"""transformers' own common model tests (`ModelTesterMixin`, the suite every model in transformers passes: save/load,
tied weights, initialisation, eager = SDPA, gradient checkpointing, resizing the vocabulary, `inputs_embeds`, the
cache's old keyword, attention masks, outputs as tuples and dicts, ...) run on every Lineage family.

The suite ships in the sdist of the installed transformers release, not in its wheel: `bash tools/transformers_tests.sh`
downloads it and runs this module with `LINEAGE_TRANSFORMERS_TESTS` naming its `tests/` folder (CI does, under the
newest releases). Without that folder the module is skipped. The sdist holds no generation tests (`generate()` is
covered by Lineage's own family, property and pipeline tests), so its `GenerationTesterMixin` is an empty stand-in.
"""

import contextlib
import importlib
import os
import sys
import types
import unittest
from pathlib import Path
from unittest import mock

import pytest
import test_contract as contract
import torch
import transformers
from transformers.models.auto import modeling_auto

from modeling import (
    LineageBertConfig,
    LineageBertForPreTraining,
    LineageBertLMHeadModel,
    LineageGptConfig,
    LineageRnnConfig,
    LineageRnnModel,
    LineageTransformerConfig,
)

SUITE = os.environ.get("LINEAGE_TRANSFORMERS_TESTS")
if not SUITE:
    pytest.skip("transformers' common tests: run `bash tools/transformers_tests.sh` (it downloads them)",
                allow_module_level=True)
if not (Path(SUITE) / "test_modeling_common.py").is_file():
    raise FileNotFoundError(f"LINEAGE_TRANSFORMERS_TESTS={SUITE!r} holds no test_modeling_common.py: name the "
                            f"`tests/` folder of an unpacked transformers sdist (tools/transformers_tests.sh).")


def _import_suite(folder: str):
    """transformers' `tests/` as the package `transformers_tests`, with stand-ins for the two mixins the sdist leaves
    out (generation and export tests), which `test_modeling_common` imports and inherits."""
    stand_ins = {"generation.test_utils": "GenerationTesterMixin", "exporters.test_export": "ExportTesterMixin"}
    package = types.ModuleType("transformers_tests")
    package.__path__ = [folder]
    sys.modules["transformers_tests"] = package
    for module_name, class_name in stand_ins.items():
        parent, _ = module_name.split(".")
        sys.modules.setdefault(f"transformers_tests.{parent}", types.ModuleType(f"transformers_tests.{parent}"))
        stand_in = types.ModuleType(f"transformers_tests.{module_name}")
        setattr(stand_in, class_name, type(class_name, (), {}))
        sys.modules[f"transformers_tests.{module_name}"] = stand_in
    return importlib.import_module("transformers_tests.test_modeling_common")


common = _import_suite(SUITE)

# The suite finds a class's task by its name in transformers' tables of built-in models (to give it labels, to skip a
# base model in a training test); while it runs, each Lineage class stands in those tables under its model type.
_TASK_TABLES = {
    "AutoModel": "MODEL_MAPPING_NAMES",
    "AutoModelForPreTraining": "MODEL_FOR_PRETRAINING_MAPPING_NAMES",
    "AutoModelForMaskedLM": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "AutoModelForCausalLM": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "AutoModelForSeq2SeqLM": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "AutoModelForSequenceClassification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "AutoModelForTokenClassification": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "AutoModelForQuestionAnswering": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "AutoModelForMultipleChoice": "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES",
    "AutoModelForNextSentencePrediction": "MODEL_FOR_NEXT_SENTENCE_PREDICTION_MAPPING_NAMES",
}


@pytest.fixture(autouse=True, scope="module")
def _lineage_in_the_task_tables():
    with contextlib.ExitStack() as stack:
        for auto_name, table_name in _TASK_TABLES.items():
            registered = getattr(transformers, auto_name)._model_mapping._extra_content
            entries = {config.model_type: model.__name__ for config, model in registered.items()
                       if model.__module__.startswith("modeling.")}
            stack.enter_context(mock.patch.dict(getattr(modeling_auto, table_name), entries))
        yield


class SmallFamily:
    """What the suite asks of a family: a small config and the inputs of a forward (ids, a padding mask, the decoder's
    ids for a translator, segments for BERT), and the sizes it checks the outputs against."""

    batch_size, seq_length, vocab_size = 3, 7, 99
    hidden_size, num_hidden_layers, num_attention_heads, intermediate_size = 32, 2, 4, 37
    num_labels, num_choices, type_sequence_label_size = 3, 4, 2
    is_training = True

    def __init__(self, parent, config_class, *, segments=False, right_padded=False, **fields):
        self.parent, self.config_class, self.fields = parent, config_class, fields
        self.segments, self.right_padded = segments, right_padded
        self.encoder_seq_length = self.decoder_seq_length = self.key_length = self.seq_length
        if config_class is LineageRnnConfig:  # one recurrent layer each side: its hidden states, embeddings included
            self.num_hidden_layers = 1

    def get_config(self):
        if self.config_class is LineageRnnConfig:
            sizes = dict(embedding_size=self.hidden_size, hidden_size=self.hidden_size)
        else:
            sizes = dict(hidden_size=self.hidden_size, num_hidden_layers=self.num_hidden_layers,
                         num_attention_heads=self.num_attention_heads, intermediate_size=self.intermediate_size,
                         max_position_embeddings=64)
        return self.config_class(vocab_size=self.vocab_size, **sizes, **self.fields)

    def prepare_config_and_inputs_for_common(self):
        config = self.get_config()
        shape = [self.batch_size, self.seq_length]
        if self.right_padded:  # the RNN packs its rows: real tokens, then padding
            lengths = torch.randint(1, self.seq_length + 1, (self.batch_size,))
            lengths[0] = self.seq_length
            attention_mask = (torch.arange(self.seq_length) < lengths[:, None]).long()
        else:
            attention_mask = common.random_attention_mask(shape)
        inputs = {"input_ids": common.ids_tensor(shape, self.vocab_size - 3) + 3, "attention_mask": attention_mask}
        if config.is_encoder_decoder:
            inputs["decoder_input_ids"] = common.ids_tensor(shape, self.vocab_size - 3) + 3
            inputs["decoder_attention_mask"] = torch.ones(shape, dtype=torch.long)
        if self.segments:
            inputs["token_type_ids"] = common.ids_tensor(shape, 2)
        return config, inputs


class _LineageCommonTests(common.ModelTesterMixin):
    @unittest.skip("the sdist holds no generation tests to inherit (Lineage's own tests cover generate())")
    def test_generation_tester_mixin_inheritance(self):
        pass


def heads(family: str) -> tuple:
    """Every class a family registers with the Auto classes (BERT as a decoder apart: it needs `is_decoder`)."""
    return tuple(c for c in contract.HEADS if contract.family(c) == family and c is not LineageBertLMHeadModel)


class GptCommonTest(_LineageCommonTests, unittest.TestCase):
    all_model_classes = heads("Gpt")

    def setUp(self):
        self.model_tester = SmallFamily(self, LineageGptConfig, pad_token_id=0)


class BertCommonTest(_LineageCommonTests, unittest.TestCase):
    all_model_classes = heads("Bert")

    def setUp(self):
        self.model_tester = SmallFamily(self, LineageBertConfig, segments=True)

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        """The pre-training head's loss takes both of its labels (as `BertForPreTraining`'s does)."""
        inputs = super()._prepare_for_class(inputs_dict, model_class, return_labels)
        if return_labels and model_class is LineageBertForPreTraining:
            inputs["labels"] = torch.zeros_like(inputs["input_ids"])
            inputs["next_sentence_label"] = torch.zeros(self.model_tester.batch_size, dtype=torch.long)
        return inputs


class BertDecoderCommonTest(_LineageCommonTests, unittest.TestCase):
    all_model_classes = (LineageBertLMHeadModel,)

    def setUp(self):
        self.model_tester = SmallFamily(self, LineageBertConfig, segments=True, is_decoder=True)


class TransformerCommonTest(_LineageCommonTests, unittest.TestCase):
    all_model_classes = heads("Transformer")
    is_encoder_decoder = True

    def setUp(self):
        self.model_tester = SmallFamily(self, LineageTransformerConfig)


class RnnCommonTest(_LineageCommonTests, unittest.TestCase):
    all_model_classes = heads("Rnn")
    is_encoder_decoder = True
    has_attentions = False

    def setUp(self):
        self.model_tester = SmallFamily(self, LineageRnnConfig, right_padded=True)

    def test_inputs_embeds_matches_input_ids(self):
        """The suite embeds the target with the source's table (one table in transformers' translators); the RNN
        encoder-decoder has a table each side (`tie_word_embeddings=False`), so each side embeds with its own."""
        config, inputs_dict = self.model_tester.prepare_config_and_inputs_for_common()
        model = LineageRnnModel(config).eval()
        inputs = dict(inputs_dict)
        input_ids, decoder_input_ids = inputs.pop("input_ids"), inputs.pop("decoder_input_ids")
        with torch.no_grad():
            from_ids = model(input_ids=input_ids, decoder_input_ids=decoder_input_ids, **inputs)[0]
            from_embeds = model(inputs_embeds=model.get_input_embeddings()(input_ids),
                                decoder_inputs_embeds=model.get_decoder().embed_tokens(decoder_input_ids), **inputs)[0]
        torch.testing.assert_close(from_embeds, from_ids)
