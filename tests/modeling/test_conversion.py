"""BERT conversion: the loss and the labels carried over, the key renames, models without an equivalent refused.
The tiny references (no download) and their inputs are here; the parity of every pair, both ways, with padding, under
eager and sdpa (and BERT as a decoder over encoder memory, generation included) is test_properties.py's."""

import pytest
import torch
import transformers

from modeling import LineageBertForMaskedLM, LineageBertForPreTraining
from modeling.conversion import from_transformers, rename_keys, to_transformers


def reference_bert(name: str, implementation: str) -> torch.nn.Module:
    config = transformers.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        max_position_embeddings=64, num_labels=2 if name == "BertForQuestionAnswering" else 3,
        attn_implementation=implementation,
    )
    model = getattr(transformers, name)(config).eval()
    with torch.no_grad():  # random non-trivial LayerNorms and biases so that a swapped weight cannot hide
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.02)
    return model


def bert_inputs() -> dict[str, torch.Tensor]:
    input_ids = torch.randint(1, 99, (3, 11))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 7:] = 0
    attention_mask[2, 3:] = 0
    token_type_ids = (torch.arange(11) >= 5).long().expand(3, -1)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


def test_lineage_to_reference_keeps_logits_and_labels():
    model = LineageBertForPreTraining(transformers.AutoConfig.for_model(
        "lineage-bert", vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=64)).eval()
    inputs = bert_inputs()
    labels = torch.where(inputs["attention_mask"].bool(), inputs["input_ids"], -100)
    reference = to_transformers(model)
    ours = model(**inputs, labels=labels, next_sentence_label=torch.tensor([0, 1, 0]))
    theirs = reference(**inputs, labels=labels, next_sentence_label=torch.tensor([0, 1, 0]))
    torch.testing.assert_close(ours.prediction_logits, theirs.prediction_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.loss, theirs.loss, atol=1e-5, rtol=1e-5)


def test_classification_labels_survive_conversion():
    reference = reference_bert("BertForSequenceClassification", "sdpa")
    reference.config.id2label = {0: "entailment", 1: "neutral", 2: "contradiction"}
    reference.config.label2id = {v: k for k, v in reference.config.id2label.items()}
    lineage = from_transformers(reference)
    assert lineage.config.id2label == reference.config.id2label and lineage.config.num_labels == 3
    assert to_transformers(lineage).config.label2id == reference.config.label2id


def test_pre_norm_model_has_no_reference_equivalent():
    model = LineageBertForMaskedLM(transformers.AutoConfig.for_model(
        "lineage-bert", vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=37, norm_position="pre"))
    with pytest.raises(ValueError, match=r"`norm_position`='pre' \(BERT: 'post'\)"):
        to_transformers(model)


def test_unsupported_class_lists_the_supported_ones_once_each():
    with pytest.raises(TypeError, match="supported classes: .*BertForMaskedLM"):
        from_transformers(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="supported classes: ") as refused:
        to_transformers(torch.nn.Linear(2, 2))
    listed = str(refused.value).split("supported classes: ")[1].rstrip(".").split(", ")
    assert "LineageGptForCausalLM" in listed and len(listed) == len(set(listed))


def test_rename_keys_rejects_unknown_weights_and_round_trips():
    pairs = (("encoder.layer.{}.attention", "layers.{}.attn"), ("head", "classifier"))
    state = {"encoder.layer.10.attention.weight": torch.zeros(1), "head.bias": torch.ones(1)}
    renamed = rename_keys(state, pairs)
    assert set(renamed) == {"layers.10.attn.weight", "classifier.bias"}
    assert set(rename_keys(renamed, pairs, reverse=True)) == set(state)
    with pytest.raises(KeyError, match="No conversion rule for weight 'other.weight'"):
        rename_keys({"other.weight": torch.zeros(1)}, pairs)
    with pytest.raises(KeyError):  # a template matches whole dotted components only
        rename_keys({"headless.weight": torch.zeros(1)}, pairs)


def reference_bert_decoder(implementation: str) -> torch.nn.Module:
    config = transformers.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        max_position_embeddings=64, is_decoder=True, add_cross_attention=True, attn_implementation=implementation,
    )
    model = transformers.BertLMHeadModel(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.02)
    return model


def test_a_stored_config_still_refuses_a_pad_id_outside_the_vocabulary():
    """`pad_token_id` is the word embedding's `padding_idx`: it indexes a weight, so even a stored config refuses it."""
    stored = transformers.AutoConfig.for_model("lineage-bert", vocab_size=99).to_dict() | {"pad_token_id": 99}
    with pytest.raises(ValueError, match=r"`pad_token_id` must be None or in \[0, 99\)"):
        transformers.AutoConfig.for_model("lineage-bert").from_dict(stored)
