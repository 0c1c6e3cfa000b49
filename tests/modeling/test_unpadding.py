"""BERT unpadding (`unpad_inputs`, MosaicBERT): the padding is removed before the encoder stack and restored at the
output. Every head gives the padded path's outputs at real positions (fp32, 1e-5), and its loss and gradients;
the encoder runs on the real tokens only; calls the unpadded path cannot serve take the padded one; the training
scripts switch it on for a GPU only. The collators' `packed_sequences` give either path what it would read back from
the device (the real tokens, whether there is padding), with the same outputs."""

import pytest
import torch
from conftest import preset
from host_reads import HostReads
from transformers import AutoModel

from modeling import (
    LineageBertForMaskedLM,
    LineageBertForMultipleChoice,
    LineageBertForPreTraining,
    LineageBertForQuestionAnswering,
    LineageBertForSequenceClassification,
    LineageBertForTokenClassification,
    LineageBertModel,
)
from modeling.checks import value_checks
from modeling.conversion import to_transformers
from modeling.packing import PackedSequences
from train.run.engine import training_options

HEADS = (LineageBertModel, LineageBertForPreTraining, LineageBertForMaskedLM, LineageBertForSequenceClassification,
         LineageBertForTokenClassification, LineageBertForQuestionAnswering)


def build(model_class, attn: str = "sdpa", **overrides):
    config = preset("bert-tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **overrides)
    config._attn_implementation = attn
    return model_class(config)


def batch(side: str = "right") -> dict[str, torch.Tensor]:
    """Rows of 13, 9, 4 and 1 real tokens in a (4, 13) batch, two segments each."""
    lengths = (13, 9, 4, 1)
    input_ids = torch.randint(5, 99, (4, 13))
    attention_mask = torch.zeros(4, 13, dtype=torch.long)
    for row, n in enumerate(lengths):
        attention_mask[row, :n] = 1
    if side == "left":
        attention_mask = attention_mask.flip(-1)
    token_type_ids = (torch.arange(13) >= 6).long().expand(4, 13) * attention_mask
    return {"input_ids": input_ids.masked_fill(attention_mask == 0, 0), "attention_mask": attention_mask,
            "token_type_ids": token_type_ids}


def run(model, inputs: dict, unpad: bool):
    return model(**inputs, unpad_inputs=unpad)


def real_positions(value: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token outputs at the real tokens; per-row outputs (read from position 0 by the pooler) of the rows whose
    position 0 is a real token (under left padding the padded path pools a pad token's state)."""
    return value[mask.bool()] if value.shape[:2] == mask.shape else value[mask[:, 0].bool()]


@pytest.mark.parametrize("model_class", HEADS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("norm", ("post", "pre"))
@pytest.mark.parametrize("side", ("right", "left"))
def test_unpadded_outputs_equal_the_padded_path_at_real_positions(model_class, norm, side):
    model = build(model_class, norm_position=norm).eval()
    inputs = batch(side)
    padded, unpadded = run(model, inputs, False), run(model, inputs, True)
    compared = 0
    for name, value in padded.items():
        if isinstance(value, torch.Tensor) and value.dim() >= 2:
            expected = real_positions(value, inputs["attention_mask"])
            actual = real_positions(unpadded[name], inputs["attention_mask"])
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, msg=name)
            compared += 1
    assert compared >= 1


def test_padded_positions_of_the_last_hidden_state_are_zero():
    model = build(LineageBertModel).eval()
    inputs = batch()
    hidden = run(model, inputs, True).last_hidden_state
    padding = inputs["attention_mask"] == 0
    assert torch.equal(hidden[padding], torch.zeros_like(hidden[padding]))
    assert hidden[~padding].abs().sum(-1).min() > 0


def test_multiple_choice_unpadded_equals_padded():
    model = build(LineageBertForMultipleChoice).eval()
    inputs = {k: v.view(2, 2, 13) for k, v in batch().items()}
    torch.testing.assert_close(run(model, inputs, True).logits, run(model, inputs, False).logits, rtol=1e-5, atol=1e-5)


def answer_positions() -> dict[str, torch.Tensor]:
    """Start and end positions of `batch()`'s rows, one beyond the sequence (ignored, as transformers' BERT does)."""
    return {"start_positions": torch.tensor([3, 2, 1, 0]), "end_positions": torch.tensor([5, 20, 3, 0])}


@pytest.mark.parametrize("model_class", (LineageBertForPreTraining, LineageBertForSequenceClassification,
                                         LineageBertForTokenClassification, LineageBertForQuestionAnswering),
                         ids=lambda c: c.__name__)
def test_unpadded_training_gives_the_padded_loss_and_gradients(model_class):
    """Question answering's softmax spans the padded positions too: given positions, it takes the padded path."""
    model = build(model_class).train()
    inputs = batch()
    if model_class is LineageBertForQuestionAnswering:
        inputs.update(answer_positions())
    elif model_class is LineageBertForPreTraining:
        labels = torch.full((4, 13), -100)
        labels[:, 0] = inputs["input_ids"][:, 0]
        labels[0, 9], labels[1, 5] = 7, 8
        inputs.update(labels=labels, next_sentence_label=torch.tensor([0, 1, 1, 0]))
    elif model_class is LineageBertForSequenceClassification:
        inputs["labels"] = torch.tensor([0, 1, 1, 0])
    else:
        inputs["labels"] = torch.randint(0, 2, (4, 13)).masked_fill(inputs["attention_mask"] == 0, -100)
    losses, gradients = [], []
    for unpad in (False, True):
        model.zero_grad()
        loss = run(model, inputs, unpad).loss
        loss.backward()
        losses.append(loss.detach())
        gradients.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    assert gradients[0].keys() == gradients[1].keys()
    for name in gradients[0]:
        torch.testing.assert_close(gradients[1][name], gradients[0][name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("side", ("right", "left"))
def test_question_answering_loss_is_the_references_with_or_without_unpadding(side):
    """transformers' BertForQuestionAnswering under copied weights: the same loss for a padded batch (a position
    beyond the sequence ignored) through either path; the encoder runs unpadded only where no loss is asked for."""
    model = build(LineageBertForQuestionAnswering).eval()
    with torch.no_grad():  # off the initial values, so that the padding positions' logits differ from the bias
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    reference = to_transformers(model).eval()
    inputs, positions = batch(side), answer_positions()
    with torch.no_grad():
        expected = reference(**inputs, **positions).loss
        for unpad in (False, True):
            torch.testing.assert_close(run(model, {**inputs, **positions}, unpad).loss, expected, rtol=1e-5, atol=1e-6)
    assert encoder_shapes(model, {**inputs, **positions}, unpad_inputs=True) == [torch.Size((4, 13, 32))]
    assert encoder_shapes(model, inputs, unpad_inputs=True) == [torch.Size((1, 27, 32))]


def encoder_shapes(model, inputs: dict, **kwargs) -> list[torch.Size]:
    shapes = []
    hook = model.bert.encoder.layers[0].register_forward_pre_hook(lambda module, args: shapes.append(args[0].shape))
    try:
        model(**inputs, **kwargs)
    finally:
        hook.remove()
    return shapes


def test_the_encoder_runs_on_real_tokens_only():
    model = build(LineageBertForMaskedLM).eval()
    inputs = batch()
    assert encoder_shapes(model, inputs, unpad_inputs=True) == [torch.Size((1, 27, 32))]  # 13 + 9 + 4 + 1 of 52


@pytest.mark.parametrize("case", ("hidden states", "attention weights", "eager", "relative positions", "no mask"))
def test_calls_the_unpadded_path_cannot_serve_take_the_padded_one(case):
    """Still the same outputs, through the padded (B, T, C) path."""
    attn = "eager" if case == "eager" else "sdpa"
    relative = {"position_embedding_type": "relative-keys", "max_relative_position": 4}
    overrides = relative if case == "relative positions" else {}
    model = build(LineageBertForMaskedLM, attn, **overrides).eval()
    inputs = batch()
    kwargs = {"hidden states": {"output_hidden_states": True},
              "attention weights": {"output_attentions": True}}.get(case, {}) | {"unpad_inputs": True}
    if case == "no mask":
        inputs.pop("attention_mask")
    assert encoder_shapes(model, inputs, **kwargs) == [torch.Size((4, 13, 32))]
    if case in ("hidden states", "attention weights"):
        outputs = model(**inputs, **kwargs)
        assert outputs.hidden_states is not None or outputs.attentions is not None


@pytest.mark.parametrize("side", ("right", "left"))
@pytest.mark.parametrize("unpad", (True, False), ids=("unpadded", "padded"))
@pytest.mark.parametrize("lengths", ((13, 9, 4, 1), (13, 13, 13, 13)), ids=("ragged", "no-padding"))
def test_the_collates_packed_sequences_change_nothing_and_nothing_is_read_back(side, unpad, lengths):
    """`packed_sequences` (what the collators add, built on the CPU from the mask) give the unpadded path its real
    tokens and the padded path its mask (kept with padding, dropped without) without reading the mask back: the
    loss, gradients and outputs are bit for bit those of the same call without them, and a training forward and
    backward with value checks off (the engine's) reads nothing back, where without them it reads the mask."""
    model = build(LineageBertForPreTraining)
    inputs = batch(side)
    inputs["attention_mask"] = (torch.arange(13) < torch.tensor(lengths)[:, None]).long()
    if side == "left":
        inputs["attention_mask"] = inputs["attention_mask"].flip(-1)
    inputs["input_ids"] = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, 0)
    labels = {"labels": inputs["input_ids"].masked_fill(torch.rand(4, 13) > 0.3, -100),
              "next_sentence_label": torch.tensor([0, 1, 1, 0])}
    sequences = PackedSequences.for_batch(inputs["attention_mask"])
    results, reads = [], []
    for given in ({}, {"packed_sequences": sequences}):
        model.train().zero_grad()
        counter = HostReads()
        with counter, value_checks(False):
            loss = model(**inputs, **labels, **given, unpad_inputs=unpad).loss
            loss.backward()
        reads.append(sum(counter.reads["setup"].values()))
        logits = model.eval()(**inputs, **given, unpad_inputs=unpad).prediction_logits
        results.append([loss.detach(), logits, *[p.grad for p in model.parameters() if p.grad is not None]])
    for without, with_sequences in zip(*results):
        assert torch.equal(with_sequences, without)
    assert reads[1] == 0 and reads[0] > 0


@pytest.mark.parametrize("device, name, expected", [
    ("cuda", "bert-tiny", {"unpad_inputs": True}),
    ("cpu", "bert-tiny", {}),
    ("cuda", "gpt-tiny", {}),
])
def test_training_scripts_unpad_bert_on_a_gpu_only(device, name, expected):
    """`training_options` (the engine's, from `unpad_inputs=True` as pretrain_bert and finetune declare it): the forward
    option for a Lineage BERT on a CUDA device only."""
    model = AutoModel.from_config(preset(name))
    assert training_options(model, torch.device(device), unpad_inputs=True) == expected
    assert training_options(model, torch.device(device)) == {}  # not declared: never


def test_training_options_are_call_options_never_the_config():
    model = build(LineageBertForMaskedLM).eval()
    inputs = batch()
    options = training_options(model, torch.device("cuda"), unpad_inputs=True)
    assert encoder_shapes(model, inputs, **options) == [torch.Size((1, 27, 32))]
    assert encoder_shapes(model, inputs) == [torch.Size((4, 13, 32))]  # a call without them: the padded path
    assert "unpad_inputs" not in model.config.to_dict()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("attn", ("sdpa", "flash_attention_2"))
def test_unpadded_equals_padded_on_a_gpu(attn):
    """fp32 under sdpa (1e-5); bf16 where flash-attn's varlen kernel runs (it has no fp32)."""
    if attn == "flash_attention_2":
        pytest.importorskip("flash_attn")
    dtype = torch.float32 if attn == "sdpa" else torch.bfloat16
    model = build(LineageBertForMaskedLM, attn).to("cuda", dtype).eval()
    inputs = {k: v.cuda() for k, v in batch().items()}
    padded, unpadded = run(model, inputs, False).logits.float(), run(model, inputs, True).logits.float()
    real = inputs["attention_mask"].bool()
    tolerance = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(unpadded[real], padded[real], rtol=tolerance, atol=tolerance)
