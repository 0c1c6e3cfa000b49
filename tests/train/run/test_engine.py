"""The training engine: exact resume, atomic checkpoints, NaN stop, bad inputs caught before the first step,
schedules and parameter groups. Runs the BERT pretraining script for a few steps on the tiny preset."""

import json
from pathlib import Path

import pytest
import torch

from train.data.tokenization import TokenizerMismatchError
from train.pretrain_bert import main as pretrain_bert
from train.run import checkpoints
from train.run.checkpoints import (
    CheckpointError,
    complete_checkpoints,
    verify_checkpoint,
)
from train.run.engine import Engine, NonFiniteLossError

RECIPE = "bert-pretrain-tiny"
torch.set_num_threads(1)  # tiny models: one thread is fastest, and immune to a busy machine


def run(out: Path, *extra: str):
    argv = ["--recipe", RECIPE, "--output_dir", str(out), "--progress_bar", "false", "--report_to", "none", *extra]
    return pretrain_bert(argv)


def losses(out: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "loss" in r}


SMALL = ("--train_size", "30", "--max_steps", "8", "--save_steps", "3", "--gradient_accumulation_steps", "2",
         "--save_total_limit", "3", "--logging_steps", "1")  # a record (and its loss) for every step


@pytest.fixture(scope="module")
def bert_tokenizer(tmp_path_factory):
    """One tokenizer shared by the runs that are compared (saves training it once per run)."""
    from train.data.corpus import tokenizer_training_texts
    from train.data.tokenization import train_tokenizer

    folder = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer("bert", tokenizer_training_texts(size=200), 600, model_max_length=64).save_pretrained(folder)
    return str(folder)


def test_interrupted_and_resumed_run_reproduces_every_step_loss(tmp_path, monkeypatch, bert_tokenizer):
    small = (*SMALL, "--tokenizer", bert_tokenizer)
    run(tmp_path / "straight", *small)
    reference = losses(tmp_path / "straight")
    assert sorted(reference) == list(range(1, 9))

    original = Engine._compute_loss

    def crash_at_step_7(self, batch):
        if self.state.step == 6:
            raise KeyboardInterrupt("simulated interruption")
        return original(self, batch)

    monkeypatch.setattr(Engine, "_compute_loss", crash_at_step_7)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "resumed", *small)
    monkeypatch.setattr(Engine, "_compute_loss", original)
    saved = json.loads((tmp_path / "resumed/checkpoints/step-00000006/lineage_state.json").read_text())["state"]
    assert saved["batch_in_epoch"] > 0 or saved["epoch"] > 0  # the interruption falls mid-run, past an epoch end
    run(tmp_path / "resumed", *small, "--resume_from_checkpoint", "latest")
    resumed = losses(tmp_path / "resumed")
    assert sorted(resumed) == list(range(1, 9))
    for step in reference:
        assert resumed[step] == pytest.approx(reference[step], abs=1e-6), step


def test_crash_during_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
    out = tmp_path / "run"
    original = Engine.save_checkpoint

    def crashing_save(self):
        if self.state.step >= 6:  # the weights file is half written, then the disk is full
            monkeypatch.setattr(checkpoints, "save_file", lambda tensors, path, metadata: (
                Path(path).write_bytes(b"partial"), (_ for _ in ()).throw(OSError("disk full"))))
        return original(self)

    monkeypatch.setattr(Engine, "save_checkpoint", crashing_save)
    with pytest.raises(OSError, match="disk full"):
        run(out, "--max_steps", "6", "--save_steps", "3")
    found = complete_checkpoints(out / "checkpoints")
    assert [p.name for p in found] == ["step-00000003"]
    verify_checkpoint(found[0])  # intact: every file has its recorded size


def test_nan_loss_stops_with_step_number_and_keeps_last_checkpoint(tmp_path, monkeypatch):
    out = tmp_path / "run"
    original = Engine._compute_loss

    def nan_at_step_5(self, batch):
        loss = original(self, batch)
        return loss * float("nan") if self.state.step == 4 else loss

    monkeypatch.setattr(Engine, "_compute_loss", nan_at_step_5)
    with pytest.raises(NonFiniteLossError, match="at step 5: training stopped at step 6.*step-00000003"):
        run(out, "--max_steps", "6", "--save_steps", "3")
    assert [p.name for p in complete_checkpoints(out / "checkpoints")] == ["step-00000003"]
    assert max(losses(out)) == 4


def test_resume_without_checkpoint_is_refused_before_training(tmp_path):
    with pytest.raises(CheckpointError, match="holds no complete checkpoint"):
        run(tmp_path / "run", "--resume_from_checkpoint", "latest")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="holds no complete checkpoint"):
        run(tmp_path / "run", "--resume_from_checkpoint", str(empty))
    assert not (tmp_path / "run" / "logs").exists()


def test_corrupt_checkpoint_is_refused_and_left_untouched(tmp_path):
    out = tmp_path / "run"
    run(out, "--max_steps", "6", "--save_steps", "3")
    first, last = complete_checkpoints(out / "checkpoints")
    weights = last / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    with pytest.raises(CheckpointError, match="corrupt.*model.safetensors"):
        run(out, "--max_steps", "8", "--resume_from_checkpoint", "latest")
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before
    assert weights.stat().st_size == 100


def test_tokenizer_larger_than_model_vocabulary_is_refused(tmp_path):
    with pytest.raises(TokenizerMismatchError, match="vocab_size is 50"):
        run(tmp_path / "run", "--model_overrides", "{vocab_size: 50}")
    assert not (tmp_path / "run" / "logs").exists()


def test_missing_preset_and_data_file_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="bert-tiny"):  # the message lists the presets
        run(tmp_path / "run", "--model", "bert-nonexistent")
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        run(tmp_path / "run", "--train_file", str(tmp_path / "nope.txt"))
