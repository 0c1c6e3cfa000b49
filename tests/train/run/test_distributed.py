"""Two CPU processes (gloo DDP) through `accelerate launch`: the run completes, heads unused by the loss
never break DDP, and the per-step losses equal a one-process run with the same global batch; a launch that cannot
be honoured is refused, and a failing process fails the whole run. FSDP: tests/train/run/test_distributed_fsdp.py."""

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import accelerate
import pytest
import torch
from launching import run_launch
from packaging.version import Version

from train.finetune import main as finetune
from train.pretrain_bert import main as pretrain_bert

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[3]
NO_DROPOUT = "{hidden_dropout_prob: 0.0, attention_probs_dropout_prob: 0.0}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _losses(out: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "loss" in r}


def launch_two_processes(*args: str, module: str = "train.pretrain_bert", config: str | None = None,
                         cpu: bool | str = True, driver: bool = False, succeed: bool = True,
                         processes: int = 2) -> subprocess.CompletedProcess:
    """`accelerate launch` of two processes (or `processes`): gloo DDP, or the distribution of an accelerate `config`;
    `cpu` sets ACCELERATE_USE_CPU, `cpu="deepspeed"` hides the GPUs instead (DeepSpeed then runs on gloo: with
    ACCELERATE_USE_CPU Accelerate drops it); `driver` runs the module through tests/distributed_driver.py."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    env.pop("ACCELERATE_USE_CPU", None)
    paths = [str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH")]  # the driver's imports, and `launching`
    env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    if cpu == "deepspeed":
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif cpu:
        env["ACCELERATE_USE_CPU"] = "true"
    how = (["--config_file", config] if config else
           ["--multi_gpu", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"])
    what = [str(REPO / "tests" / "distributed_driver.py"), module] if driver else ["-m", module]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *how, "--num_processes", str(processes),
           "--main_process_port", str(_free_port()), *what, *args]
    result = run_launch(cmd, env)
    if succeed:
        assert result.returncode == 0, result.stderr[-12000:]
    return result


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory):
    from train.data.corpus import tokenizer_training_texts
    from train.data.tokenization import train_tokenizer

    folder = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer("bert", tokenizer_training_texts(size=200), 600, model_max_length=64).save_pretrained(folder)
    return str(folder)


def test_two_processes_match_one_process_with_the_same_global_batch(tmp_path, tokenizer_folder):
    common = ["--recipe", "bert-pretrain-tiny", "--tokenizer", tokenizer_folder,
              "--model_overrides", NO_DROPOUT, "--max_steps", "4", "--save_steps", "2", "--progress_bar", "false",
              "--report_to", "none", "--train_size", "60", "--logging_steps", "1"]
    launch_two_processes(*common, "--per_device_train_batch_size", "4", "--output_dir", str(tmp_path / "ddp"))
    assert (tmp_path / "ddp/checkpoints/step-00000004/random_states_1.pkl").is_file()  # two processes saved
    pretrain_bert([*common, "--per_device_train_batch_size", "8", "--output_dir", str(tmp_path / "one")])
    two, one = _losses(tmp_path / "ddp"), _losses(tmp_path / "one")
    assert sorted(two) == sorted(one) == [1, 2, 3, 4]
    for step in one:
        assert two[step] == pytest.approx(one[step], abs=1e-5), step
    assert (tmp_path / "ddp" / "model" / "model.safetensors").is_file()


def test_two_processes_without_nsp_head_complete(tmp_path):
    """With NSP off the model has no pooler or NSP head, so every parameter gets a gradient and DDP, which
    runs without an unused-parameter search, never stalls; three steps prove later reductions work. The
    tokenizer is trained by the main process and loaded by the other (one vocabulary for both)."""
    out = tmp_path / "mlm"
    launch_two_processes("--recipe", "bert-pretrain-tiny", "--nsp", "false", "--max_steps", "3",
                         "--save_steps", "0", "--progress_bar", "false", "--report_to", "none", "--train_size", "40",
                         "--logging_steps", "1", "--output_dir", str(out))
    records = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3]  # one logger: the processes form one group
    assert (out / "checkpoints" / "step-00000003" / "random_states_1.pkl").is_file()
    config = json.loads((tmp_path / "mlm" / "model" / "config.json").read_text())
    assert config["architectures"] == ["LineageBertForMaskedLM"]


def test_fsdp_config_on_processes_that_form_no_group_is_refused(tmp_path, tokenizer_folder):
    """fsdp.yaml on a machine without a GPU: Accelerate from 1.13 would run two independent one-process trainings
    (DistributedType.NO). The run stops before the first step and says why. Accelerate 1.9 to 1.12 form one gloo
    group of the two processes there and train it with FSDP2 (seen with 1.12): then the run is one run."""
    result = launch_two_processes(
        "--recipe", "bert-pretrain-tiny", "--tokenizer", tokenizer_folder, "--max_steps", "2",
        "--progress_bar", "false", "--report_to", "none", "--train_size", "20", "--output_dir", str(tmp_path / "run"),
        config="train/configs/accelerate/fsdp.yaml", cpu=False, succeed=False)
    if Version(accelerate.__version__) < Version("1.13"):
        assert result.returncode == 0, result.stderr[-4000:]
        assert "run: distributed_type=FSDP, num_processes=2" in result.stdout
        return
    assert result.returncode != 0
    assert "the launcher started 2 processes, but they formed no process group" in result.stderr
    assert "ACCELERATE_USE_CPU=true" in result.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_failing_process_fails_the_run_and_keeps_the_last_checkpoint(tmp_path, tokenizer_folder):
    """Process 1 raises in the forward of step 3 (a bad batch); process 0 waits in the gradient all-reduce. The
    launcher stops it: the run exits non-zero within a bounded time, the log names the rank and the error, and the
    checkpoint of step 2 stays complete and alone."""
    from train.run.checkpoints import complete_checkpoints, verify_checkpoint

    out = tmp_path / "run"
    began = time.monotonic()
    result = launch_two_processes(
        "--fail_on_rank", "1", "--fail_at_step", "3", "--recipe", "bert-pretrain-tiny",
        "--tokenizer", tokenizer_folder, "--max_steps", "6", "--save_steps", "2", "--progress_bar", "false",
        "--report_to", "none", "--train_size", "60", "--per_device_train_batch_size", "4", "--output_dir", str(out),
        "--logging_steps", "1", driver=True, succeed=False)
    elapsed = time.monotonic() - began
    assert result.returncode != 0
    assert elapsed < 180, elapsed  # startup included; a hang would run to the 600 s timeout
    failure = "[rank 1 of 2] training failed at step 3: RuntimeError: injected failure in the batch of step 3"
    assert failure in result.stderr
    assert [p.name for p in complete_checkpoints(out / "checkpoints")] == ["step-00000002"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000002"]  # nothing half written
    verify_checkpoint(out / "checkpoints" / "step-00000002")
    assert sorted(_losses(out)) == [1, 2]


def test_gradient_checkpointing_gives_the_same_losses(tmp_path, tokenizer_folder, monkeypatch):
    """Recomputing every block's activations in the backward (each block runs twice a step) changes no loss,
    dropout included (the recomputation replays the same random masks)."""
    from modeling.layers import (
        LineageAttention,  # inside each block (whose own forward is the checkpointed one)
    )

    calls, forward = [], LineageAttention.forward
    monkeypatch.setattr(LineageAttention, "forward", lambda self, *a, **k: calls.append(1) or forward(self, *a, **k))
    common = ["--recipe", "bert-pretrain-tiny", "--tokenizer", tokenizer_folder,
              "--max_steps", "3", "--save_steps", "0", "--progress_bar", "false", "--report_to", "none",
              "--train_size", "40", "--eval_size", "8", "--logging_steps", "1"]
    pretrain_bert([*common, "--output_dir", str(tmp_path / "plain")])
    plain_calls = len(calls)
    pretrain_bert([*common, "--gradient_checkpointing", "true", "--output_dir", str(tmp_path / "gc")])
    assert len(calls) - plain_calls == plain_calls + 3 * 2  # + one recomputation of both blocks per step
    plain, checkpointed = _losses(tmp_path / "plain"), _losses(tmp_path / "gc")
    assert sorted(plain) == [1, 2, 3]
    for step in plain:
        assert checkpointed[step] == pytest.approx(plain[step], abs=1e-6), step


def test_gradient_checkpointing_is_refused_for_a_model_without_it(tmp_path):
    from train import train_translation

    with pytest.raises(ValueError, match="recipe key 'gradient_checkpointing': LineageRnnForConditionalGeneration"):
        train_translation.main(["--recipe", "rnn-translation-tiny", "--gradient_checkpointing",
                                "true", "--progress_bar", "false", "--report_to", "none",
                                "--output_dir", str(tmp_path / "rnn")])
    assert not (tmp_path / "rnn" / "checkpoints").exists()


def test_fsdp_asked_of_one_plain_process_is_refused(tmp_path, tokenizer_folder, monkeypatch):
    """What `accelerate launch --config_file train/configs/accelerate/fsdp.yaml --num_processes 1` gives each process on
    a machine without a GPU: Accelerate would train unsharded (DistributedType.NO); the run refuses instead."""
    from train.run.distributed import DistributedSetupError

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    with pytest.raises(DistributedSetupError, match="asks for FSDP, but this machine would run it as "
                                                    "DistributedType.NO: FSDP needs several processes in one group"):
        pretrain_bert(["--recipe", "bert-pretrain-tiny", "--tokenizer", tokenizer_folder,
                       "--progress_bar", "false", "--report_to", "none", "--output_dir", str(tmp_path / "run")])
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_deepspeed_on_the_cpu_is_refused_while_a_killed_builds_lock_would_stop_it(tmp_path, tokenizer_folder,
                                                                                  monkeypatch):
    """torch's JIT build of DeepSpeed's CPU op waits, forever and silently, for a `lock` file that a killed build left
    (tried: a one-process ZeRO-2 launch printed nothing more in 60 s); a lock that old is refused by name, before the
    run writes anything, and kept. A fresh lock (a build going on now) is waited for, as torch does."""
    from train.run import distributed

    for name, value in {"TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions"), "ACCELERATE_USE_DEEPSPEED": "true",
                        "LOCAL_RANK": "0", "DS_ACCELERATOR": "cpu"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    lock = tmp_path / "extensions" / "deepspeed_shm_comm" / "lock"
    distributed.check_op_build_lock()  # no lock
    lock.touch()
    distributed.check_op_build_lock()  # a build going on
    written = time.time() - distributed.STALE_BUILD_LOCK_SECONDS - 90
    os.utime(lock, (written, written))
    with pytest.raises(distributed.DistributedSetupError,
                       match=re.escape(f"is locked by {lock}, written 12 minutes ago by a build that was killed")):
        pretrain_bert(["--recipe", "bert-pretrain-tiny", "--tokenizer", tokenizer_folder, "--progress_bar", "false",
                       "--report_to", "none", "--output_dir", str(tmp_path / "run")])
    assert lock.is_file() and not (tmp_path / "run").exists()
    with pytest.raises(distributed.DistributedSetupError, match="Delete that file if no other run is building"):
        distributed.build_accelerator(4)


@pytest.mark.parametrize("how", [
    "ddp", pytest.param("zero3", marks=pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                                          reason="needs `pip install deepspeed` (in the test extra)"))])
def test_gpt_fine_tuning_with_the_auxiliary_lm_loss_in_two_processes_matches_one(tmp_path, how):
    """L2 + 0.5 L1 in two processes (ZeRO-3, DDP) as in one with the same global batch: the LM term is a mean over
    each process's tokens, weighted by its share of them (`finetune._auxiliary_lm`; unweighted, the first step was
    9e-5 off). Under ZeRO-3 that term reads the tied embedding outside the embedding's forward, which DeepSpeed
    gathers."""
    args = ["--recipe", "gpt-finetune-nli-tiny", "--model_overrides", NO_DROPOUT, "--max_steps", "3",
            "--save_steps", "3", "--progress_bar", "false", "--report_to", "none", "--train_size", "32",
            "--eval_size", "8", "--logging_steps", "1"]
    two, one = tmp_path / how, tmp_path / "one"
    config = "train/configs/accelerate/deepspeed_zero3.yaml" if how == "zero3" else None
    launch_two_processes(*args, "--per_device_train_batch_size", "4", "--output_dir", str(two), module="train.finetune",
                         config=config, cpu=True if how == "ddp" else "deepspeed")
    finetune([*args, "--per_device_train_batch_size", "8", "--output_dir", str(one)])
    launch = json.loads((two / "logs" / "metrics.jsonl").read_text().splitlines()[0])["launch"]
    assert launch["distributed_type"] == ("DEEPSPEED" if how == "zero3" else "MULTI_CPU")
    got, want = _losses(two), _losses(one)
    assert sorted(got) == sorted(want) == [1, 2, 3]
    assert [got[s] for s in (1, 2, 3)] == pytest.approx([want[s] for s in (1, 2, 3)], abs=1e-5)
