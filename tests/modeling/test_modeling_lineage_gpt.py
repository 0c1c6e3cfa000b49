"""The GPT family: shapes, losses, the KV cache and `generate()` (inductor compilation), fine-tuning heads with the
auxiliary LM loss, packed rows, Trainer, presets and bad input. Padding (also of a batch of prompts), causality, cached
decoding, eager == sdpa, save/load (also in a clean process), gradient checkpointing, the output flags, static caches,
fullgraph compilation and seeded sampling are test_properties.py's, bad config values test_contract.py's, over every
head."""


import threading
import warnings

import pytest
import torch
from conftest import preset
from transformers import (
    CompileConfig,
    DataCollatorWithFlattening,
    Trainer,
    TrainingArguments,
)
from transformers.trainer_pt_utils import LabelSmoother

from modeling import (
    LineageGptConfig,
    LineageGptForCausalLM,
    LineageGptForMultipleChoice,
    LineageGptForSequenceClassification,
    LineageGptModel,
    checks,
)
from modeling.arguments import CACHE_NAME, cache_keyword, output_cache

PAD = 0  # gpt-tiny: [PAD]=0, [START]=1, [DELIM]=2, [EXTRACT]=3, <|endoftext|>=4
NORMS = ("post", "pre")
HEADS = (LineageGptModel, LineageGptForCausalLM, LineageGptForSequenceClassification, LineageGptForMultipleChoice)


def build(model_class, attn="sdpa", **overrides):
    """A tiny model in eval mode; `eos_token_id=None` so greedy runs never stop early."""
    config = preset("gpt-tiny", **{"eos_token_id": None, **overrides})
    config._attn_implementation = attn
    return model_class(config).eval()


def tokens(*shape: int) -> torch.Tensor:
    return torch.randint(5, 99, shape)  # never a special token, so never [PAD]


def pad(rows: list[torch.Tensor], side: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad 1-D rows with [PAD] on `side`; returns (input_ids, attention_mask)."""
    length = max(len(r) for r in rows)
    ids, mask = torch.full((len(rows), length), PAD), torch.zeros(len(rows), length, dtype=torch.long)
    for i, row in enumerate(rows):
        span = slice(length - len(row), length) if side == "left" else slice(0, len(row))
        ids[i, span], mask[i, span] = row, 1
    return ids, mask


def head_inputs(model_class, batch: int = 2, length: int = 7) -> dict:
    if model_class is LineageGptForMultipleChoice:
        return {"input_ids": tokens(batch, 3, length), "labels": torch.tensor([0, 2][:batch])}
    inputs = {"input_ids": tokens(batch, length)}
    if model_class is LineageGptForCausalLM:
        inputs["labels"] = inputs["input_ids"]
    elif model_class is LineageGptForSequenceClassification:
        inputs["labels"] = torch.tensor([0, 1][:batch])
    return inputs


def assert_refused(model, match: str, call) -> None:
    """`call` raises a ValueError matching `match` before any module of `model` runs."""
    ran = []
    hooks = [m.register_forward_pre_hook(lambda *_: ran.append(1)) for m in model.modules() if not list(m.children())]
    try:
        with pytest.raises(ValueError, match=match):
            call()
    finally:
        for hook in hooks:
            hook.remove()
    assert not ran, "a module ran before the input was refused"


# ----------------------------------------------------------------------------------------------------------
# Config and presets
# ----------------------------------------------------------------------------------------------------------


def test_defaults_are_gpt1():
    config = LineageGptConfig()
    assert (config.vocab_size, config.max_position_embeddings, config.hidden_size, config.num_hidden_layers,
            config.num_attention_heads, config.intermediate_size) == (40478, 512, 768, 12, 12, 3072)
    assert (config.norm_position, config.hidden_act, config.layer_norm_eps) == ("post", "gelu_new", 1e-5)
    assert config.tie_word_embeddings and config.use_cache and config.lm_loss_weight == 0.0


@pytest.mark.parametrize(
    ("name", "expected"), [("gpt-117m", 116.5e6), ("gpt-124m-prenorm", 124.4e6), ("gpt-tiny", None)]
)
def test_preset_parameter_counts(name, expected):
    with torch.device("meta"):
        model = LineageGptForCausalLM(preset(name))
    count = sum(p.numel() for p in model.parameters())  # parameters() yields the tied LM head once
    assert model.lm_head.weight is model.transformer.embed_tokens.weight
    if expected is not None:
        assert abs(count - expected) / expected < 0.01, count
    assert (model.transformer.final_norm is not None) == (model.config.norm_position == "pre")


# ----------------------------------------------------------------------------------------------------------
# Heads: shapes, finite loss, backward
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("model_class", HEADS)
def test_head_shapes_loss_and_backward(model_class, norm):
    model = build(model_class, norm_position=norm, num_labels=2, lm_loss_weight=0.5).train()
    inputs = head_inputs(model_class)
    outputs = model(**inputs)
    expected = {
        LineageGptModel: ("last_hidden_state", (2, 7, 32)),
        LineageGptForCausalLM: ("logits", (2, 7, 99)),
        LineageGptForSequenceClassification: ("logits", (2, 2)),
        LineageGptForMultipleChoice: ("logits", (2, 3)),
    }[model_class]
    if model_class is LineageGptForCausalLM:  # training with labels: the loss without logits (test_lm_loss.py)
        assert outputs.logits is None
        outputs = model(**inputs, return_logits=True)
    assert getattr(outputs, expected[0]).shape == expected[1]
    loss = outputs.last_hidden_state.pow(2).mean() if model_class is LineageGptModel else outputs.loss
    assert torch.isfinite(loss)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("model_class", (LineageGptForSequenceClassification, LineageGptForMultipleChoice))
def test_auxiliary_lm_loss_is_added_and_reported(model_class):
    inputs = head_inputs(model_class)
    plain = build(model_class, num_labels=2)
    weighted = build(model_class, num_labels=2, lm_loss_weight=0.5)
    weighted.load_state_dict(plain.state_dict())
    without, with_lm = plain(**inputs), weighted(**inputs)
    assert without.lm_loss is None and torch.equal(without.loss, without.classification_loss)
    torch.testing.assert_close(with_lm.classification_loss, without.classification_loss)
    torch.testing.assert_close(with_lm.loss, with_lm.classification_loss + 0.5 * with_lm.lm_loss)
    # the auxiliary loss is the causal-LM loss of the same tokens under the tied LM head
    lm = LineageGptForCausalLM(weighted.config).eval()
    lm.transformer.load_state_dict(weighted.transformer.state_dict())
    flat = inputs["input_ids"].flatten(0, -2)
    torch.testing.assert_close(with_lm.lm_loss, lm(flat, labels=flat).loss)


def test_regression_and_multi_label_classification():
    ids = tokens(3, 6)
    regression = build(LineageGptForSequenceClassification, num_labels=1)
    values = torch.randn(3)
    out = regression(ids, labels=values)
    assert regression.config.problem_type == "regression" and out.logits.shape == (3, 1)
    torch.testing.assert_close(out.loss, torch.nn.functional.mse_loss(out.logits.squeeze(-1), values))
    multi = build(LineageGptForSequenceClassification, num_labels=4, problem_type="multi_label_classification")
    targets = torch.randint(0, 2, (3, 4)).float()
    out = multi(ids, labels=targets)
    torch.testing.assert_close(out.loss, torch.nn.functional.binary_cross_entropy_with_logits(out.logits, targets))


def test_causal_lm_loss_honours_num_items_in_batch():
    model = build(LineageGptForCausalLM)
    ids = tokens(2, 6)
    labels = ids.clone()
    labels[0, :3] = -100
    summed = model(ids, labels=labels, num_items_in_batch=torch.tensor(1)).loss
    count = (labels[:, 1:] != -100).sum()
    torch.testing.assert_close(summed / count, model(ids, labels=labels).loss)
    assert getattr(LineageGptForCausalLM, "accepts_loss_kwargs", True)  # Trainer then passes the token count
    assert not LineageGptForSequenceClassification.accepts_loss_kwargs
    assert not LineageGptForMultipleChoice.accepts_loss_kwargs


# ----------------------------------------------------------------------------------------------------------
# Padding without a mask, attentions and hidden states
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("side", ("left", "right"))
def test_sequence_classification_without_a_mask_finds_the_padding_by_the_pad_id(side):
    """Padding with a mask is test_properties.py's (every head); without one, [PAD] ids mark it."""
    model = build(LineageGptForSequenceClassification, num_labels=3)
    rows = [tokens(n) for n in (4, 9, 6, 7)]
    ids, _ = pad(rows, side)
    alone = torch.cat([model(row[None]).logits for row in rows])
    torch.testing.assert_close(model(ids).logits, alone, rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------------------------------------
# KV cache and generate()
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_beams", (1, 3))
def test_cache_never_recomputes_past_keys(num_beams):
    model = build(LineageGptForCausalLM)
    lengths = []
    hook = model.transformer.layers[0].self_attn.sublayer.k_proj.register_forward_hook(
        lambda module, args, output: lengths.append(args[0].shape[1])
    )
    model.generate(tokens(1, 6), max_new_tokens=5, num_beams=num_beams, do_sample=False)
    hook.remove()
    assert lengths == [6, 1, 1, 1, 1]


@pytest.mark.parametrize("attn", ("sdpa", "eager"))
def test_a_prepared_4d_causal_mask_equals_no_mask(attn):
    model = build(LineageGptForCausalLM, attn)
    ids = tokens(2, 7)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()[None, None]  # (1, 1, T, S)
    torch.testing.assert_close(model(ids, attention_mask=causal).logits, model(ids).logits, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_static_cache_decoding_compiles_with_inductor():
    model = build(LineageGptForCausalLM)
    ids = tokens(2, 6)
    kwargs = dict(max_new_tokens=5, do_sample=False, cache_implementation="static")
    config = CompileConfig(fullgraph=True, mode="default", dynamic=False)
    config._compile_all_devices = True
    assert torch.equal(model.generate(ids, compile_config=config, **kwargs), model.generate(ids, **kwargs))


@pytest.mark.parametrize("attn", ("sdpa", "eager"))
def test_packed_rows_longer_than_the_position_table_equal_each_sequence_alone(attn):
    """Packed (padding-free) rows, as `DataCollatorWithFlattening` makes: `position_ids` restart at each sequence and
    no `attention_mask` is given, so transformers' mask keeps each sequence to itself (without a cache: training)."""
    model = build(LineageGptForCausalLM, attn)
    lengths = (40, 30, 20)  # 90 tokens in one row; max_position_embeddings is 64
    sequences = [tokens(1, n) for n in lengths]
    positions = torch.cat([torch.arange(n) for n in lengths])[None]  # (1, 90)
    packed = torch.cat(sequences, dim=1)
    out = model(packed, position_ids=positions, labels=packed, use_cache=False)
    assert torch.isfinite(out.loss)
    for sequence, span in zip(sequences, torch.arange(90).split(lengths)):
        torch.testing.assert_close(out.logits[:, span], model(sequence).logits, rtol=0, atol=1e-5)
    assert_refused(model, "has 90 positions but `max_position_embeddings` is 64", lambda: model(packed))


def test_a_flattened_batch_trains_on_each_sequence_alone():
    """`DataCollatorWithFlattening` (padding-free training) packs rows longer than the position table; the loss is
    the token-weighted mean of each sequence's own next-token loss."""
    model = build(LineageGptForCausalLM, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0).train()
    rows = [tokens(n).tolist() for n in (50, 30, 25)]
    batch = DataCollatorWithFlattening()([{"input_ids": row} for row in rows])
    assert batch["input_ids"].shape == (1, 105)
    packed = model(**batch).loss
    alone = [model(torch.tensor([row]), labels=torch.tensor([row])).loss for row in rows]
    expected = sum(loss * (len(row) - 1) for loss, row in zip(alone, rows)) / sum(len(row) - 1 for row in rows)
    torch.testing.assert_close(packed, expected, rtol=1e-5, atol=1e-6)
    packed.backward()


# ----------------------------------------------------------------------------------------------------------
# Trainer
# ----------------------------------------------------------------------------------------------------------


def test_trainer_step_on_classification_head_with_auxiliary_loss(tmp_path):
    model = build(LineageGptForSequenceClassification, num_labels=2, lm_loss_weight=0.5,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ids, mask = pad([tokens(n) for n in (5, 8, 3, 6)], "right")
    labels = torch.tensor([0, 1, 1, 0])
    data = [{"input_ids": ids[i], "attention_mask": mask[i], "labels": labels[i]} for i in range(4)]
    expected = model(ids, attention_mask=mask, labels=labels)
    assert expected.lm_loss is not None and expected.classification_loss is not None
    before = model.score.weight.detach().clone()
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4, learning_rate=1e-2, logging_steps=1,
        save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    logged = next(entry["loss"] for entry in trainer.state.log_history if "loss" in entry)
    assert logged == pytest.approx(expected.loss.item(), abs=1e-4)  # the combined loss, not the classification alone
    assert not torch.equal(before, model.score.weight.detach())


@pytest.mark.parametrize("model_class", (LineageGptForSequenceClassification, LineageGptForMultipleChoice))
def test_trainer_label_smoothing_warns_that_it_leaves_the_auxiliary_lm_loss_out(model_class, tmp_path):
    """`Trainer(label_smoothing_factor=0.1)` takes the labels and smooths the loss of `logits` alone, so L1 is lost:
    the model says so (naming the factor and both ways out) where the forward runs without labels; a forward with
    labels, and an evaluation, do not warn."""
    model = build(model_class, num_labels=2, lm_loss_weight=0.5, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0).train()
    inputs = head_inputs(model_class, batch=2)
    args = TrainingArguments(output_dir=str(tmp_path), label_smoothing_factor=0.1, report_to="none", use_cpu=True)
    with pytest.warns(UserWarning, match=r"`lm_loss_weight`=0.5 .* leaves the LM term out .*label_smoothing_factor"):
        loss = Trainer(model=model, args=args).compute_loss(model, dict(inputs))
    full = model(**inputs)
    smoothed = LabelSmoother(0.1)({"logits": full.logits}, inputs["labels"])
    torch.testing.assert_close(loss, smoothed)  # the classification loss alone: what the warning says
    assert full.lm_loss > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(**inputs)
        model.eval()(inputs["input_ids"])


# ----------------------------------------------------------------------------------------------------------
# Bad input: a clear ValueError naming the argument, before any module runs
# ----------------------------------------------------------------------------------------------------------

_LM, _CLS, _MC = LineageGptForCausalLM, LineageGptForSequenceClassification, LineageGptForMultipleChoice

BAD_INPUTS = {
    "id_above_vocab": (_LM, r"`input_ids` must be in \[0, 99\)", lambda m: m(torch.tensor([[5, 99]]))),
    "negative_id": (_LM, r"`input_ids` must be in \[0, 99\)", lambda m: m(torch.tensor([[-1, 5]]))),
    "longer_than_positions": (_LM, "max_position_embeddings", lambda m: m(tokens(1, 65))),
    "mask_shape": (_LM, "`attention_mask` must have the shape",
                   lambda m: m(tokens(2, 5), attention_mask=torch.ones(2, 4))),
    "position_ids_range": (_LM, r"`position_ids` must be in \[0, 64\)",
                           lambda m: m(tokens(1, 3), position_ids=torch.tensor([[0, 1, 64]]))),
    "lm_labels_shape": (_LM, "`labels` must have shape", lambda m: m(tokens(2, 5), labels=tokens(2, 4))),
    "cls_labels_shape": (_CLS, "`labels` must have shape", lambda m: m(tokens(2, 5), labels=torch.tensor([0, 1, 1]))),
    "mc_labels_shape": (_MC, "`labels` must have shape", lambda m: m(tokens(2, 3, 5), labels=torch.tensor([[0], [1]]))),
    "mc_not_3d": (_MC, "num_choices", lambda m: m(tokens(2, 5))),
    "prompt_longer_than_context": (_LM, r"prompt .* 70 tokens .* context window",
                                   lambda m: m.generate(tokens(1, 70), max_new_tokens=2)),
    "max_new_tokens_past_positions": (_LM, r"`max_new_tokens` must be in \[1, 54\]",
                                      lambda m: m.generate(tokens(1, 10), max_new_tokens=55)),
    "max_new_tokens_past_positions_beam": (_LM, "max_new_tokens",
                                           lambda m: m.generate(tokens(1, 10), max_new_tokens=60, num_beams=2)),
    "max_new_tokens_past_positions_from_embeds": (  # the embedded prompt's positions count as the ids' do
        _LM, r"60-token prompt `max_new_tokens` must be in \[1, 4\]",
        lambda m: m.generate(inputs_embeds=torch.randn(1, 60, 32), max_new_tokens=6)),
    "embedded_prompt_longer_than_context": (_LM, r"prompt \(`inputs_embeds`\) has 70 tokens",
                                            lambda m: m.generate(inputs_embeds=torch.randn(1, 70, 32))),
    "classification_row_without_tokens": (
        _CLS, r"Row 1 .* no non-padding token",
        lambda m: m(tokens(2, 4), attention_mask=torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]])),
    ),
    "classification_row_all_pad": (_CLS, r"Row 0 .* no non-padding token",
                                   lambda m: m(torch.zeros(2, 4, dtype=torch.long))),
    "mc_choice_without_tokens": (
        _MC, "no non-padding token",
        lambda m: m(tokens(1, 2, 4), attention_mask=torch.tensor([[[1, 1, 1, 1], [0, 0, 0, 0]]])),
    ),
    "auxiliary_loss_without_input_ids": (
        _CLS, "needs `input_ids`", lambda m: m(inputs_embeds=torch.randn(1, 4, 32), labels=torch.tensor([1])),
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_refused_before_any_kernel(case):
    model_class, match, call = BAD_INPUTS[case]
    model = build(model_class, num_labels=2, lm_loss_weight=0.5)
    assert_refused(model, match, lambda: call(model))


def test_padded_batch_without_pad_token_or_mask_is_refused():
    model = build(LineageGptForSequenceClassification, pad_token_id=None)
    assert_refused(model, "needs `attention_mask` or `config.pad_token_id`", lambda: model(tokens(2, 5)))
    assert model(tokens(1, 5)).logits.shape == (1, 2)  # a single row has no padding to find


def test_a_single_token_over_a_cache_is_checked_outside_generate_and_in_a_continued_generation():
    """`generate()`'s decoding steps skip the id checks (`checks.decoding_step`), and nothing else does: a one-token
    forward over a cache, called directly or as the first step of a generation continued from a given cache, and the
    steps of a generation whose positions the caller gave."""
    model = build(LineageGptForCausalLM)
    cache = output_cache(model(tokens(1, 3)))
    assert_refused(model, r"`input_ids` must be in \[0, 99\)", lambda: model(torch.tensor([[99]]), cache=cache))
    prompt = torch.cat([tokens(1, 3), torch.tensor([[99]])], dim=1)
    assert_refused(model, r"`input_ids` must be in \[0, 99\)",
                   lambda: model.generate(prompt, **cache_keyword(cache), max_new_tokens=2, pad_token_id=0))
    with pytest.raises(ValueError, match=r"`position_ids` must be in \[0, 64\)"):  # the caller's, counted on
        model.generate(tokens(1, 3), position_ids=torch.tensor([[60, 61, 62]]), max_new_tokens=4, pad_token_id=0)


class Holder(threading.Thread):
    """A thread that enters a context manager, waits for `release()`, and leaves it."""

    def __init__(self, context):
        super().__init__(daemon=True)
        self.context, self.inside, self.go = context, threading.Event(), threading.Event()
        self.start()
        assert self.inside.wait(10)

    def run(self):
        with self.context:
            self.inside.set()
            self.go.wait(10)

    def release(self):
        self.go.set()
        self.join(10)


def test_the_check_switches_of_one_thread_leave_every_other_threads_checks_on():
    """`checks.generating` and `checks.value_checks` hold per thread: a thread inside them (a server generating, a
    training loop) turns off no check of another, and threads leaving them out of turn leave no switch behind (with
    one switch for the process, the last to leave restored what the first had found: `generating` on for good)."""
    model = build(LineageGptForCausalLM)
    cache = output_cache(model(tokens(1, 3)))
    one_bad_token = lambda: model(torch.tensor([[99]]), cache=cache)  # noqa: E731  (refused: the cache stays)
    holders = [Holder(checks.generating()), Holder(checks.value_checks(False))]
    assert_refused(model, r"`input_ids` must be in \[0, 99\)", one_bad_token)
    for holder in holders:
        holder.release()
    first, second = Holder(checks.generating()), Holder(checks.generating())
    first.release()  # out of turn: the first in leaves first
    second.release()
    assert not checks.decoding_step(torch.tensor([[5]]), 3)
    assert_refused(model, r"`input_ids` must be in \[0, 99\)", one_bad_token)


def test_cache_plus_new_tokens_past_positions_is_refused():
    model = build(LineageGptForCausalLM)
    cache = output_cache(model(tokens(1, 60)))
    assert_refused(model, f"`{CACHE_NAME} \\+ input_ids` has 65 positions",
                   lambda: model(tokens(1, 5), **cache_keyword(cache)))
    assert_refused(model, "60 cached \\+ 2 new tokens",
                   lambda: model(tokens(1, 2), attention_mask=torch.ones(1, 2), cache=cache))
    assert_refused(model, r"A 4D `attention_mask` must have shape \(1, 1, 2, >= 62\)",
                   lambda: model(tokens(1, 2), attention_mask=torch.ones(1, 1, 2, 61), cache=cache))
