"""`torch.compile` of every family's training step (the recipe keys `compile` and `compile_mode`).

For each family on its tiny preset: the forward with labels compiles with zero graph breaks (Dynamo's own counter),
three compiled training steps give the eager losses within 1e-4, and steps 2 and 3 at the same shapes run under
`fail_on_recompile`. Dropout is off so the two sides draw no random numbers (Inductor has its own generator).
Then the engine: a compiled run publishes the same checkpoint and folder keys as an uncompiled one, and a torch
that cannot compile is refused, naming the recipe key, before any step.
"""

import copy
import json
from pathlib import Path

import pytest
import torch
from conftest import preset
from safetensors.torch import load_file
from torch._dynamo.utils import counters
from transformers import (
    AutoModelForCausalLM,
    AutoModelForPreTraining,
    AutoModelForSeq2SeqLM,
)

from train.pretrain_gpt import main as pretrain_gpt
from train.run import compilation
from train.run.compilation import check_compiler, compile_model
from train.run.recipes import RecipeError

B, T = 2, 8
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def gpt():
    config = preset("gpt-tiny", **NO_DROPOUT)
    ids = torch.randint(5, config.vocab_size, (B, T))
    return AutoModelForCausalLM.from_config(config), {"input_ids": ids, "labels": ids}


def bert():
    config = preset("bert-tiny", **NO_DROPOUT)
    ids = torch.randint(5, config.vocab_size, (B, T))
    attention_mask = torch.ones(B, T, dtype=torch.long)
    attention_mask[1, -3:] = 0
    return AutoModelForPreTraining.from_config(config), {  # as pretrain_bert trains it
        "input_ids": ids, "attention_mask": attention_mask, "next_sentence_label": torch.tensor([0, 1]),
        "sparse_prediction": True}


def transformer():
    config = preset("transformer-tiny", **NO_DROPOUT)
    return AutoModelForSeq2SeqLM.from_config(config), seq2seq_batch(config)


def rnn(**overrides):
    config = preset("rnn-tiny", hidden_dropout_prob=0.0, **overrides)
    return AutoModelForSeq2SeqLM.from_config(config), seq2seq_batch(config)


def seq2seq_batch(config) -> dict:
    attention_mask = torch.ones(B, T, dtype=torch.long)
    attention_mask[1, -3:] = 0  # right padding: the RNN encoder's masked recurrence is exercised
    return {"input_ids": torch.randint(4, config.vocab_size, (B, T)), "attention_mask": attention_mask,
            "labels": torch.randint(4, config.vocab_size, (B, T))}


def bert_labels(batch: dict, step: int) -> dict:
    """A different set of masked positions each step: `sparse_prediction` runs the head on a varying count."""
    if "next_sentence_label" not in batch:
        return batch
    chosen = torch.rand(B, T, generator=torch.Generator().manual_seed(step)) < 0.3
    chosen[0, step] = True
    return {**batch, "labels": batch["input_ids"].masked_fill(~chosen, -100)}


def training_losses(model: torch.nn.Module, batch: dict, steps: int = 3, after_first=None) -> list[float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        if step == 1 and after_first is not None:
            after_first()
        loss = model(**bert_labels(batch, step)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


FAMILIES = {"gpt": gpt, "bert": bert, "transformer": transformer}
SLOW_FAMILIES = {  # the RNN runs unrolled when compiled: one to two minutes of Inductor code generation each
    "rnn-bahdanau-gru": rnn,
    "rnn-luong-input-feeding-lstm": lambda: rnn(cell="lstm", attention="luong-general", input_feeding=True,
                                                reverse_source=True),
    "rnn-luong-dot-unidirectional": lambda: rnn(attention="luong-dot", bidirectional_encoder=False),
    "rnn-none": lambda: rnn(attention="none", bridge="last"),
}


def check_compiled_training(build) -> None:
    check_compiler()  # its probe is a graph of its own
    torch._dynamo.reset()
    counters.clear()
    model, batch = build()
    model.train()
    eager = copy.deepcopy(model)
    compile_model(model, True)
    try:
        compiled_losses = training_losses(
            model, batch, after_first=lambda: torch.compiler.set_stance("fail_on_recompile"))
    finally:
        torch.compiler.set_stance("default")
    assert dict(counters["graph_break"]) == {}, dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1  # the forward, traced once: no break, no recompilation
    assert compiled_losses == pytest.approx(training_losses(eager, batch), abs=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_training_step_compiles_without_graph_breaks_or_recompiles(family):
    check_compiled_training(FAMILIES[family])


@pytest.mark.slow
@pytest.mark.parametrize("variant", SLOW_FAMILIES)
def test_rnn_compiles_without_graph_breaks_or_recompiles(variant):
    check_compiled_training(SLOW_FAMILIES[variant])


def test_compile_keeps_state_dict_keys():
    model, _ = gpt()
    keys = list(model.state_dict())
    compile_model(model, True)
    assert list(model.state_dict()) == keys
    assert compile_model(model, False) is model


def run_gpt(out: Path, *extra: str):
    return pretrain_gpt(["--recipe", "gpt-pretrain-tiny", "--output_dir", str(out),
                         "--progress_bar", "false", "--report_to", "none", "--train_size", "16", "--max_steps", "2",
                         *extra])


@pytest.mark.slow
def test_compiled_run_writes_the_same_checkpoint_and_folder(tmp_path):
    torch._dynamo.reset()
    run_gpt(tmp_path / "eager")
    run_gpt(tmp_path / "compiled", "--compile", "true")
    for relative in ("checkpoints/step-00000002/model.safetensors", "model/model.safetensors"):
        eager, compiled = load_file(tmp_path / "eager" / relative), load_file(tmp_path / "compiled" / relative)
        assert sorted(compiled) == sorted(eager), relative

    def files(run):
        return sorted(p.name for p in (tmp_path / run / "model").iterdir())

    assert files("compiled") == files("eager")
    config = json.loads((tmp_path / "compiled/model/config.json").read_text())
    assert config == json.loads((tmp_path / "eager/model/config.json").read_text())


def test_torch_without_a_working_compiler_is_refused_before_any_step(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("InductorError: no working C++ compiler found")

    compilation.compiler_error.cache_clear()
    monkeypatch.setattr(torch, "compile", broken)
    try:
        with pytest.raises(RecipeError, match="recipe key 'compile'.*no working C\\+\\+ compiler"):
            check_compiler()
        with pytest.raises(RecipeError, match="recipe key 'compile'"):
            run_gpt(tmp_path / "run", "--compile", "true")
    finally:
        compilation.compiler_error.cache_clear()
    assert not (tmp_path / "run" / "checkpoints").exists()
    assert not (tmp_path / "run" / "logs" / "metrics.jsonl").exists()
