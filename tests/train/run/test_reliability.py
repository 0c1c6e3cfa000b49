"""Reliability of the training commands (issue 16): a normal run prints no warning; two runs with the same seed give
the same vocabularies, per-step losses, weights and figures; a run killed with SIGKILL during a step or during a
checkpoint write resumes from `latest` to the uninterrupted run's losses, and a half-written checkpoint is never
taken as `latest`; resident memory stays flat over a long run (slow).

The runs are real processes (`python -c` drivers below): a warning, a hash seed or a kill only shows there."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import REPO

BERT_RECIPE = "bert-pretrain-tiny"


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1", **extra}


def _python(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=REPO, env=_env(**env),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def _losses(run_dir: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (run_dir / "logs" / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "loss" in r}


# ----------------------------------------------------------------------------- every script, twice

EVERY_SCRIPT = r"""
import sys
import torch
torch.set_num_threads(1)
from train import finetune, main_job, train_tokenizer
root = sys.argv[1]
main_job.main(["--quick", "--output_dir", root, "--progress_bar", "false"])
tiny = ["--recipe", "bert-finetune-nli-tiny", "--model", root + "/bert-pretrain/model",
        "--progress_bar", "false", "--max_steps", "3", "--save_steps", "0", "--train_size", "60", "--eval_size", "20"]
finetune.main(tiny + ["--output_dir", root + "/ner", "--task", "token-classification", "--dataset", "embedded:ner"])
finetune.main(tiny + ["--output_dir", root + "/qa", "--task", "question-answering", "--dataset", "embedded:qa",
               "--max_query_length", "32"])
train_tokenizer.main(["--family", "bert", "--vocab_size", "300", "--max_texts", "200",
                      "--output_dir", root + "/wordpiece"])
"""
STAGES = ("bert-pretrain", "bert-nli", "gpt-pretrain", "gpt-nli", "translation", "ner", "qa")
PROGRESS_BAR = re.compile(r"(it|examples)/s\]\s*$")  # tqdm's trailer: "100/100 [00:00<00:00, 5.0 it/s]"
TIMINGS = ("tokens_per_s", "mfu", "steps_per_s", "train_seconds", "seconds", "cpu_seconds", "wall_seconds")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Every script run twice, in two processes with different Python hash seeds."""
    root = tmp_path_factory.mktemp("twice")
    runs = []
    for hash_seed in ("1", "2"):
        out = root / f"run{hash_seed}"
        runs.append((out, _python(EVERY_SCRIPT, out, PYTHONHASHSEED=hash_seed)))
    return runs


def test_a_normal_run_of_every_script_prints_no_warning(two_runs):
    out, result = two_runs[0]
    stderr = [s for s in re.split(r"[\r\n]+", result.stderr) if s.strip() and not PROGRESS_BAR.search(s)]
    assert stderr == [], "\n".join(stderr)  # transformers, accelerate, datasets and Python warnings all go here
    noisy = [line for line in result.stdout.splitlines() if re.search(r"warn|\[transformers\]|\[RANK", line, re.I)]
    assert noisy == []
    assert all((out / stage / "model" / "model.safetensors").is_file() for stage in STAGES)  # the runs did save


def _without_timings(value):
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def test_two_runs_give_identical_vocabularies_losses_weights_and_figures(two_runs):
    (a, _), (b, _) = two_runs
    for tokenizer in ("tokenizers/bert", "tokenizers/gpt", "tokenizers/seq2seq", "wordpiece"):
        assert (a / tokenizer / "tokenizer.json").read_bytes() == (b / tokenizer / "tokenizer.json").read_bytes()
    for stage in STAGES:
        first, second = (_without_timings(_read_jsonl(run / stage / "logs" / "metrics.jsonl")) for run in (a, b))
        assert first == second and len(first) >= 3, stage
        weights = [(run / stage / "model" / "model.safetensors").read_bytes() for run in (a, b)]
        assert weights[0] == weights[1], stage
    figures = [[{k: v for k, v in _without_timings(s["results"]).items() if k != "base_model"}  # the run's own folder
                for s in json.loads((run / "summary.json").read_text())["stages"]] for run in (a, b)]
    assert figures[0] == figures[1] and "eval_accuracy" in figures[0][1]


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_wordpiece_continuation_symbols_are_numbered_in_code_point_order():
    """The cause of the run-to-run vocabulary differences: `##c` symbols took ids in a per-process hash order."""
    from train.data.tokenization import BERT_SPECIAL_TOKENS, train_tokenizer

    tokenizer = train_tokenizer("bert", ["zebra yak xylophone", "quiet owl nests", "abc bca cab"] * 3, 80)
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    continuation = [token for token, _ in vocab if len(token) == 3 and token.startswith("##")]
    assert [token for token, _ in vocab[:5]] == BERT_SPECIAL_TOKENS
    assert continuation == sorted(continuation) and [t for t, _ in vocab[5:5 + len(continuation)]] == continuation
    assert set(continuation) == {f"##{c}" for c in "ebraakylophoneuietwlsstbcab"}
    added = tokenizer.backend_tokenizer.get_added_tokens_decoder()
    assert sorted(t.content for t in added.values()) == sorted(BERT_SPECIAL_TOKENS)  # the symbols are ordinary tokens
    assert tokenizer.tokenize("zebra Owl ##o") == ["zebra", "owl", "[UNK]", "[UNK]", "o"]  # "##o" is not matched whole


# ----------------------------------------------------------------------------- kill -9

KILLABLE = r"""
import sys, time
from pathlib import Path
import torch
torch.set_num_threads(1)
from train import pretrain_bert
from train.run import checkpoints, engine

marker, pause = Path(sys.argv[1]), sys.argv[2]  # "step:N" (mid-step N), "save:N" (saving N), or "none"
kind, _, at = pause.partition(":")

def wait_for_the_kill(where):
    marker.write_text(where)
    time.sleep(600)

if kind == "step":  # after the forward pass of step N, before its backward and optimizer step
    compute = engine.Engine._compute_loss
    def _compute_loss(self, batch):
        loss = compute(self, batch)
        if self.state.step + 1 == int(at):
            wait_for_the_kill(f"step {at}")
        return loss
    engine.Engine._compute_loss = _compute_loss
elif kind == "save":  # every file of the checkpoint written to its temporary folder, the state file not yet
    write = checkpoints._write_record
    def _write_record(folder, state, *rest):
        if state.step == int(at):
            wait_for_the_kill(str(folder))
        write(folder, state, *rest)
    checkpoints._write_record = _write_record
pretrain_bert.main(sys.argv[3:])
"""


def _killable(out: Path, pause: str, *extra: str) -> subprocess.Popen:
    argv = ["--recipe", BERT_RECIPE, "--output_dir", str(out), "--progress_bar", "false", "--report_to", "none",
            "--max_steps", "12", "--save_steps", "4", "--save_total_limit", "3", "--eval_size", "16",
            "--logging_steps", "1", *extra]  # a record, and its loss, for every step
    log = open(out.parent / f"{out.name}-{pause.replace(':', '-')}.log", "w")  # a pipe could fill and block it
    process = subprocess.Popen([sys.executable, "-c", KILLABLE, str(out / "paused"), pause, *argv], cwd=REPO,
                               env=_env(), stdout=subprocess.DEVNULL, stderr=log)
    process.log = Path(log.name)
    log.close()
    return process


def _kill_when_paused(process: subprocess.Popen, marker: Path) -> str:
    deadline = time.monotonic() + 300
    while not marker.is_file():
        assert process.poll() is None, f"the run ended before the kill point:\n{process.log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, "the run never reached the kill point"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=60) == -signal.SIGKILL
    return marker.read_text()


def _finish(process: subprocess.Popen) -> None:
    assert process.wait(timeout=600) == 0, process.log.read_text()[-4000:]


def test_sigkill_during_a_step_and_during_a_checkpoint_write_then_resume_reproduces_the_run(tmp_path):
    from train.run.checkpoints import STATE_FILE, complete_checkpoints, resume_path

    reference = _killable(tmp_path / "straight", "none")  # runs alongside the killed ones
    run, checkpoints = tmp_path / "killed", tmp_path / "killed" / "checkpoints"

    assert _kill_when_paused(_killable(run, "step:7"), run / "paused") == "step 7"
    assert [p.name for p in complete_checkpoints(checkpoints)] == ["step-00000004"]
    assert max(_losses(run)) == 6

    (run / "paused").unlink()
    writing = _kill_when_paused(_killable(run, "save:8", "--resume_from_checkpoint", "latest"), run / "paused")
    half_written = Path(writing)
    assert half_written.name == ".tmp-step-00000008" and (half_written / "model.safetensors").is_file()
    assert not (half_written / STATE_FILE).exists() and not (checkpoints / "step-00000008").exists()
    assert resume_path("latest", checkpoints) == checkpoints / "step-00000004"

    (run / "paused").unlink()
    _finish(_killable(run, "none", "--resume_from_checkpoint", "latest"))
    _finish(reference)
    expected = _losses(tmp_path / "straight")
    assert sorted(expected) == list(range(1, 13))
    assert _losses(run) == expected  # exact: the same floats, step by step
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-00000004", "step-00000008", "step-00000012"]
    final_weights = [(r / "model" / "model.safetensors").read_bytes() for r in (run, tmp_path / "straight")]
    assert final_weights[0] == final_weights[1]


class _Killed(BaseException):
    """Stands for SIGKILL inside one process: nothing after the raising line runs, and nothing cleans up."""


@pytest.fixture
def saver(tmp_path):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    from train.run import checkpoints

    AcceleratorState._reset_state()
    GradientState._reset_state()
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 2)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    root = tmp_path / "checkpoints"

    def save(step: int, keep: int = 2):
        return checkpoints.save_checkpoint(accelerator, root, checkpoints.TrainState(step=step), keep)

    yield save, root, model
    AcceleratorState._reset_state()
    GradientState._reset_state()


def test_killed_between_the_two_renames_of_a_resaved_step_keeps_that_step(saver, monkeypatch):
    from train.run import checkpoints

    save, root, model = saver
    save(4)
    save(8)
    replace = os.replace

    def killed_after_first_rename(src, dst):
        replace(src, dst)
        if Path(dst).name.startswith(".old-"):
            raise _Killed

    monkeypatch.setattr(checkpoints.os, "replace", killed_after_first_rename)
    with pytest.raises(_Killed):
        save(8)  # a resumed run saving step 8 again
    monkeypatch.setattr(checkpoints.os, "replace", replace)
    assert {p.name for p in root.iterdir()} == {"step-00000004", ".old-step-00000008", ".tmp-step-00000008"}
    latest = checkpoints.resume_path("latest", root)
    assert latest.name == ".old-step-00000008" and checkpoints.verify_checkpoint(latest)["state"]["step"] == 8

    save(12)  # the next save puts step 8 back and clears what the kill left
    assert sorted(p.name for p in root.iterdir()) == ["step-00000008", "step-00000012"]


def test_killed_while_deleting_a_stale_checkpoint_never_lists_it(saver, monkeypatch):
    from train.run import checkpoints

    save, root, _ = saver
    save(4)
    save(8)
    rmtree = checkpoints.shutil.rmtree

    def killed_midway(path, ignore_errors=False):
        if Path(path).name.startswith(".del-"):
            (Path(path) / "model.safetensors").unlink()  # some files gone, the state file still there
            raise _Killed
        rmtree(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(checkpoints.shutil, "rmtree", killed_midway)
    with pytest.raises(_Killed):
        save(12)  # keeps 2: deletes step 4
    monkeypatch.setattr(checkpoints.shutil, "rmtree", rmtree)
    assert (root / ".del-step-00000004" / checkpoints.STATE_FILE).is_file()
    assert [p.name for p in checkpoints.complete_checkpoints(root)] == ["step-00000008", "step-00000012"]
    save(16)
    assert sorted(p.name for p in root.iterdir()) == ["step-00000012", "step-00000016"]


# ----------------------------------------------------------------------------- memory

MEMORY = r"""
import json, resource, sys
import torch
torch.set_num_threads(1)
from train import pretrain_gpt
from train.run import engine

samples = []
step = engine.Engine._micro_step
def _micro_step(self, batch, window, bar):
    done = step(self, batch, window, bar)
    if done and self.state.step % 50 == 0:
        with open("/proc/self/statm") as f:
            samples.append((self.state.step, int(f.read().split()[1]) * resource.getpagesize() / 2**20))
    return done
engine.Engine._micro_step = _micro_step
pretrain_gpt.main(sys.argv[1:])
print(json.dumps(samples))
"""


@pytest.mark.slow
def test_resident_memory_is_flat_over_1000_cpu_steps(tmp_path):
    result = _python(MEMORY, "--recipe", "gpt-pretrain-tiny", "--output_dir", tmp_path,
                     "--progress_bar", "false", "--report_to", "none", "--max_steps", "1000", "--save_steps", "250",
                     "--logging_steps", "10", "--eval_size", "16", "--max_new_tokens", "4")
    samples = json.loads(result.stdout.strip().splitlines()[-1])  # (step, resident MiB) every 50 steps
    assert [s for s, _ in samples] == list(range(50, 1001, 50))
    after_warmup = [mib for step, mib in samples if step >= 200]
    print("resident MiB by step:", samples)
    assert max(after_warmup) - min(after_warmup) < 20, samples  # noise of the allocator, not a leak
    assert sum(after_warmup[-4:]) / 4 - sum(after_warmup[:4]) / 4 < 5, samples  # and no trend
