"""`lineage gpu-check` (issue 37): its dry run runs every part of the plan on the CPU and reports each step with its
command, status and figures; without CUDA and without --dry_run it refuses before any work, as it does a bad --parts;
a step past its time is killed and the steps after it are recorded as not run."""

import json
import time

import pytest
import torch

from train import gpu_check
from train.run.run_folder import OutputDirError


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpu-check") / "out"
    return folder, gpu_check.main(["--output_dir", str(folder), "--dry_run", "true"])


def test_the_dry_run_runs_every_part_and_reports_each_step_with_its_command(dry_run):
    folder, report = dry_run
    assert json.loads((folder / "report.json").read_text()) == json.loads(json.dumps(report))
    assert [part["part"] for part in report["parts"]] == [part.name for part in gpu_check.PARTS]
    markdown = (folder / "report.md").read_text()
    for part, planned in zip(report["parts"], gpu_check.PARTS):
        assert part["status"] == "passed", (part["part"], [(s["step"], s["status"], s.get("tail")) for s in
                                                           part["steps"]])
        assert part["dry_run"] == planned.dry_run and part["dry_run"] in markdown
        assert part["steps"] and all(s["command"].startswith("python -m ") for s in part["steps"])
        assert all(s["status"] in ("passed", "killed at a checkpoint") for s in part["steps"])
        assert all(f"`{s['command']}`" in markdown for s in part["steps"])
    assert report["dry_run"] is True and report["device"].startswith("cpu") and report["torch"] == torch.__version__
    assert sum(report["plan"].values()) == pytest.approx(report["budget_seconds"], abs=0.5)


def test_the_dry_run_reads_the_figures_of_each_part(dry_run):
    _, report = dry_run
    steps = {(part["part"], s["step"]): s["figures"] for part in report["parts"] for s in part["steps"]}
    assert steps["pytest", "pytest -m gpu"]["tests collected"] >= 1
    benchmarks = [figures for (part, _), figures in steps.items() if part == "benchmark"]
    assert len(benchmarks) == len(gpu_check.BENCHMARKS) + 1
    assert all(f["train ratio"] > 0 and f["train lineage tokens_per_s"] > 0 for f in benchmarks)
    assert "generate dynamic ratio" in steps["benchmark", "generation"]
    assert steps["training", "prepared_run"]["prepared_store_reused"] is True
    assert steps["training", "resumed_run"]["resumes"] == 1
    curve = steps["pretraining", "gpt-124m"]["loss_curve"]
    assert [step for step, _ in curve] == sorted({step for step, _ in curve}) and len(curve) >= 2


def test_without_cuda_and_without_dry_run_it_refuses_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        gpu_check.main(["--output_dir", str(tmp_path / "out")])
    assert "no CUDA device" in capsys.readouterr().err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("parts, named", [("env,gpus", "'gpus'"), (",", "at least one part")])
def test_a_bad_parts_is_refused_naming_the_parts(tmp_path, capsys, parts, named):
    with pytest.raises(SystemExit):
        gpu_check.main(["--output_dir", str(tmp_path / "out"), "--dry_run", "true", "--parts", parts])
    error = capsys.readouterr().err
    assert named in error and all(part.name in error for part in gpu_check.PARTS)
    assert not (tmp_path / "out").exists()


def test_a_folder_of_other_files_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(OutputDirError, match="notes.txt"):
        gpu_check.main(["--output_dir", str(tmp_path), "--dry_run", "true", "--parts", "env"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("names", [["env"], ["benchmark", "pretraining"], [p.name for p in gpu_check.PARTS]])
def test_the_parts_asked_share_the_whole_budget_in_the_plan_order(names):
    planned = gpu_check.plan(",".join(reversed(names)), 300)
    assert [p.name for p in planned] == names
    assert sum(p.budget for p in planned) == pytest.approx(300)
    shares = {p.name: p.share for p in gpu_check.PARTS}
    assert all(p.budget / 300 == pytest.approx(shares[p.name] / sum(shares[n] for n in names)) for p in planned)


def test_a_step_past_its_time_is_killed_and_the_rest_is_not_run(tmp_path):
    sleeper = ("timeit", "-n", "1", "-r", "1", "import time; time.sleep(60)")
    part = gpu_check.Part("sleep", 1.0, lambda folder, dry, seconds: [gpu_check.Step("first", sleeper, 10),
                                                                      gpu_check.Step("second", sleeper)], "")
    began = time.monotonic()
    result = gpu_check.run_part(part, tmp_path, True, time.monotonic() + 3, gpu_check.step_env(tmp_path, True))
    assert time.monotonic() - began < 30
    assert result["status"] == "timed out"
    assert [s["status"] for s in result["steps"]] == ["timed out", "not run (out of time)"]
