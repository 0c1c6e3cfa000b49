"""BERT conversion: random transformers reference models (no download) convert to Lineage and back with the same
logits, with padding, under eager and sdpa; unsupported models fail clearly."""

import pytest
import torch
import transformers

from modeling import LineageBertForMaskedLM, LineageBertForPreTraining
from modeling.conversion import from_transformers, rename_keys, to_transformers

BERT_CLASSES = ["BertModel", "BertForPreTraining", "BertForMaskedLM", "BertForSequenceClassification",
                "BertForTokenClassification", "BertForQuestionAnswering"]


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


def assert_same_outputs(actual, expected, atol=1e-5):
    keys = [k for k, v in expected.items() if torch.is_tensor(v)]
    assert keys
    for key in keys:
        torch.testing.assert_close(actual[key], expected[key], atol=atol, rtol=1e-5, msg=key)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("name", BERT_CLASSES)
def test_bert_round_trip_keeps_logits(name, implementation):
    reference = reference_bert(name, implementation)
    inputs = bert_inputs()
    lineage = from_transformers(reference)
    assert type(lineage).__name__ == "Lineage" + name
    assert lineage.config._attn_implementation == implementation
    expected = reference(**inputs)
    assert_same_outputs(lineage(**inputs), expected)
    back = to_transformers(lineage)
    assert type(back) is type(reference)
    assert_same_outputs(back(**inputs), expected)
    reference_state, back_state = reference.state_dict(), back.state_dict()
    assert reference_state.keys() == back_state.keys()
    assert all(torch.equal(reference_state[k], back_state[k]) for k in reference_state)


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
    with pytest.raises(ValueError, match="norm_position='pre'"):
        to_transformers(model)


def test_unsupported_class_lists_the_supported_ones():
    with pytest.raises(TypeError, match="supported classes: .*BertForMaskedLM"):
        from_transformers(torch.nn.Linear(2, 2))


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


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_bert_decoder_with_cross_attention_round_trip_keeps_logits_and_generation(implementation, exact_linear):
    reference = reference_bert_decoder(implementation)
    lineage = from_transformers(reference)
    assert type(lineage).__name__ == "LineageBertLMHeadModel"
    assert lineage.config.is_decoder and lineage.config.add_cross_attention
    inputs = bert_inputs()
    memory = {"encoder_hidden_states": torch.randn(3, 6, 32), "encoder_attention_mask": torch.ones(3, 6)}
    memory["encoder_attention_mask"][1, 4:] = 0
    expected = reference(**inputs, **memory)
    keep = inputs["attention_mask"].bool()  # padding positions mean nothing
    torch.testing.assert_close(lineage(**inputs, **memory).logits[keep], expected.logits[keep], atol=1e-5, rtol=1e-5)
    back = to_transformers(lineage)
    assert type(back) is transformers.BertLMHeadModel
    torch.testing.assert_close(back(**inputs, **memory).logits, expected.logits, atol=1e-5, rtol=1e-5)
    generated = lineage.generate(inputs["input_ids"][:, :4], **memory, max_new_tokens=5, do_sample=False)
    decoded = inputs["input_ids"][:, :4]  # the reference's greedy choice, recomputed over the whole prefix each step
    for _ in range(5):  # (its own generate() cannot: it gives its cross attention a decoder-only cache)
        next_token = reference(decoded, **memory).logits[:, -1].argmax(-1, keepdim=True)
        decoded = torch.cat([decoded, next_token], dim=1)
    assert torch.equal(generated, decoded)


def test_a_stored_config_still_refuses_a_pad_id_outside_the_vocabulary():
    """`pad_token_id` is the word embedding's `padding_idx`: it indexes a weight, so even a stored config refuses it."""
    stored = transformers.AutoConfig.for_model("lineage-bert", vocab_size=99).to_dict() | {"pad_token_id": 99}
    with pytest.raises(ValueError, match=r"`pad_token_id` must be None or in \[0, 99\)"):
        transformers.AutoConfig.for_model("lineage-bert").from_dict(stored)
