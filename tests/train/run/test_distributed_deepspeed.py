"""DeepSpeed ZeRO-2 and ZeRO-3 on two CPU processes through `accelerate launch` with the shipped configs: DeepSpeed's
CPU accelerator on gloo, which `distributed.build_accelerator` asks Accelerate for where there is no GPU.

Each run records DeepSpeed and its stage; under ZeRO-3 every parameter is partitioned (each process holds half of its
elements) and the tied head is still the embedding. The per-step losses equal a one-process run with the same global
batch (dropout off, abs 1e-5), and the final folder (ZeRO-3: gathered on the main process) is an ordinary
`save_pretrained` folder that computes what the one-process folder computes. ZeRO-3 for each family with tied
embeddings (GPT fine-tuning with the auxiliary LM loss, which reads the tied embedding outside the embedding's own
forward: test_distributed.py). DeepSpeed accumulates and clips as the recipe says. A ZeRO checkpoint resumes on the
same curve in as many processes as wrote it and in another number (through DeepSpeed's universal format); another
stage is refused; without DeepSpeed it resumes from the universal format, and a portable checkpoint is refused
under DeepSpeed. ZeRO checkpoints average as portable ones do, at the end of a run
(`average_last_checkpoints`) and with `lineage average`. The GPU runs:
test_distributed_fsdp.py (`gpu`-marked).
"""

import json
from importlib import metadata
from pathlib import Path

import pytest
from test_distributed import launch_two_processes
from test_distributed_fsdp import (
    FAMILIES,
    _args,
    assert_same_losses,
    check_final_folder,
    one_process,
    resumed_from,
)

pytest.importorskip("deepspeed", reason="the DeepSpeed runs need `pip install deepspeed` (in the test extra)")

CONFIG = "train/configs/accelerate/deepspeed_zero{}.yaml"


def zero_processes(family: str, stage: int, out: Path, *extra: str, processes: int = 2, succeed: bool = True):
    """`family`'s entry script in `processes` CPU processes under the shipped ZeRO-`stage` config (GPUs hidden, no
    ACCELERATE_USE_CPU: DeepSpeed runs them on gloo), through tests/distributed_driver.py."""
    return launch_two_processes(*_args(family, out, 4, *extra), module=FAMILIES[family][0],
                                config=CONFIG.format(stage), cpu="deepspeed", driver=True, succeed=succeed,
                                processes=processes)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Runs made once per module, on first use: `runs("gpt", "one")`, `runs("gpt", 3)` (ZeRO-3)."""
    made: dict[tuple, Path] = {}

    def get(family: str, kind) -> Path:
        if (family, kind) not in made:
            out = tmp_path_factory.mktemp(f"{family}-{kind}")
            made[family, kind] = one_process(family, out) if kind == "one" else out
            if kind != "one":
                zero_processes(family, kind, out)
        return made[family, kind]
    return get


def check_zero_run(family: str, stage: int, run: Path, one: Path) -> None:
    launch = json.loads((run / "logs" / "metrics.jsonl").read_text().splitlines()[0])["launch"]
    assert launch == {"distributed_type": "DEEPSPEED", "num_processes": 2, "mixed_precision": "no",
                      "deepspeed_zero_stage": stage, "deepspeed_version": metadata.version("deepspeed")}
    results = json.loads((run / "model" / "results.json").read_text())
    assert {k: results[k] for k in launch} == launch
    for rank in (0, 1):
        record = json.loads((run / f"prepared-rank{rank}.json").read_text())
        assert record["tied"]
        if stage == 3:  # the parameters themselves are partitioned, half of each on each process
            assert record["plain"] == [] and record["partitioned"]
            for name, (local, full) in record["partitioned"].items():
                assert local == -(-full // 2), name
        else:  # ZeRO-2 partitions gradients and optimizer state only
            assert record["partitioned"] == {}
    assert_same_losses(run, one, [1, 2, 3, 4])
    check_final_folder(family, run / "model", one / "model")


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_gpt_matches_one_process_and_saves_an_ordinary_folder(runs, stage):
    check_zero_run("gpt", stage, runs("gpt", stage), runs("gpt", "one"))


@pytest.mark.parametrize("family", ["bert", "transformer"])
def test_zero3_keeps_each_family_tie_and_matches_one_process(runs, family):
    check_zero_run(family, 3, runs(family, 3), runs(family, "one"))


def test_zero_accumulates_and_clips_as_the_recipe_says(tmp_path):
    """The shipped configs say 1 micro-batch per step and a clipping norm of 1.0, which DeepSpeed obeys: a recipe's 2
    and 0.5 are given to it (and said), so the run trains as one process does with the same recipe."""
    extra = ("--gradient_accumulation_steps", "2", "--max_grad_norm", "0.5")
    one = one_process("gpt", tmp_path / "one", *extra)
    result = zero_processes("gpt", 2, tmp_path / "zero", *extra)
    assert "deepspeed config: gradient_accumulation_steps 1 -> 2, gradient_clipping 1.0 -> 0.5 (the recipe's)" \
        in result.stdout
    assert_same_losses(tmp_path / "zero", one, [1, 2, 3, 4])


def test_zero3_checkpoint_resumes_in_as_many_processes_on_the_same_curve(runs, tmp_path):
    zero = runs("gpt", 3)
    out = resumed_from(zero / "checkpoints" / "step-00000002", tmp_path / "run")
    zero_processes("gpt", 3, out, "--resume_from_checkpoint", "latest")
    assert_same_losses(out, zero, [3, 4])
    check_final_folder("gpt", out / "model", runs("gpt", "one") / "model")


@pytest.mark.parametrize("stage,written,resumed", [(2, 2, 1), (3, 2, 1), (3, 1, 2)])
def test_zero_checkpoint_resumes_in_another_number_of_processes_on_the_same_curve(runs, tmp_path, stage, written,
                                                                                  resumed):
    """Through DeepSpeed's universal format, converted into a temporary folder of the run and deleted once loaded;
    the ZeRO-3 case also checks that each partition keeps its own Adam step count (`checkpoints._own_steps`: shared,
    the second resumed step was 3e-4 off)."""
    if written == 2:
        zero = runs("gpt", stage)
    else:
        zero = tmp_path / "written"
        zero_processes("gpt", stage, zero, "--per_device_train_batch_size", "8", processes=1)
        assert_same_losses(zero, runs("gpt", "one"), [1, 2, 3, 4])
    out = resumed_from(zero / "checkpoints" / "step-00000002", tmp_path / "run")
    result = zero_processes("gpt", stage, out, "--resume_from_checkpoint", "latest", "--per_device_train_batch_size",
                            str(8 // resumed), processes=resumed)
    assert "converting checkpoint step-00000002 to DeepSpeed's universal format" in result.stdout
    assert f"was written by {written} processes and resumes in {resumed}" in result.stdout
    assert_same_losses(out, zero, [3, 4])
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000002", "step-00000004"]
    check_final_folder("gpt", out / "model", runs("gpt", "one") / "model")


def test_zero_checkpoint_is_refused_at_another_stage_before_anything_is_written(runs, tmp_path):
    out = resumed_from(runs("gpt", 3) / "checkpoints" / "step-00000002", tmp_path / "run")
    result = zero_processes("gpt", 2, out, "--resume_from_checkpoint", "latest", succeed=False)
    assert result.returncode != 0
    assert "was written under ZeRO stage 3 and this run is ZeRO stage 2: a DeepSpeed checkpoint resumes at the " \
           "stage that wrote it" in result.stderr
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000002"]
    assert not (out / "logs").exists()


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_checkpoint_resumes_without_deepspeed_on_the_same_curve(runs, tmp_path, stage):
    """From the universal format: its weights and Adam moments loaded as a portable checkpoint's are."""
    zero = runs("gpt", stage)
    out = resumed_from(zero / "checkpoints" / "step-00000002", tmp_path / "run")
    one_process("gpt", out, "--resume_from_checkpoint", "latest")
    assert_same_losses(out, zero, [3, 4])
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000002", "step-00000004"]
    check_final_folder("gpt", out / "model", runs("gpt", "one") / "model")


def test_portable_checkpoint_is_refused_under_deepspeed_before_anything_is_written(runs, tmp_path):
    """DeepSpeed initializes its partitions' optimizer state only at the first step: there is nothing to load a
    portable checkpoint's into."""
    out = resumed_from(runs("gpt", "one") / "checkpoints" / "step-00000002", tmp_path / "zero")
    result = zero_processes("gpt", 3, out, "--resume_from_checkpoint", "latest", succeed=False)
    assert result.returncode != 0
    assert ("was written by a run with distributed_type=NO, and this run has distributed_type=DEEPSPEED: it resumes "
            "in one process, or under DDP or FSDP") in result.stderr
    assert not (out / "logs").exists()


def _largest_difference(first: Path, second: Path) -> float:
    from safetensors.torch import load_file

    a, b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert sorted(a) == sorted(b)
    return max((a[key].float() - b[key].float()).abs().max().item() for key in a)


def test_zero3_run_averages_its_last_checkpoints_as_one_process_does(runs, tmp_path):
    """`average_last_checkpoints` reads the DeepSpeed checkpoints' partitions (DeepSpeed's `zero_to_fp32`) and sets the
    partitioned parameters from the main process (it failed after training: 'holds no model.safetensors')."""
    extra = ("--average_last_checkpoints", "2")
    one = one_process("gpt", tmp_path / "one", *extra)
    result = zero_processes("gpt", 3, tmp_path / "zero", *extra)
    assert "average_last_checkpoints: the model is the mean of step-00000002, step-00000004" in result.stdout
    assert _largest_difference(tmp_path / "zero" / "model", runs("gpt", 3) / "model") > 1e-4  # not the last step's
    check_final_folder("gpt", tmp_path / "zero" / "model", one / "model")


@pytest.mark.parametrize("stage", [2, 3])
def test_lineage_average_reads_zero_checkpoints_as_portable_ones(runs, tmp_path, stage):
    from train import average

    folders = [average.main([*(str(run / "checkpoints" / f"step-0000000{step}") for step in (2, 4)),
                             "--output_dir", str(tmp_path / kind)]) for kind, run in (("zero", runs("gpt", stage)),
                                                                                      ("one", runs("gpt", "one")))]
    assert _largest_difference(*folders) < 1e-5
    assert _largest_difference(folders[0], runs("gpt", stage) / "model") > 1e-4


def test_deepspeed_under_accelerate_use_cpu_is_refused_before_anything_is_written(tmp_path):
    result = launch_two_processes(*_args("gpt", tmp_path / "run", 4), module="train.pretrain_gpt",
                                  config=CONFIG.format(2), cpu=True, succeed=False)
    assert result.returncode != 0
    assert ("the accelerate config asks for DEEPSPEED, but this machine would run it as DistributedType.MULTI_CPU: "
            "ACCELERATE_USE_CPU=true makes Accelerate run the processes as DDP") in result.stderr
    assert not (tmp_path / "run").exists()  # refused before the folder is claimed: no run.json, no tokenizer
