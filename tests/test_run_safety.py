"""A run never loses work and never misrecords what it did (issue 24): an output folder belongs to one run (a second
run is refused, or deletes the first's files naming each; a live lock keeps a concurrent run out, a dead one's lock
is taken over), and a resume is checked against the recipe (another architecture is named key by key; a changed
learning rate takes effect and is recorded in the log, the run record, recipe.yaml and the card)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from train.core import run_folder
from train.core.checkpoints import CheckpointError, ResumeMismatchError, complete_checkpoints
from train.core.recipes import recipe_from_dict
from train.core.run_folder import OutputDirError
from train.finetune import main as finetune

torch.set_num_threads(1)
TINY = ["--recipe", "configs/recipes/bert-finetune-nli-tiny.yaml", "--progress_bar", "false", "--report_to", "none",
        "--train_size", "32", "--eval_size", "16", "--max_steps", "4", "--save_steps", "2", "--save_total_limit", "3"]


def run(out: Path, *extra: str):
    return finetune([*TINY, "--output_dir", str(out), *extra])


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in (run_folder.LOCK,)}


def log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """One finished run (4 steps, checkpoints at 2 and 4) whose folder the tests below try to reuse."""
    out = tmp_path_factory.mktemp("first") / "run"
    run(out)
    return out


@pytest.fixture
def finished(first_run, tmp_path):
    """A private copy of the finished run's folder."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(first_run, out)
    return out


def test_a_run_writes_its_record_and_releases_its_lock(first_run):
    record = json.loads((first_run / run_folder.RECORD).read_text())
    assert set(record) >= {"recipe_sha256", "started", "pid", "host", "command"}
    assert len(record["recipe_sha256"]) == 16
    assert not (first_run / run_folder.LOCK).exists()


def test_second_run_into_the_same_folder_is_refused_and_the_first_runs_files_stay(finished):
    before = files(finished)
    with pytest.raises(OutputDirError) as caught:
        run(finished, "--seed", "7", "--max_steps", "2")
    message = str(caught.value)
    assert str(finished.resolve()) in message
    assert "--resume_from_checkpoint latest" in message and "--overwrite_output_dir true" in message
    assert files(finished) == before  # tokenizer, checkpoints, log and model untouched


def test_overwrite_output_dir_deletes_the_first_runs_files_naming_each(finished, capsys):
    run(finished, "--max_steps", "2", "--overwrite_output_dir", "true")
    printed = capsys.readouterr().out
    for name in ("checkpoints", "logs", "tokenizer", "model"):
        assert f"overwrite_output_dir: deleting {finished.resolve() / name}" in printed
    assert [p.name for p in complete_checkpoints(finished / "checkpoints")] == ["step-00000002"]  # no step 4 left
    assert max(r["step"] for r in log(finished)) == 2


def test_output_dir_that_is_a_file_is_refused(tmp_path):
    file = tmp_path / "out.txt"
    file.write_text("not a folder")
    with pytest.raises(OutputDirError, match=r"recipe key 'output_dir': .*out.txt is a file"):
        run_folder.claim(recipe_from_dict({"output_dir": str(file / "run")}))


def test_a_live_runs_lock_keeps_a_second_run_out_and_a_dead_ones_is_taken_over(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / run_folder.LOCK).write_text(json.dumps({"pid": other.pid, "host": __import__("socket").gethostname(),
                                                       "started": "then"}))
        with pytest.raises(OutputDirError, match=f"in use by another run \\(process {other.pid} "):
            run_folder.claim(recipe_from_dict({"output_dir": str(out)}))
    finally:
        other.kill()
        other.wait()
    recipe = recipe_from_dict({"output_dir": str(out)})
    run_folder.claim(recipe)
    assert f"removing the stale lock of process {other.pid}" in capsys.readouterr().out
    assert json.loads((out / run_folder.LOCK).read_text())["pid"] == __import__("os").getpid()
    run_folder.release(recipe)
    assert not (out / run_folder.LOCK).exists()


def test_resume_with_another_architecture_names_the_key_and_never_says_corrupt(finished):
    with pytest.raises(ResumeMismatchError) as caught:
        run(finished, "--resume_from_checkpoint", "latest", "--max_steps", "6",
            "--model_overrides", "{num_hidden_layers: 1}")
    message = str(caught.value)
    assert "num_hidden_layers=2" in message and "num_hidden_layers=1" in message
    assert "corrupt" not in message.replace("sound", "")


def test_resume_with_other_data_is_refused_naming_it(finished):
    with pytest.raises(CheckpointError, match=r"data: the checkpoint was written with examples=32, this run has "
                                              r"examples=24"):
        run(finished, "--resume_from_checkpoint", "latest", "--max_steps", "6", "--train_size", "24")


def test_resume_with_a_changed_learning_rate_applies_it_and_records_it(finished, capsys):
    run(finished, "--resume_from_checkpoint", "latest", "--max_steps", "6", "--learning_rate", "1.0e-6",
        "--lr_scheduler", "constant")
    printed = capsys.readouterr().out
    assert "learning_rate: 0.001 -> 1e-06 (changed on resume)" in printed
    assert "lr_scheduler: linear -> constant (changed on resume)" in printed
    records = log(finished)
    assert [r["lr"] for r in records if "lr" in r and r["step"] > 4] == [pytest.approx(1e-6)] * 2  # what ran
    launch = [r for r in records if "launch" in r][-1]
    assert launch["changed"]["learning_rate"] == [0.001, 1e-6]
    assert json.loads((finished / run_folder.RECORD).read_text())["resumes"][-1]["changed"]["lr_scheduler"] == [
        "linear", "constant"]
    assert yaml.safe_load((finished / "model" / "recipe.yaml").read_text())["learning_rate"] == 1e-6
    assert "`learning_rate` 0.001 -> 1e-06" in (finished / "model" / "README.md").read_text()
