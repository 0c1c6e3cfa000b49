"""The parts the families share (`losses.lm_output`, `seq2seq.Seq2SeqBase` / `Seq2SeqLMBase`, `layout.SequenceLayout`,
`checks.check_inputs`, `configuration_lineage_common.LineageBaseConfig`): what each family gains from them, checked
on the tiny presets."""

import pytest
import torch
import transformers
from conftest import preset
from transformers import masking_utils

import modeling.masks as masks
import modeling.packing as packing
from modeling import (
    LineageBertForMaskedLM,
    LineageBertForSequenceClassification,
    LineageBertModel,
    LineageGptForCausalLM,
    LineageGptForSequenceClassification,
    LineageRnnConfig,
    LineageRnnForConditionalGeneration,
    LineageTransformerForConditionalGeneration,
)
from modeling.losses import seq2seq_loss


@pytest.mark.parametrize("family, name", [(LineageBertForSequenceClassification, "bert-tiny"),
                                          (LineageGptForSequenceClassification, "gpt-tiny")])
def test_whole_number_regression_targets_reach_the_loss_as_floats_with_the_same_loss_and_gradients(family, name,
                                                                                                   monkeypatch):
    """`losses.sequence_classification_loss`: a regression head (num_labels 1) given int64 targets, as a single-class
    training set's class 0 or integer scores are, trains as with their float values; torch before 2.13 refuses int64
    targets in the mean squared error's backward, so the loss function must receive floats."""
    model = family(preset(name, num_labels=1, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                          pad_token_id=0)).train()
    input_ids = torch.randint(5, model.config.vocab_size, (4, 6))
    targets = torch.tensor([0, 3, 1, 2])
    seen = []
    loss_function = type(model).loss_function.fget(model)
    monkeypatch.setattr(type(model), "loss_function", property(lambda self: lambda labels, *rest: (
        seen.append(labels.dtype), loss_function(labels, *rest))[1]))
    losses, grads = [], []
    for labels in (targets, targets.float()):
        model.zero_grad()
        loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    assert seen == [torch.float32, torch.float32] and model.config.problem_type == "regression"
    torch.testing.assert_close(losses[0], losses[1], rtol=0, atol=0)
    for first, second in zip(*grads, strict=True):
        torch.testing.assert_close(first, second, rtol=0, atol=0)


def _seq2seq_batch(vocab: int = 99):
    input_ids = torch.randint(4, vocab, (3, 7))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 5:] = 0
    labels = torch.randint(4, vocab, (3, 5))
    labels[2, 3:] = -100
    return input_ids, attention_mask, labels


@pytest.mark.parametrize("family", [LineageRnnForConditionalGeneration, LineageTransformerForConditionalGeneration])
def test_seq2seq_training_forward_gives_the_dense_loss_and_gradients_without_logits(family):
    name = "rnn-tiny" if family is LineageRnnForConditionalGeneration else "transformer-tiny"
    chunked = family(preset(name, hidden_dropout_prob=0.0, label_smoothing=0.1)).train()
    dense = family(preset(name, hidden_dropout_prob=0.0, label_smoothing=0.1)).train()
    dense.load_state_dict(chunked.state_dict())
    input_ids, attention_mask, labels = _seq2seq_batch()
    out = chunked(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    reference = dense(input_ids=input_ids, attention_mask=attention_mask, labels=labels, return_logits=True)
    assert out.logits is None and reference.logits.shape == (3, 5, 99)
    torch.testing.assert_close(out.loss, reference.loss)
    torch.testing.assert_close(reference.loss, seq2seq_loss(reference.logits, labels, 0.1))
    out.loss.backward()
    reference.loss.backward()
    for (name, a), b in zip(dense.named_parameters(), chunked.parameters()):
        if a.grad is not None:
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-7, msg=name)


def test_rnn_pads_its_vocabulary_as_the_other_families():
    config = preset("rnn-tiny", pad_vocab_to_multiple_of=64)
    model = LineageRnnForConditionalGeneration(config).eval()
    assert config.padded_vocab_size == 128 and model.lm_head.weight.shape[0] == 128
    assert model.model.encoder.embed_tokens.num_embeddings == model.model.decoder.embed_tokens.num_embeddings == 128
    input_ids, attention_mask, labels = _seq2seq_batch()
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    assert out.logits.shape == (3, 5, 99) and torch.isfinite(out.loss)
    generated = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=4, do_sample=False)
    assert int(generated.max()) < 99
    with pytest.raises(ValueError, match=r"`pad_vocab_to_multiple_of` must be None"):
        preset("rnn-tiny", pad_vocab_to_multiple_of=0)


def test_rnn_config_runs_the_shared_checks():
    with pytest.raises(ValueError, match=r"`hidden_dropout_prob` must be in \[0, 1\)"):
        LineageRnnConfig(hidden_dropout_prob=1.0)
    with pytest.raises(ValueError, match=r"`num_encoder_layers` must be a positive integer, got True"):
        LineageRnnConfig(num_encoder_layers=True)
    with pytest.warns(UserWarning, match=r"`eos_token_id` must be None or in \[0, 10\)"):
        stored = LineageRnnConfig.from_dict({"vocab_size": 10, "eos_token_id": 50})  # a stored config keeps it
    assert stored.eos_token_id == 50
    with pytest.raises(ValueError, match=r"`pad_token_id` must be None or in \[0, 10\)"):
        LineageRnnConfig.from_dict({"vocab_size": 10, "pad_token_id": 50})  # it indexes an embedding row


def test_seq2seq_heads_report_their_own_loss_function():
    model = LineageTransformerForConditionalGeneration(preset("transformer-tiny", label_smoothing=0.1))
    logits, labels = torch.randn(2, 3, 99), torch.tensor([[1, 2, -100], [4, 5, 6]])
    torch.testing.assert_close(model.loss_function(logits, labels, vocab_size=99), seq2seq_loss(logits, labels, 0.1))


def test_bert_takes_position_ids_of_one_row_for_the_batch():
    model = LineageBertModel(preset("bert-tiny")).eval()
    input_ids = torch.randint(5, 99, (3, 6))
    positions = torch.arange(6)[None]
    one_row = model(input_ids, position_ids=positions).last_hidden_state
    per_row = model(input_ids, position_ids=positions.expand(3, -1)).last_hidden_state
    torch.testing.assert_close(one_row, per_row)
    with pytest.raises(ValueError, match=r"`position_ids` must have shape \(3 or 1, 6\)"):
        model(input_ids, position_ids=torch.arange(6)[None].expand(2, -1))


@pytest.mark.parametrize("family", [LineageGptForCausalLM, LineageBertForMaskedLM])
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_packed_rows_are_found_once_per_forward(family, implementation, monkeypatch):
    name = "gpt-tiny" if family is LineageGptForCausalLM else "bert-tiny"
    model = family(preset(name, attn_implementation=implementation)).eval()
    calls = {"lineage": 0, "transformers": 0}
    document_lengths, find_indices = packing.document_lengths, masking_utils.find_packed_sequence_indices

    def counted_lengths(*args):
        calls["lineage"] += 1
        return document_lengths(*args)

    def counted_indices(*args):
        calls["transformers"] += 1
        return find_indices(*args)

    monkeypatch.setattr(packing, "document_lengths", counted_lengths)
    monkeypatch.setattr(masks, "find_packed_sequence_indices", counted_indices)
    monkeypatch.setattr(masking_utils, "find_packed_sequence_indices", counted_indices)
    input_ids = torch.randint(5, 99, (1, 9))
    position_ids = torch.tensor([[0, 1, 2, 3, 0, 1, 0, 1, 2]])
    packed = model(input_ids, position_ids=position_ids).logits  # (1, 9, V)
    assert calls == {"lineage": 1, "transformers": 0}
    for start, end in ((0, 4), (4, 6), (6, 9)):  # each document as if alone
        alone = model(input_ids[:, start:end]).logits
        torch.testing.assert_close(packed[:, start:end], alone, atol=1e-5, rtol=1e-5)


def test_lm_heads_refuse_labels_of_another_shape_before_the_model_runs():
    model = LineageBertForMaskedLM(preset("bert-tiny"))
    with pytest.raises(ValueError, match=r"`labels` must have shape \(2, 5\)"):
        model(torch.randint(5, 99, (2, 5)), labels=torch.zeros(2, 4, dtype=torch.long))


def test_bert_output_embeddings_are_the_lm_decoder_once_for_every_head():
    config = preset("bert-tiny")
    for auto in (transformers.AutoModelForMaskedLM, transformers.AutoModelForPreTraining):
        model = auto.from_config(config)
        assert model.get_output_embeddings() is model.lm_head.decoder
    assert LineageBertModel(config).get_output_embeddings() is None
