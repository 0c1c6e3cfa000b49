"""The BERT family: every head's shapes, losses and gradients; packed rows; Trainer; presets; BERT as a decoder (its
loss, bert2bert `EncoderDecoderModel`); bad input. Padding, causality, the cache, eager == sdpa, save/load, gradient
checkpointing, the output flags, static caches and fullgraph compilation are test_properties.py's, bad config values
test_contract.py's, over every head."""

import pytest
import torch
import transformers
from conftest import preset

from modeling import (
    LineageBertConfig,
    LineageBertForMaskedLM,
    LineageBertForMultipleChoice,
    LineageBertForNextSentencePrediction,
    LineageBertForPreTraining,
    LineageBertForQuestionAnswering,
    LineageBertForSequenceClassification,
    LineageBertForTokenClassification,
    LineageBertLMHeadModel,
    LineageBertModel,
)

BATCH, LENGTH, CHOICES = 3, 9, 2
HEADS = [
    LineageBertModel,
    LineageBertForPreTraining,
    LineageBertForMaskedLM,
    LineageBertForNextSentencePrediction,
    LineageBertForSequenceClassification,
    LineageBertForTokenClassification,
    LineageBertForQuestionAnswering,
    LineageBertForMultipleChoice,
]


def tiny_config(**overrides) -> LineageBertConfig:
    return preset("bert-tiny", **overrides)


def make_inputs(config, model_class=None, padded: bool = True) -> dict[str, torch.Tensor]:
    """Random ids (no [PAD] id), a padding mask with ragged rows, segments 0/1, and labels for `model_class`."""
    shape = (BATCH, CHOICES, LENGTH) if model_class is LineageBertForMultipleChoice else (BATCH, LENGTH)
    input_ids = torch.randint(1, config.vocab_size, shape)
    attention_mask = torch.ones(shape, dtype=torch.long)
    if padded:
        attention_mask[1, ..., 6:] = 0
        attention_mask[-1, ..., 4:] = 0
    token_type_ids = torch.zeros(shape, dtype=torch.long)
    token_type_ids[..., LENGTH // 2:] = 1
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
    inputs.update(make_labels(config, model_class, input_ids))
    return inputs


def make_labels(config, model_class, input_ids) -> dict[str, torch.Tensor]:
    batch = input_ids.shape[0]
    mlm_labels = torch.where(torch.rand(input_ids.shape) < 0.3, input_ids, torch.full_like(input_ids, -100))
    return {
        LineageBertModel: {},
        LineageBertForPreTraining: {"labels": mlm_labels, "next_sentence_label": torch.randint(0, 2, (batch,))},
        LineageBertForMaskedLM: {"labels": mlm_labels},
        LineageBertForNextSentencePrediction: {"labels": torch.randint(0, 2, (batch,))},
        LineageBertForSequenceClassification: {"labels": torch.randint(0, config.num_labels, (batch,))},
        LineageBertForTokenClassification: {"labels": torch.randint(0, config.num_labels, input_ids.shape)},
        LineageBertForQuestionAnswering: {
            "start_positions": torch.randint(0, LENGTH, (batch,)),
            "end_positions": torch.randint(0, LENGTH, (batch,)),
        },
        LineageBertForMultipleChoice: {"labels": torch.randint(0, CHOICES, (batch,))},
        None: {},
    }[model_class]


def output_tensors(outputs) -> dict[str, torch.Tensor]:
    return {k: v for k, v in outputs.items() if torch.is_tensor(v) and k != "loss" and not k.endswith("_loss")}


EXPECTED_SHAPES = {
    LineageBertModel: {"last_hidden_state": (BATCH, LENGTH, 32), "pooler_output": (BATCH, 32)},
    LineageBertForPreTraining: {"prediction_logits": (BATCH, LENGTH, 99), "seq_relationship_logits": (BATCH, 2)},
    LineageBertForMaskedLM: {"logits": (BATCH, LENGTH, 99)},
    LineageBertForNextSentencePrediction: {"logits": (BATCH, 2)},
    LineageBertForSequenceClassification: {"logits": (BATCH, 2)},
    LineageBertForTokenClassification: {"logits": (BATCH, LENGTH, 2)},
    LineageBertForQuestionAnswering: {"start_logits": (BATCH, LENGTH), "end_logits": (BATCH, LENGTH)},
    LineageBertForMultipleChoice: {"logits": (BATCH, CHOICES)},
}


@pytest.mark.parametrize("model_class", HEADS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_shapes_loss_and_backward(model_class, norm_position):
    config = tiny_config(norm_position=norm_position)
    model = model_class(config)
    # a training forward with labels skips the MLM logits (test_lm_loss.py); ask for them to check their shape
    wants_logits = {"return_logits": True} if model_class in (LineageBertForPreTraining, LineageBertForMaskedLM) else {}
    outputs = model(**make_inputs(config, model_class), **wants_logits)
    assert {k: tuple(v.shape) for k, v in output_tensors(outputs).items()} == EXPECTED_SHAPES[model_class]
    if model_class is LineageBertModel:
        loss = outputs.last_hidden_state.pow(2).mean() + outputs.pooler_output.pow(2).mean()
    else:
        loss = outputs.loss
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []


def test_pretraining_loss_is_sum_of_mlm_and_nsp():
    config = tiny_config()
    model = LineageBertForPreTraining(config).eval()
    inputs = make_inputs(config, LineageBertForPreTraining)
    both = model(**inputs)
    mlm_only = model(**{k: v for k, v in inputs.items() if k != "next_sentence_label"})
    nsp_only = model(**{k: v for k, v in inputs.items() if k != "labels"})
    torch.testing.assert_close(both.loss, mlm_only.loss + nsp_only.loss)
    torch.testing.assert_close(both.mlm_loss, mlm_only.loss)
    torch.testing.assert_close(both.nsp_loss, nsp_only.loss)
    expected_mlm = torch.nn.functional.cross_entropy(both.prediction_logits.flatten(0, 1), inputs["labels"].flatten())
    torch.testing.assert_close(both.mlm_loss, expected_mlm)


def test_regression_and_multi_label_classification():
    regression = LineageBertForSequenceClassification(tiny_config(num_labels=1)).eval()
    inputs = make_inputs(regression.config)
    targets = torch.randn(BATCH)
    outputs = regression(**inputs, labels=targets)
    torch.testing.assert_close(outputs.loss, torch.nn.functional.mse_loss(outputs.logits.squeeze(-1), targets))
    multi = LineageBertForSequenceClassification(tiny_config(num_labels=3, problem_type="multi_label_classification"))
    targets = torch.randint(0, 2, (BATCH, 3)).float()
    outputs = multi.eval()(**inputs, labels=targets)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(outputs.logits, targets)
    torch.testing.assert_close(outputs.loss, expected)


def test_masked_lm_decoder_is_tied_with_its_own_bias():
    model = LineageBertForMaskedLM(tiny_config())
    assert model.lm_head.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert model.lm_head.decoder.bias.shape == (99,)
    model.resize_token_embeddings(120)
    assert model.lm_head.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert model.lm_head.decoder.weight.shape == (120, 32) and model.lm_head.decoder.bias.shape == (120,)


def test_trainer_step_on_sequence_classification(tmp_path):
    config = tiny_config(num_labels=3)
    model = LineageBertForSequenceClassification(config)
    rows = [make_inputs(config, LineageBertForSequenceClassification) for _ in range(2)]
    dataset = [{k: v[i] for k, v in row.items()} for row in rows for i in range(BATCH)]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=3, max_steps=2, gradient_accumulation_steps=1,
        learning_rate=1e-3, report_to=[], save_strategy="no", logging_steps=1, use_cpu=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=dataset)
    result = trainer.train()
    assert torch.isfinite(torch.tensor(result.training_loss))
    changed = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert "classifier.weight" in changed and any(n.startswith("bert.encoder") for n in changed)


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())  # tied tensors are yielded once


@pytest.mark.parametrize("name, paper", [("bert-base", 110e6), ("bert-large", 340e6)])
def test_preset_parameter_counts_match_the_paper_and_the_reference(name, paper):
    """Paper: 110M / 340M. transformers' BertForPreTraining at the same shape counts 110.1M / 336.2M (its
    BertModel alone: 109.5M / 335.1M); Lineage must count exactly the same."""
    config = preset(name)
    with torch.device("meta"):
        lineage = LineageBertForPreTraining(config)
        reference = transformers.BertForPreTraining(transformers.BertConfig(**{
            k: getattr(config, k) for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                            "intermediate_size", "max_position_embeddings", "type_vocab_size")
        }))
    count = count_parameters(lineage)
    assert abs(count - paper) / paper < 0.02, count
    assert count == count_parameters(reference)


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("bad_id, fragment", [(-1, "got -1"), (99, "got 99")])
def test_input_ids_out_of_range(bad_id, fragment):
    model = LineageBertModel(tiny_config())
    input_ids = torch.randint(1, 99, (2, 5))
    input_ids[1, 2] = bad_id
    with pytest.raises(ValueError, match=r"`input_ids` must be in \[0, 99\)") as error:
        model(input_ids)
    assert fragment in str(error.value)


def test_sequence_longer_than_position_table():
    model = LineageBertModel(tiny_config())
    with pytest.raises(ValueError, match="has 65 positions but `max_position_embeddings` is 64"):
        model(torch.randint(1, 99, (1, 65)))


def test_token_type_ids_out_of_range():
    model = LineageBertModel(tiny_config())
    input_ids = torch.randint(1, 99, (2, 5))
    with pytest.raises(ValueError, match=r"`token_type_ids` must be in \[0, 2\) \(type_vocab_size=2\), got 2"):
        model(input_ids, token_type_ids=torch.full_like(input_ids, 2))


def test_attention_mask_shape_mismatch():
    model = LineageBertModel(tiny_config())
    with pytest.raises(ValueError, match=r"`attention_mask` must have the shape of `input_ids` \(2, 5\), got \(2, 4\)"):
        model(torch.randint(1, 99, (2, 5)), attention_mask=torch.ones(2, 4, dtype=torch.long))


@pytest.mark.parametrize("model_class, labels, fragment", [
    (LineageBertForMaskedLM, {"labels": torch.zeros(2, 4, dtype=torch.long)}, r"`labels` must have shape \(2, 5\)"),
    (LineageBertForTokenClassification, {"labels": torch.zeros(2, dtype=torch.long)},
     r"`labels` must have shape \(2, 5\)"),
    (LineageBertForSequenceClassification, {"labels": torch.zeros(3, dtype=torch.long)},
     r"`labels` must have shape \(2,\)"),
    (LineageBertForPreTraining, {"next_sentence_label": torch.zeros(2, 1, dtype=torch.long)},
     r"`next_sentence_label` must have shape \(2,\)"),
    (LineageBertForQuestionAnswering, {"start_positions": torch.zeros(3, dtype=torch.long),
                                       "end_positions": torch.zeros(3, dtype=torch.long)},
     r"`start_positions` must have shape \(2,\)"),
])
def test_labels_shape_mismatch(model_class, labels, fragment):
    model = model_class(tiny_config())
    with pytest.raises(ValueError, match=fragment):
        model(torch.randint(1, 99, (2, 5)), **labels)


# ---------------------------------------------------------------------------------------------- packed rows


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_packed_rows_longer_than_the_position_table_equal_each_sequence_alone(implementation):
    """Packed (padding-free) rows, as `DataCollatorWithFlattening` makes: `position_ids` restart at each sequence and
    no `attention_mask` is given; each sequence attends to itself only."""
    model = LineageBertModel(tiny_config(attn_implementation=implementation)).eval()
    lengths = (40, 30, 20)  # 90 tokens in one row; max_position_embeddings is 64
    sequences = [torch.randint(1, 99, (1, n)) for n in lengths]
    positions = torch.cat([torch.arange(n) for n in lengths])[None]  # (1, 90)
    packed = model(torch.cat(sequences, dim=1), position_ids=positions).last_hidden_state
    for sequence, span in zip(sequences, torch.arange(90).split(lengths)):
        torch.testing.assert_close(packed[:, span], model(sequence).last_hidden_state, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"`position_ids` must be in \[0, 64\)"):
        model(torch.cat(sequences, dim=1), position_ids=torch.arange(90)[None])


# ---------------------------------------------------------------------------------------------- BERT as a decoder


def decoder_config(**overrides) -> LineageBertConfig:
    fields = dict(is_decoder=True, add_cross_attention=True, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return tiny_config(**{**fields, **overrides})


def test_lm_head_loss_is_next_token_cross_entropy_and_registered_for_causal_lm():
    model = transformers.AutoModelForCausalLM.from_config(decoder_config(add_cross_attention=False))
    assert type(model) is LineageBertLMHeadModel
    assert model.lm_head.decoder.weight is model.bert.embeddings.word_embeddings.weight
    ids = torch.randint(1, 99, (2, 6))
    out = model(ids, labels=ids, return_logits=True)
    expected = torch.nn.functional.cross_entropy(out.logits[:, :-1].reshape(-1, 99), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, expected)
    generated = model.generate(ids[:, :3], max_new_tokens=4, do_sample=False)
    assert generated.shape == (2, 7) and torch.equal(generated[:, :3], ids[:, :3])


def test_the_lm_heads_generate_refuses_a_length_past_the_positions_before_any_module_runs():
    """Its decoding steps check no position (`checks.decoding_step`): the length is refused before the first one."""
    model = transformers.AutoModelForCausalLM.from_config(decoder_config(add_cross_attention=False))
    ran = []
    hooks = [m.register_forward_pre_hook(lambda *_: ran.append(1)) for m in model.modules()]
    with pytest.raises(ValueError, match=r"`max_new_tokens` must be in \[1, 54\]"):
        model.generate(torch.randint(1, 99, (1, 10)), max_new_tokens=60, do_sample=False)
    for hook in hooks:
        hook.remove()
    assert not ran
    assert model.generate(torch.randint(1, 99, (1, 10)), max_new_tokens=54, do_sample=False).shape == (1, 64)


def bert2bert() -> transformers.EncoderDecoderModel:
    encoder = LineageBertModel(tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
                               add_pooling_layer=False)
    model = transformers.EncoderDecoderModel(encoder=encoder, decoder=LineageBertLMHeadModel(decoder_config()))
    model.config.decoder_start_token_id, model.config.pad_token_id = 2, 0
    return model


@pytest.mark.filterwarnings("ignore:Version v4.12.0 introduces:FutureWarning")  # EncoderDecoderModel's own loss
def test_bert2bert_encoder_decoder_trains_and_generates(tmp_path):
    model = bert2bert()
    source, target = torch.randint(5, 99, (2, 7)), torch.randint(5, 99, (2, 5))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    model.train()
    for _ in range(25):
        loss = model(input_ids=source, labels=target).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.25 * losses[0], losses
    model.eval()
    kwargs = dict(max_new_tokens=5, do_sample=False, decoder_start_token_id=2)
    generated = model.generate(source, **kwargs)
    assert torch.equal(generated[:, 1:], target)  # the memorised targets, decoded with the cache
    assert torch.equal(model.generate(source, use_cache=False, **kwargs), generated)
    assert torch.equal(model.generate(source, num_beams=3, **kwargs), generated)
    model.save_pretrained(tmp_path)
    loaded = transformers.EncoderDecoderModel.from_pretrained(tmp_path).eval()
    assert type(loaded.decoder) is LineageBertLMHeadModel
    assert torch.equal(loaded.generate(source, **kwargs), generated)


def test_decoder_config_and_inputs_are_checked():
    with pytest.raises(ValueError, match="`add_cross_attention=True` needs `is_decoder=True`"):
        tiny_config(add_cross_attention=True)
    with pytest.raises(ValueError, match="`encoder_hidden_states` need a model built with"):
        LineageBertModel(tiny_config())(torch.randint(1, 99, (2, 5)), encoder_hidden_states=torch.randn(2, 3, 32))
    model = LineageBertModel(decoder_config())
    with pytest.raises(ValueError, match=r"`encoder_attention_mask` must have the shape of `encoder_hidden_states`"):
        model(torch.randint(1, 99, (2, 5)), encoder_hidden_states=torch.randn(2, 3, 32),
              encoder_attention_mask=torch.ones(2, 4))
