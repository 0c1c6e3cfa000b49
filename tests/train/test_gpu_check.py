"""`lineage gpu-check` (issue 37): its dry run runs every part of the plan on the CPU, the parts of a stage side by
side, and reports each step with its command, status and figures; without CUDA and without --dry_run it refuses before
any work, as it does a bad --parts; a step past its time is killed and the steps after it are recorded as not run."""

import json
import time
from pathlib import Path

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
    assert [part["part"] for part in report["parts"]] == [name for stage in gpu_check.STAGES for name in stage.parts]
    assert sorted(part["part"] for part in report["parts"]) == sorted(part.name for part in gpu_check.PARTS)
    markdown = (folder / "report.md").read_text()
    for part in report["parts"]:
        planned = gpu_check.PART[part["part"]]
        assert part["status"] == "passed", (part["part"], [(s["step"], s["status"], s.get("tail")) for s in
                                                           part["steps"]])
        assert part["dry_run"] == planned.dry_run and part["dry_run"] in markdown
        assert part["steps"] and all(s["command"].startswith("python -m ") for s in part["steps"])
        assert all(s["status"] in ("passed", "killed at a checkpoint") for s in part["steps"])
        assert all(f"`{s['command']}`" in markdown for s in part["steps"])
    assert report["dry_run"] is True and report["device"].startswith("cpu") and report["torch"] == torch.__version__
    assert sum(report["plan"].values()) == pytest.approx(report["budget_seconds"], abs=0.5)


def test_the_parts_of_a_stage_run_side_by_side_and_the_stages_one_after_another(dry_run):
    _, report = dry_run
    parts = {part["part"]: part for part in report["parts"]}
    for stage, following in zip(gpu_check.STAGES, gpu_check.STAGES[1:]):
        ends = max(parts[name]["began"] + parts[name]["seconds"] for name in stage.parts)
        assert all(parts[name]["began"] >= ends - 0.2 for name in following.parts)
    for stage in gpu_check.STAGES:
        spans = [(parts[name]["began"], parts[name]["began"] + parts[name]["seconds"]) for name in stage.parts]
        assert max(began for began, _ in spans) < min(end for _, end in spans)  # every part running at one moment


def test_the_dry_run_reads_the_figures_of_each_part(dry_run):
    _, report = dry_run
    steps = {(part["part"], s["step"]): s["figures"] for part in report["parts"] for s in part["steps"]}
    assert steps["pytest", "pytest -m gpu"]["tests collected"] >= 1
    assert steps["pytest", "pytest -m gpu (sharding)"]["tests collected"] >= 3  # FSDP2, ZeRO-2, ZeRO-3 on one GPU
    benchmarks = [figures for (part, _), figures in steps.items() if part == "benchmark"]
    assert len(benchmarks) == gpu_check.TARGETS + 1
    assert all(f["train ratio"] > 0 and f["train lineage tokens_per_s"] > 0 for f in benchmarks)
    assert all(f[f"train {name} profiled launches"] > 0 for f in benchmarks for name in ("lineage", "reference"))
    assert "generate dynamic ratio" in steps["benchmark", "generation"]
    assert steps["training", "prepared_run"]["prepared_store_reused"] is True
    assert steps["training", "resumed_run"]["resumes"] == 1
    assert steps["training", "pretrain_gpt"]["tokens_per_s"] > 0 and steps["training", "pretrain_gpt"]["steps"] == 2
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


@pytest.mark.parametrize("names", [["env"], ["training", "benchmark"], ["pytest", "training", "pretraining"],
                                   [p.name for p in gpu_check.PARTS]])
def test_the_stages_of_the_parts_asked_share_the_whole_budget_in_the_plan_order(names):
    planned = gpu_check.plan(",".join(reversed(names)), 300)
    stages = [(stage, [n for n in stage.parts if n in names]) for stage in gpu_check.STAGES]
    stages = [(stage, asked) for stage, asked in stages if asked]
    assert [[p.name for p in s.parts] for s in planned] == [asked for _, asked in stages]
    assert sum(s.budget for s in planned) == pytest.approx(300)
    total = sum(stage.seconds for stage, _ in stages)
    assert all(s.budget == pytest.approx(300 * stage.seconds / total) for s, (stage, _) in zip(planned, stages))


def test_the_default_stages_fit_the_default_budget_and_the_targets_come_first():
    assert sum(stage.seconds for stage in gpu_check.STAGES) == gpu_check.make_parser().get_default("budget_seconds")
    assert sorted(name for stage in gpu_check.STAGES for name in stage.parts) == sorted(gpu_check.PART)
    rows = [step.name for step in gpu_check.benchmark_steps(Path("b"), False, 290)]
    targets = [f"{name} compiled" for name, *_ in gpu_check.BENCHMARKS[:gpu_check.TARGETS]] + ["generation"]
    assert rows[:len(targets)] == targets and len(rows) == 2 * len(gpu_check.BENCHMARKS) + 1


def test_a_step_past_its_time_is_killed_and_the_rest_is_not_run(tmp_path):
    sleeper = ("timeit", "-n", "1", "-r", "1", "import time; time.sleep(60)")
    part = gpu_check.Part("sleep", lambda folder, dry, seconds: [gpu_check.Step("first", sleeper, 10),
                                                                 gpu_check.Step("second", sleeper)], "")
    began = time.monotonic()
    result = gpu_check.run_part(part, tmp_path, True, time.monotonic() + 3, gpu_check.step_env(tmp_path, True))
    assert time.monotonic() - began < 30
    assert result["status"] == "timed out"
    assert [s["status"] for s in result["steps"]] == ["timed out", "not run (out of time)"]


def test_the_lanes_of_a_part_run_side_by_side_and_its_rows_keep_the_plan_order(tmp_path):
    """Two lanes of a 4 s and a 0 s step each: the part takes less than both 4 s steps in turn; a lane's steps in turn;
    a lane out of time leaves its own steps not run, not the other lane's."""
    def sleep(seconds):
        return ("timeit", "-n", "1", "-r", "1", f"import time; time.sleep({seconds})")

    steps = [gpu_check.Step("a1", sleep(4), lane="a"), gpu_check.Step("b1", sleep(4), lane="b"),
             gpu_check.Step("a2", sleep(0), lane="a"), gpu_check.Step("b2", sleep(0), lane="b")]
    part = gpu_check.Part("lanes", lambda folder, dry, seconds: steps, "")
    began = time.monotonic()
    result = gpu_check.run_part(part, tmp_path, True, time.monotonic() + 60, gpu_check.step_env(tmp_path, True))
    assert time.monotonic() - began < 2 * 4  # the two 4 s steps at once
    assert [s["step"] for s in result["steps"]] == ["a1", "b1", "a2", "b2"]
    assert result["status"] == "passed"
    slow = [gpu_check.Step("a1", sleep(60), lane="a"), gpu_check.Step("a2", sleep(0), lane="a"),
            gpu_check.Step("b1", sleep(0), lane="b")]
    part = gpu_check.Part("lanes", lambda folder, dry, seconds: slow, "")
    result = gpu_check.run_part(part, tmp_path, True, time.monotonic() + 5, gpu_check.step_env(tmp_path, True))
    assert [(s["step"], s["status"]) for s in result["steps"]] == [
        ("a1", "timed out"), ("a2", "not run (out of time)"), ("b1", "passed")]


def test_every_command_of_the_gpu_plan_parses_and_passes_its_argument_checks(tmp_path, monkeypatch):
    """The plan's own command lines (not the dry run's) read by each command's parser and checks, so that a flag the
    GPU run would refuse (an unknown key, a length past a preset's positions) is found here, not in the GPU's minutes.
    The benchmark's device checks see a GPU."""
    from train import benchmark, train_tokenizer
    from train.run import recipes

    monkeypatch.setattr(benchmark, "device", lambda: torch.device("cuda"))
    monkeypatch.setattr(benchmark, "compiler_error", lambda device_type="cpu": None)
    scripts = {"pretrain_bert", "pretrain_gpt", "finetune", "train_translation"}
    checked = set()
    for stage in gpu_check.STAGES:
        for name in stage.parts:
            for step in gpu_check.PART[name].steps(tmp_path / name, False, 300):
                module, argv = step.argv[0], list(step.argv[1:])
                if module == "train.benchmark":
                    benchmark.parse_args(argv)
                elif module.removeprefix("train.") in scripts:
                    recipes.parse_args(argv, None, "", module.removeprefix("train."))
                elif module == "train.prepare":
                    recipes.parse_args(argv, None, "")
                elif module == "train.train_tokenizer":
                    train_tokenizer.parse_args(argv)
                else:
                    continue
                checked.add(module)
    assert checked == {"train.benchmark", "train.pretrain_bert", "train.pretrain_gpt", "train.finetune",
                       "train.train_translation", "train.prepare", "train.train_tokenizer"}
