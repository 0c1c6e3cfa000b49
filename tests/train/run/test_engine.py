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


def _mlm_rows(count: int = 12, length: int = 10) -> list[dict]:
    """Padded MLM rows of the tiny BERT's vocabulary (99), every third position labelled."""
    generator = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(count):
        real = int(torch.randint(length // 2, length + 1, (1,), generator=generator))
        ids = torch.zeros(length, dtype=torch.long)
        ids[:real] = torch.randint(5, 99, (real,), generator=generator)
        mask = (torch.arange(length) < real).long()
        labels = ids.masked_fill((torch.arange(length) % 3 != 0) | (mask == 0), -100)
        rows.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return rows


def _stack(features: list[dict]) -> dict[str, torch.Tensor]:
    return {key: torch.stack([f[key] for f in features]) for key in ("input_ids", "attention_mask", "labels")}


def test_engine_builds_without_writing_and_only_the_training_forward_gets_the_options(tmp_path):
    """Engine() writes nothing (the claimed folder holds its record and lock alone: no log, no tracker file);
    `sparse_prediction` reaches the training forward only: evaluation and `predict_fn` get the full (B, T, V) logits,
    as a user's call does."""
    from conftest import preset
    from transformers import AutoModelForMaskedLM

    from train.run import run_folder
    from train.run.engine import TokenMean
    from train.run.recipes import recipe_from_dict

    out = tmp_path / "run"
    recipe = recipe_from_dict({"output_dir": str(out), "max_steps": 2, "per_device_train_batch_size": 4,
                               "per_device_eval_batch_size": 4, "logging_steps": 1, "report_to": "tensorboard",
                               "progress_bar": False, "mixed_precision": "no"})
    model = AutoModelForMaskedLM.from_config(preset("bert-tiny"))
    calls, predicted = [], []
    model.register_forward_pre_hook(lambda module, args, kwargs: calls.append((module.training, dict(
        (k, v) for k, v in kwargs.items() if k in ("sparse_prediction", "unpad_inputs")))), with_kwargs=True)

    def predict(model, batch, outputs):
        predicted.append(tuple(outputs.logits.shape))
        return {"predictions": outputs.logits.argmax(-1)}

    rows = _mlm_rows()
    engine = Engine(run_folder.claim(recipe), model, rows, _stack, eval_dataset=rows[:4], token_mean=TokenMean(),
                    sparse_prediction=True, unpad_inputs=True, predict_fn=predict)
    assert sorted(p.name for p in out.iterdir()) == sorted([run_folder.LOCK, run_folder.RECORD])
    assert not engine.opened  # built and checked, nothing written
    assert engine.options == {"sparse_prediction": True}  # unpad_inputs: on a CUDA device only
    engine.train()
    assert (out / "logs" / "metrics.jsonl").is_file() and (out / "run.json").is_file()
    training = [options for is_training, options in calls if is_training]
    evaluation = [options for is_training, options in calls if not is_training]
    assert len(training) == 2 and all(options == {"sparse_prediction": True} for options in training)
    assert evaluation and all(options == {} for options in evaluation)
    assert predicted and all(shape == (4, 10, 99) for shape in predicted)


def test_the_output_folder_is_claimed_before_the_tokenizer_is_written(tmp_path, monkeypatch):
    """`start_run` claims the folder (lock and record) before the trained tokenizer is kept in it; the tokenizer
    itself claims nothing."""
    import transformers

    from train.run import run_folder

    out = tmp_path / "run"
    seen = []
    original = transformers.PreTrainedTokenizerBase.save_pretrained

    def save(self, folder, *args, **kwargs):
        if Path(folder) == out / "tokenizer":
            seen.append(((out / run_folder.RECORD).is_file(), (out / run_folder.LOCK).is_file()))
        return original(self, folder, *args, **kwargs)

    monkeypatch.setattr(transformers.PreTrainedTokenizerBase, "save_pretrained", save)
    run(out, "--train_size", "30", "--max_steps", "1")
    assert seen == [(True, True)]
    assert any(k.startswith("tokenizer/") for k in json.loads((out / run_folder.RECORD).read_text())["wrote"])


def test_every_record_carries_its_throughput_and_mfu_against_the_given_peak(tmp_path, bert_tokenizer):
    """`tokens_per_s` in every record; `mfu` = tokens/s x the model's FLOPs per token / the peak (`peak_tflops`, as
    no table knows a CPU); results.json keeps their medians; without a peak, a CPU run records no `mfu`."""
    import statistics

    from transformers import AutoModelForPreTraining

    from train.run.flops import flops_per_token
    from train.run.recipes import load_recipe

    common = ("--train_size", "30", "--max_steps", "4", "--logging_steps", "1", "--tokenizer", bert_tokenizer)
    results, folder = run(tmp_path / "peak", *common, "--peak_tflops", "0.5")
    records = [r for r in map(json.loads, (tmp_path / "peak" / "logs" / "metrics.jsonl").read_text().splitlines())
               if "loss" in r]
    per_token = flops_per_token(AutoModelForPreTraining.from_pretrained(folder), load_recipe(RECIPE).max_seq_length)
    assert len(records) == 4 and all(r["tokens_per_s"] > 0 for r in records)
    for r in records:
        assert r["mfu"] == pytest.approx(r["tokens_per_s"] * per_token / 0.5e12, rel=1e-12)
    assert results["tokens_per_s"] == statistics.median(r["tokens_per_s"] for r in records)
    assert results["mfu"] == statistics.median(r["mfu"] for r in records)
    results, _ = run(tmp_path / "no-peak", *common)
    assert results["tokens_per_s"] > 0 and "mfu" not in results
