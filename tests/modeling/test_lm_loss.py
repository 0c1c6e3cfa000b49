"""The LM head without the big logits tensor (`losses.lm_head_loss`, issue 11 part 4) and `pad_vocab_to_multiple_of`.

The chunked loss equals the dense one (loss and gradients w.r.t. hidden states, weight and bias, fp32 to 1e-6) with
ignored labels, label smoothing, `num_items_in_batch`, padded vocabulary columns and chunks that do not divide the
tokens; it never keeps (N, V) logits for the backward pass, and under autocast casts the weight once. Every LM head
(GPT, BERT MLM dense and sparse, BERT pretraining and causal LM, the Transformer with label smoothing, GPT's auxiliary
LM loss) gives the dense path's loss and gradients, and compiled takes the dense logits; the rule for when logits are
returned; `Trainer`'s label smoothing of a causal LM scores the next token, as for the references. A padded vocabulary:
shapes, logits width, `generate()` and pipelines never emit a padded id, no gradient
reaches the padding, save/load, resize, conversion to and from the transformers references, export, and bad values.
"""

import math

import pytest
import torch
import transformers
from conftest import preset, run_clean_process
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from transformers.loss.loss_utils import ForCausalLMLoss

from modeling import (
    LineageBertForMaskedLM,
    LineageBertForPreTraining,
    LineageBertLMHeadModel,
    LineageGptConfig,
    LineageGptForCausalLM,
    LineageGptForSequenceClassification,
    LineageTransformerForConditionalGeneration,
    losses,
)
from modeling.conversion import from_transformers, to_transformers
from modeling.losses import lm_head_loss

V, C = 99, 32  # the tiny presets' vocabulary and width
EXACT = {"rtol": 1e-6, "atol": 1e-6}
GRADS = {"rtol": 1e-5, "atol": 1e-6}
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Chunks of 7-10 tokens by default (1000 logits over 99-128 columns), so the heads' batches (33, 30, 18 tokens)
    end in a partial chunk, as a real batch does at the default 128 MiB."""
    monkeypatch.setattr(losses, "LM_LOSS_CHUNK_ELEMENTS", 1000)


# ---------------------------------------------------------------------------------------------- the function


def dense_loss(hidden, weight, bias, labels, vocab_size, label_smoothing=0.0, num_items_in_batch=None):
    """The reference: float32 (N, V) logits of the real vocabulary, then `F.cross_entropy`."""
    logits = nn.functional.linear(hidden, weight, bias)[:, :vocab_size].float()
    loss = nn.functional.cross_entropy(logits, labels, ignore_index=-100, label_smoothing=label_smoothing,
                                       reduction="mean" if num_items_in_batch is None else "sum")
    return loss if num_items_in_batch is None else loss / num_items_in_batch


def leaves(tokens: int, rows: int, bias: bool):
    hidden = torch.randn(tokens, C, requires_grad=True)
    weight = torch.randn(rows, C, requires_grad=True)
    return hidden, weight, torch.randn(rows, requires_grad=True) if bias else None


def some_ignored(tokens: int, vocab_size: int = V) -> torch.Tensor:
    labels = torch.randint(0, vocab_size, (tokens,))
    labels[::3] = -100
    return labels


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("num_items_in_batch", [None, 41])
@pytest.mark.parametrize("rows", [V, 128], ids=["exact-vocab", "padded-vocab"])
@pytest.mark.parametrize("bias", [False, True])
def test_chunked_loss_and_gradients_equal_the_dense_ones(label_smoothing, num_items_in_batch, rows, bias):
    hidden, weight, b = leaves(29, rows, bias)
    labels = some_ignored(29)
    inputs = [x for x in (hidden, weight, b) if x is not None]
    chunked = lm_head_loss(hidden, weight, b, labels, V, label_smoothing, num_items_in_batch, chunk_size=4)
    dense = dense_loss(hidden, weight, b, labels, V, label_smoothing, num_items_in_batch)
    torch.testing.assert_close(chunked, dense, **EXACT)
    for got, expected, name in zip(torch.autograd.grad(chunked, inputs), torch.autograd.grad(dense, inputs),
                                   ("hidden", "weight", "bias")):
        torch.testing.assert_close(got, expected, **EXACT, msg=name)
    if rows > V:  # the padding rows are outside the softmax: no gradient reaches them
        grad_weight = torch.autograd.grad(lm_head_loss(hidden, weight, b, labels, V), weight)[0]
        assert grad_weight[V:].abs().max() == 0 and grad_weight[:V].abs().max() > 0


@pytest.mark.parametrize("chunk_size", [1, 5, 17, 23, 100])  # 23 tokens: chunks that divide them, and ones that don't
def test_chunk_size_changes_nothing_and_bounds_every_logits_block(chunk_size, monkeypatch):
    hidden, weight, _ = leaves(23, V, bias=False)
    labels = some_ignored(23)
    shapes = []
    linear = nn.functional.linear

    def recording_linear(x, w, b=None):
        shapes.append(tuple(x.shape))
        return linear(x, w, b)

    monkeypatch.setattr(nn.functional, "linear", recording_linear)
    loss = lm_head_loss(hidden, weight, None, labels, V, chunk_size=chunk_size)
    monkeypatch.undo()
    assert max(rows for rows, _ in shapes) == min(chunk_size, 23) and len(shapes) == math.ceil(23 / chunk_size)
    torch.testing.assert_close(loss, dense_loss(hidden, weight, None, labels, V), **EXACT)


def test_the_backward_keeps_no_logits():
    """What autograd saves for the backward: the gradients (N, C), (V, C), never a tensor with V columns."""
    hidden, weight, bias = leaves(64, V, bias=True)
    labels = torch.randint(0, V, (64,))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        lm_head_loss(hidden, weight, bias, labels, V, chunk_size=8)
    assert saved and not any(len(shape) > 1 and shape[-1] == V for shape in saved)
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        dense_loss(hidden, weight, bias, labels, V)
    assert (64, V) in saved  # the dense path keeps them: the hook sees what it is meant to see


def test_causal_shift_equals_transformers_loss():
    hidden, weight, _ = leaves(2 * 9, V, bias=False)
    labels = torch.randint(0, V, (2, 9))
    labels[1, :3] = -100  # left padding
    for num_items_in_batch in (None, torch.tensor(11)):
        chunked = lm_head_loss(hidden.view(2, 9, C), weight, None, labels, V, shift=True,
                               num_items_in_batch=num_items_in_batch, chunk_size=5)
        expected = ForCausalLMLoss((hidden @ weight.T).view(2, 9, V), labels, V, num_items_in_batch)
        torch.testing.assert_close(chunked, expected, **EXACT)
        for got, want in zip(torch.autograd.grad(chunked, (hidden, weight)),
                             torch.autograd.grad(expected, (hidden, weight))):
            torch.testing.assert_close(got, want, **EXACT)


def test_all_labels_ignored_gives_what_the_dense_loss_gives():
    """Mean over no token: NaN with zero gradients (as `F.cross_entropy`); a sum over `num_items_in_batch`: 0."""
    hidden, weight, _ = leaves(6, V, bias=False)
    labels = torch.full((6,), -100)
    for num_items_in_batch in (None, 12):
        chunked = lm_head_loss(hidden, weight, None, labels, V, num_items_in_batch=num_items_in_batch, chunk_size=4)
        dense = dense_loss(hidden, weight, None, labels, V, num_items_in_batch=num_items_in_batch)
        torch.testing.assert_close(chunked, dense, equal_nan=True)
        assert torch.isnan(chunked) == (num_items_in_batch is None)
        grads = torch.autograd.grad(chunked, (hidden, weight)), torch.autograd.grad(dense, (hidden, weight))
        for got, want in zip(*grads):
            assert torch.equal(got, want) and got.abs().max() == 0


def test_no_gradient_work_without_autograd():
    hidden, weight, _ = leaves(10, V, bias=False)
    labels = torch.randint(0, V, (10,))
    with torch.no_grad():
        loss = lm_head_loss(hidden, weight, None, labels, V, chunk_size=3)
    assert loss.grad_fn is None
    torch.testing.assert_close(loss, dense_loss(hidden, weight, None, labels, V), **EXACT)
    frozen = lm_head_loss(hidden.detach(), weight, None, labels, V)  # only the weight needs a gradient
    assert torch.autograd.grad(frozen, weight)[0].shape == weight.shape


def test_bad_labels_and_chunk_size_are_refused_naming_them():
    hidden, weight, _ = leaves(4, 128, bias=False)
    for bad in (V, 127, -1):  # past the real vocabulary (a padding row), or negative other than -100
        with pytest.raises(ValueError, match=rf"`labels` must be -100 \(ignored\) or in \[0, {V}\).*got {bad}"):
            lm_head_loss(hidden, weight, None, torch.tensor([1, bad, 2, -100]), V)
    for bad in (0, -2, 2.5, True):
        with pytest.raises(ValueError, match="`chunk_size` must be a positive integer"):
            lm_head_loss(hidden, weight, None, torch.tensor([1, 2, 3, 4]), V, chunk_size=bad)


class WeightCasts(TorchDispatchMode):
    """Counts the dtype casts of tensors of `shape` (the output layer's weight) and records the operand dtypes of every
    matrix product."""

    PRODUCTS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.addmm_.default}

    def __init__(self, shape):
        super().__init__()
        self.shape, self.count, self.products = tuple(shape), 0, set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default and tuple(args[0].shape) == self.shape:
            self.count += 1
        if func in self.PRODUCTS:
            self.products.add(args[-1].dtype)
        return func(*args, **(kwargs or {}))


def test_under_autocast_the_weight_is_cast_once_and_its_gradient_summed_in_float32():
    """Every chunk's matrix products in bfloat16 from one cast of the weight (Liger Kernel cast it twice a chunk, 128
    times a gpt-124m step), the weight's gradient a float32 sum of the chunks' bfloat16 products: within bfloat16's
    error of the float32 gradient, as the dense head's under autocast."""
    hidden, weight, bias = leaves(40, 128, bias=True)
    labels = some_ignored(40)
    with torch.autocast("cpu", dtype=torch.bfloat16), WeightCasts(weight.shape) as casts:
        loss = lm_head_loss(hidden, weight, bias, labels, V, chunk_size=7)
        grads = torch.autograd.grad(loss, (hidden, weight, bias))
    assert casts.count == 1 and casts.products == {torch.bfloat16}
    assert [g.dtype for g in grads] == [torch.float32] * 3
    full = torch.autograd.grad(lm_head_loss(hidden, weight, bias, labels, V, chunk_size=7), (hidden, weight, bias))
    for got, want in zip(grads, full):
        torch.testing.assert_close(got, want, rtol=0.05, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_chunked_loss_matches_the_dense_one_on_cuda():
    torch.backends.cuda.matmul.allow_tf32 = False
    hidden = torch.randn(300, 64, device="cuda", requires_grad=True)
    weight = torch.randn(1024, 64, device="cuda", requires_grad=True)
    labels = torch.randint(0, 1000, (300,), device="cuda")
    labels[::7] = -100
    for smoothing in (0.0, 0.1):
        loss = lm_head_loss(hidden, weight, None, labels, 1000, smoothing)
        dense = dense_loss(hidden, weight, None, labels, 1000, smoothing)
        torch.testing.assert_close(loss, dense, rtol=1e-5, atol=1e-5)
        for got, want in zip(torch.autograd.grad(loss, (hidden, weight)), torch.autograd.grad(dense, (hidden, weight))):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------- the heads


def loss_and_grads(model, forward=None, **inputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss of `forward` (default: the model itself, else e.g. its compiled form) and the model's gradients."""
    model.zero_grad()
    loss = (forward if forward is not None else model)(**inputs).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def assert_fused_equals_dense(model, **inputs):
    """Training forward: the default (no logits) against `return_logits=True` (logits, then the dense loss)."""
    model.train()
    out = model(**inputs)
    assert (out.prediction_logits if isinstance(model, LineageBertForPreTraining) else out.logits) is None
    fused, fused_grads = loss_and_grads(model, **inputs)
    dense, dense_grads = loss_and_grads(model, **inputs, return_logits=True)
    assert torch.isfinite(fused)
    torch.testing.assert_close(fused, dense, **EXACT)
    assert fused_grads.keys() == dense_grads.keys() and fused_grads
    for name, grad in dense_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, **GRADS, msg=name)


def causal_batch(batch: int = 3, length: int = 11) -> dict[str, torch.Tensor]:
    ids = torch.randint(5, V, (batch, length))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # left padding, out of the loss
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


@pytest.mark.parametrize("pad_vocab", [None, 64])
@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("num_items_in_batch", [None, 25])
def test_gpt_causal_lm(pad_vocab, norm, num_items_in_batch):
    model = LineageGptForCausalLM(preset("gpt-tiny", norm_position=norm, pad_vocab_to_multiple_of=pad_vocab,
                                         **NO_DROPOUT))
    extra = {} if num_items_in_batch is None else {"num_items_in_batch": torch.tensor(num_items_in_batch)}
    assert_fused_equals_dense(model, **causal_batch(), **extra)


@pytest.mark.parametrize("model_class", [LineageBertForMaskedLM, LineageBertForPreTraining])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("pad_vocab", [None, 64])
def test_bert_masked_lm(model_class, sparse, pad_vocab):
    model = model_class(preset("bert-tiny", pad_vocab_to_multiple_of=pad_vocab, **NO_DROPOUT))
    ids = torch.randint(5, V, (3, 10))
    labels = torch.full_like(ids, -100)
    labels[:, 2::3] = ids[:, 2::3]
    inputs = {"input_ids": ids, "labels": labels, "sparse_prediction": sparse}
    if model_class is LineageBertForPreTraining:
        inputs["next_sentence_label"] = torch.tensor([0, 1, 1])
    else:
        inputs["num_items_in_batch"] = torch.tensor(13)
    assert_fused_equals_dense(model, **inputs)


def test_bert_causal_lm_head():
    model = LineageBertLMHeadModel(preset("bert-tiny", is_decoder=True, pad_vocab_to_multiple_of=8, **NO_DROPOUT))
    assert_fused_equals_dense(model, **causal_batch())


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("final_logits_bias", [False, True])
def test_transformer_with_label_smoothing(sparse, final_logits_bias):
    config = preset("transformer-tiny", label_smoothing=0.1, hidden_dropout_prob=0.0,
                    final_logits_bias=final_logits_bias, pad_vocab_to_multiple_of=16)
    model = LineageTransformerForConditionalGeneration(config)
    if final_logits_bias:
        model.final_logits_bias.normal_()
    labels = torch.randint(3, V, (3, 6))
    labels[1, 4:] = -100
    inputs = {"input_ids": torch.randint(3, V, (3, 8)), "labels": labels, "sparse_prediction": sparse}
    assert_fused_equals_dense(model, **inputs)
    assert_fused_equals_dense(model, **inputs, num_items_in_batch=torch.tensor(30))


@pytest.mark.parametrize("pad_vocab", [None, 64])
def test_gpt_auxiliary_lm_loss_is_the_causal_lm_loss_of_the_tied_head(pad_vocab):
    model = LineageGptForSequenceClassification(preset("gpt-tiny", num_labels=2, lm_loss_weight=0.5,
                                                       pad_vocab_to_multiple_of=pad_vocab, **NO_DROPOUT)).eval()
    batch = causal_batch()
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=torch.tensor([0, 1, 1]),
                output_hidden_states=True)
    logits = out.hidden_states[-1] @ model.transformer.embed_tokens.weight[:V].T  # (B, T, V)
    expected = ForCausalLMLoss(logits, batch["labels"], V)
    torch.testing.assert_close(out.lm_loss, expected, **EXACT)


def test_when_logits_are_returned():
    model = LineageGptForCausalLM(preset("gpt-tiny", **NO_DROPOUT))
    batch = causal_batch()
    assert model.train()(**batch).logits is None  # training with labels: the loss alone
    assert model(**batch, return_logits=True).logits.shape == (3, 11, V)
    model.eval()  # evaluation, Trainer.predict, pipelines, generate: logits, and the same loss
    evaluated = model(**batch)
    assert evaluated.logits.shape == (3, 11, V)
    skipped = model(**batch, return_logits=False)
    assert skipped.logits is None
    torch.testing.assert_close(skipped.loss, evaluated.loss, **EXACT)
    assert model.train()(input_ids=batch["input_ids"]).logits.shape == (3, 11, V)  # no labels: logits
    with pytest.raises(ValueError, match="`return_logits=False`.*needs `labels`"):
        model(input_ids=batch["input_ids"], return_logits=False)


LM_HEADS = {LineageGptForCausalLM: ("gpt-tiny", {}), LineageBertLMHeadModel: ("bert-tiny", {"is_decoder": True}),
            LineageBertForMaskedLM: ("bert-tiny", {}),
            LineageTransformerForConditionalGeneration: ("transformer-tiny", {})}


@pytest.mark.parametrize("model_class", list(LM_HEADS))
@pytest.mark.parametrize("by", ["call", "config"])
def test_a_training_tuple_keeps_the_references_positions(model_class, by):
    """`return_dict=False` (or `config.return_dict=False`) in training: `loss, logits = out[:2]` as with
    transformers' heads, whose logits are never skipped (a skipped None would move every later item forward)."""
    name, fields = LM_HEADS[model_class]
    model = model_class(preset(name, **fields, **NO_DROPOUT)).train()
    batch = causal_batch()
    expected = model(**batch, return_logits=True)
    if by == "config":
        model.config.return_dict = False
    out = model(**batch, **({"return_dict": False} if by == "call" else {}))
    assert isinstance(out, tuple)
    torch.testing.assert_close(out[0], expected.loss, **EXACT)
    torch.testing.assert_close(out[1], expected.logits, **EXACT)
    assert len(model(**batch, return_dict=False, return_logits=False)) == len(out) - 1  # asked for: skipped


def test_a_wrapped_head_takes_the_dense_path():
    """A head that is not a plain linear layer (an adapter's wrapper) must run as a module: logits, dense loss."""

    class Scaled(nn.Module):
        def __init__(self, linear: nn.Linear):
            super().__init__()
            self.linear = linear

        def forward(self, x):
            return 2 * self.linear(x)

    model = LineageGptForCausalLM(preset("gpt-tiny", **NO_DROPOUT)).train()
    batch = causal_batch()
    plain = model(**batch).loss
    model.lm_head = Scaled(model.lm_head)
    wrapped = model(**batch)
    assert wrapped.logits.shape == (3, 11, V)
    torch.testing.assert_close(wrapped.loss, ForCausalLMLoss(wrapped.logits, batch["labels"], V))
    assert not torch.allclose(wrapped.loss, plain)


def test_a_head_whose_weight_zero3_partitions_is_called_as_a_module(monkeypatch):
    """Under DeepSpeed ZeRO-3 a weight is gathered only by a call of its layer (its pre-forward hook), so reading it
    directly would meet an empty partition: such a head (its weight carries DeepSpeed's `ds_id`) takes the dense
    path through the layer's call, for the same loss."""
    model = LineageGptForCausalLM(preset("gpt-tiny", **NO_DROPOUT)).train()
    batch = causal_batch()
    fused = model(**batch)
    calls = []
    model.lm_head.register_forward_pre_hook(lambda module, args: calls.append(module))  # where ZeRO-3 gathers
    model.lm_head.weight.ds_id = 7
    dense = model(**batch)
    assert calls == [model.lm_head] and fused.logits is None and dense.logits.shape == (3, 11, V)
    torch.testing.assert_close(dense.loss, fused.loss, **EXACT)


# ---------------------------------------------------------------------------------------------- padded vocabulary


@pytest.mark.parametrize("bad", [0, -64, 2.5, True, "64"])
def test_bad_pad_vocab_to_multiple_of_is_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match=r"`pad_vocab_to_multiple_of` must be None .* or a positive integer"):
        LineageGptConfig(pad_vocab_to_multiple_of=bad)


def test_padded_sizes():
    assert LineageGptConfig(vocab_size=50257, pad_vocab_to_multiple_of=64).padded_vocab_size == 50304
    assert LineageGptConfig(vocab_size=50304, pad_vocab_to_multiple_of=64).padded_vocab_size == 50304
    assert LineageGptConfig(vocab_size=50257).padded_vocab_size == 50257
    gpt = LineageGptForCausalLM(preset("gpt-tiny", pad_vocab_to_multiple_of=64))
    assert gpt.transformer.embed_tokens.weight.shape == gpt.lm_head.weight.shape == (128, C)
    assert gpt.lm_head.weight is gpt.transformer.embed_tokens.weight and gpt.config.vocab_size == V
    bert = LineageBertForMaskedLM(preset("bert-tiny", pad_vocab_to_multiple_of=64))
    assert bert.lm_head.decoder.weight.shape == (128, C) and bert.lm_head.decoder.bias.shape == (128,)
    marian_like = LineageTransformerForConditionalGeneration(
        preset("transformer-tiny", pad_vocab_to_multiple_of=64, final_logits_bias=True, tie_word_embeddings=False))
    assert marian_like.lm_head.weight.shape == (128, C) and marian_like.final_logits_bias.shape == (1, 128)
    assert marian_like.get_input_embeddings().weight.shape == (128, C)


def loud_padding(model: nn.Module) -> nn.Module:
    """Padding rows that would win every argmax and softmax if they were ever read."""
    with torch.no_grad():
        for module in (model.get_input_embeddings(), model.get_output_embeddings()):
            module.weight[V:] = 100.0
            if getattr(module, "bias", None) is not None:
                module.bias[V:] = 1e4
    return model


def test_generate_never_emits_a_padded_id():
    config = preset("gpt-tiny", pad_vocab_to_multiple_of=64, eos_token_id=None)
    model = loud_padding(LineageGptForCausalLM(config)).eval()
    prompt = torch.randint(5, V, (2, 4))
    assert model(prompt).logits.shape == (2, 4, V)
    for options in ({"do_sample": False}, {"do_sample": True, "top_k": 0}, {"num_beams": 3, "do_sample": False}):
        generated = model.generate(prompt, max_new_tokens=12, **options)
        assert generated.shape == (2, 16) and int(generated.max()) < V
    seq2seq = loud_padding(LineageTransformerForConditionalGeneration(
        preset("transformer-tiny", pad_vocab_to_multiple_of=64, eos_token_id=None))).eval()
    generated = seq2seq.generate(torch.randint(3, V, (2, 5)), max_new_tokens=8, do_sample=True, top_k=0)
    assert int(generated.max()) < V


def test_padded_ids_are_refused_as_inputs():
    model = LineageGptForCausalLM(preset("gpt-tiny", pad_vocab_to_multiple_of=64)).eval()
    with pytest.raises(ValueError, match=rf"`input_ids` must be in \[0, {V}\)"):
        model(torch.tensor([[5, V + 3]]))


def test_padded_model_saves_loads_and_resizes(tmp_path):
    model = LineageBertForMaskedLM(preset("bert-tiny", pad_vocab_to_multiple_of=64)).eval()
    model.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert loaded.config.pad_vocab_to_multiple_of == 64 and loaded.config.vocab_size == V
    ids = torch.randint(5, V, (2, 6))
    assert torch.equal(loaded(ids).logits, model(ids).logits) and loaded(ids).logits.shape == (2, 6, V)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    model.resize_token_embeddings(130)  # more tokens: rows rounded up to the multiple, vocab_size the real count
    assert model.config.vocab_size == 130 and model.get_input_embeddings().weight.shape == (192, C)
    assert model.lm_head.decoder.weight is model.get_input_embeddings().weight
    assert model.lm_head.decoder.bias.shape == (192,) and model(ids).logits.shape == (2, 6, 130)
    model.resize_token_embeddings(100, pad_to_multiple_of=8)  # an explicit multiple replaces the config's
    assert (model.config.vocab_size, model.config.pad_vocab_to_multiple_of) == (100, 8)
    assert model.get_input_embeddings().weight.shape == (104, C)
    with pytest.raises(ValueError, match="`pad_to_multiple_of` must be None .* or a positive integer"):
        model.resize_token_embeddings(100, pad_to_multiple_of=0)


def gpt2_reference() -> transformers.GPT2LMHeadModel:
    config = transformers.GPT2Config(vocab_size=V, n_positions=32, n_embd=C, n_layer=2, n_head=4, resid_pdrop=0.0,
                                     bos_token_id=V - 1, eos_token_id=V - 1,
                                     embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config).eval()


def test_conversion_drops_and_adds_the_padding(exact_linear):
    reference = gpt2_reference()
    ids = torch.randint(0, V, (2, 7))
    padded = from_transformers(reference, pad_vocab_to_multiple_of=64).eval()
    assert padded.lm_head.weight.shape == (128, C) and padded.config.vocab_size == V
    torch.testing.assert_close(padded(ids).logits, reference(ids).logits, rtol=1e-5, atol=1e-5)
    loud_padding(padded)
    back = to_transformers(padded).eval()
    assert back.lm_head.weight.shape == (V, C) and back.config.vocab_size == V
    torch.testing.assert_close(back(ids).logits, padded(ids).logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(back.lm_head.weight, reference.lm_head.weight, rtol=0, atol=0)
    with pytest.raises(ValueError, match="`pad_vocab_to_multiple_of` must be None"):
        from_transformers(reference, pad_vocab_to_multiple_of=-8)


def test_marian_conversion_with_padding_keeps_the_logits_bias(exact_linear):
    config = transformers.MarianConfig(vocab_size=V, decoder_vocab_size=V, d_model=C, encoder_layers=2,
                                       decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                                       encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=32,
                                       pad_token_id=0, decoder_start_token_id=0, dropout=0.0)
    reference = transformers.MarianMTModel(config).eval()
    reference.final_logits_bias.normal_()
    padded = from_transformers(reference, pad_vocab_to_multiple_of=64).eval()
    assert padded.final_logits_bias.shape == (1, 128)
    inputs = {"input_ids": torch.randint(1, V, (2, 6)), "decoder_input_ids": torch.randint(1, V, (2, 5))}
    torch.testing.assert_close(padded(**inputs).logits, reference(**inputs).logits, rtol=1e-5, atol=1e-5)
    back = to_transformers(padded).eval()
    assert torch.equal(back.final_logits_bias, reference.final_logits_bias)
    torch.testing.assert_close(back(**inputs).logits, reference(**inputs).logits, rtol=1e-5, atol=1e-5)


def test_export_of_a_padded_model_gives_the_real_vocabulary(tmp_path):
    from train import export

    model = loud_padding(LineageGptForCausalLM(preset("gpt-tiny", pad_vocab_to_multiple_of=64))).eval()
    export.export_model(model, tmp_path)
    program = torch.export.load(tmp_path / "decoder.pt2").module()
    ids = torch.randint(5, V, (3, 5))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        logits = program(ids, mask)
        assert logits.shape == (3, 5, V)
        torch.testing.assert_close(logits, model(ids, mask).logits, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_the_compiled_loss_takes_the_dense_logits_in_one_graph_and_equals_the_chunked_one(monkeypatch):
    """Under torch.compile the loss is the dense logits', fused in the model's graph (Liger Kernel's, which Lineage
    used on CUDA, broke it on an H200); it equals the eager model's, which takes the chunks."""
    chunked = []
    apply = losses.ChunkedLinearCrossEntropy.apply
    monkeypatch.setattr(losses.ChunkedLinearCrossEntropy, "apply", lambda *args: chunked.append(1) or apply(*args))
    model = LineageGptForCausalLM(preset("gpt-tiny", pad_vocab_to_multiple_of=64, **NO_DROPOUT)).train()
    batch = causal_batch()
    eager, eager_grads = loss_and_grads(model, **batch)
    assert chunked == [1]
    compiled, compiled_grads = loss_and_grads(model, torch.compile(model, backend="aot_eager", fullgraph=True), **batch)
    assert chunked == [1]
    torch.testing.assert_close(compiled, eager, **EXACT)
    for name, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, **GRADS, msg=name)


def test_autocast_runs_the_chunks_in_its_dtype_like_the_dense_head():
    model = LineageGptForCausalLM(preset("gpt-tiny", **NO_DROPOUT)).train()
    batch = causal_batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused, fused_grads = loss_and_grads(model, **batch)
        dense, dense_grads = loss_and_grads(model, **batch, return_logits=True)
    full, _ = loss_and_grads(model, **batch)  # float32
    torch.testing.assert_close(fused, dense, rtol=0, atol=2e-3)  # both from bfloat16 matmuls: equally far from fp32
    assert (fused - full).abs() > 1e-5 and (dense - full).abs() > 1e-5
    for name, grad in dense_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, rtol=0.05, atol=2e-3, msg=name)


@pytest.mark.parametrize("model_class", [LineageGptForCausalLM, LineageBertForMaskedLM, LineageBertForPreTraining,
                                         LineageBertLMHeadModel, LineageTransformerForConditionalGeneration])
def test_bad_labels_and_return_logits_are_refused_before_the_backbone_runs(model_class):
    name = {LineageGptForCausalLM: "gpt-tiny", LineageTransformerForConditionalGeneration: "transformer-tiny"}
    model = model_class(preset(name.get(model_class, "bert-tiny"), pad_vocab_to_multiple_of=64)).train()
    calls = []
    model.base_model.register_forward_pre_hook(lambda *args: calls.append(1))
    ids = torch.randint(5, V, (2, 6))
    for bad in (V, 127, -5):  # a padding row is no label either
        labels = ids.clone()
        labels[1, 2] = bad
        with pytest.raises(ValueError, match=rf"`labels` must be -100 \(ignored\) or in \[0, {V}\).*got {bad}"):
            model(input_ids=ids, labels=labels)
    targets = {"decoder_input_ids": ids} if model.config.is_encoder_decoder else {}
    with pytest.raises(ValueError, match="`return_logits=False`.*needs `labels`"):
        model(input_ids=ids, return_logits=False, **targets)
    assert calls == []
    model(input_ids=ids, labels=ids)
    assert calls  # the hook does see a forward


def test_trainer_accumulation_matches_one_batch_and_predict_gets_logits(tmp_path):
    """Trainer's `num_items_in_batch`: two accumulated micro-batches with different numbers of labelled tokens take
    the step one batch of all four rows takes; `predict` (eval mode) gets the (N, T, V) logits."""
    ids = torch.randint(5, V, (4, 8))
    labels = ids.clone()
    labels[0, :5] = labels[3, :2] = -100
    rows = [{"input_ids": i, "labels": label} for i, label in zip(ids, labels)]
    trained = []
    for batch_size, accumulation in ((4, 1), (2, 2)):
        torch.manual_seed(0)
        model = LineageGptForCausalLM(preset("gpt-tiny", **NO_DROPOUT))
        initial = {name: weight.clone() for name, weight in model.state_dict().items()}
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / str(batch_size)), per_device_train_batch_size=batch_size, max_steps=1,
            gradient_accumulation_steps=accumulation, optim="sgd", learning_rate=1.0, lr_scheduler_type="constant",
            report_to=[], save_strategy="no", use_cpu=True, dataloader_drop_last=False,
        )
        trainer = transformers.Trainer(model=model, args=args, train_dataset=rows)
        trainer.train()
        trained.append(model.state_dict())
    for name, weight in trained[0].items():
        torch.testing.assert_close(trained[1][name], weight, **GRADS, msg=name)
    assert not torch.allclose(trained[0]["lm_head.weight"], initial["lm_head.weight"])
    predictions = trainer.predict(rows).predictions
    assert predictions.shape == (4, 8, V)


def label_smoothed_trainer_loss(model, tmp_path, batch: dict[str, torch.Tensor]) -> float:
    """The loss `Trainer` computes with `label_smoothing_factor` (its own `LabelSmoother` over the model's logits)."""
    args = transformers.TrainingArguments(output_dir=str(tmp_path), label_smoothing_factor=0.1, report_to=[],
                                          use_cpu=True)
    trainer = transformers.Trainer(model=model.eval(), args=args)
    return trainer.compute_loss(model, dict(batch)).item()


@pytest.mark.parametrize("model_class, fields", [
    (LineageGptForCausalLM, {"norm_position": "post", "intermediate_size": 128}),  # OpenAIGPT: 4 x hidden
    (LineageGptForCausalLM, {"norm_position": "pre"}),  # GPT-2
    (LineageBertLMHeadModel, {"is_decoder": True}),
])
def test_trainer_label_smoothing_shifts_a_causal_lms_labels_as_the_references(model_class, fields, tmp_path):
    """`Trainer(label_smoothing_factor=...)` smooths the loss of the next token, as for the transformers reference
    (GPT-2, OpenAIGPT, BertLMHeadModel): it shifts the labels only for a class named in its table of causal LMs."""
    family = "gpt-tiny" if model_class is LineageGptForCausalLM else "bert-tiny"
    model = model_class(preset(family, initializer_range=0.5, **fields, **NO_DROPOUT))  # logits far from uniform
    batch = causal_batch()
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])  # the references number padded positions too
    reference = to_transformers(model)
    expected = label_smoothed_trainer_loss(reference, tmp_path, batch)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    unshifted = transformers.trainer_pt_utils.LabelSmoother(0.1)({"logits": logits}, batch["labels"]).item()
    assert abs(expected - unshifted) > 0.1  # the two alignments tell apart
    assert label_smoothed_trainer_loss(model, tmp_path, batch) == pytest.approx(expected, abs=1e-5)


def test_a_causal_lm_loaded_as_remote_code_is_label_smoothed_on_the_next_token(tmp_path):
    """The class `trust_remote_code=True` loads, in a process without Lineage, names itself a causal LM too."""
    model = LineageGptForCausalLM(preset("gpt-tiny", **NO_DROPOUT))
    model.save_pretrained(tmp_path / "model")
    batch = causal_batch()
    torch.save(batch, tmp_path / "batch.pt")
    code = (
        "import torch, transformers\n"
        "model = transformers.AutoModelForCausalLM.from_pretrained('model', trust_remote_code=True)\n"
        "args = transformers.TrainingArguments(output_dir='out', label_smoothing_factor=0.1, report_to=[], "
        "use_cpu=True)\n"
        "trainer = transformers.Trainer(model=model.eval(), args=args)\n"
        "print(trainer.compute_loss(model, torch.load('batch.pt')).item())\n"
    )
    got = float(run_clean_process(code, cwd=tmp_path).strip().splitlines()[-1])
    logits = model.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    shifted = transformers.trainer_pt_utils.LabelSmoother(0.1)({"logits": logits}, batch["labels"], shift_labels=True)
    assert got == pytest.approx(shifted.item(), abs=1e-5)
