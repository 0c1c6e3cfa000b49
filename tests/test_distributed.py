"""Two CPU processes (gloo DDP) through `accelerate launch`: the run completes, heads unused by the loss
never break DDP, and the per-step losses equal a one-process run with the same global batch."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from train.pretrain_bert import main as pretrain_bert

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]
NO_DROPOUT = "{hidden_dropout_prob: 0.0, attention_probs_dropout_prob: 0.0}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _losses(out: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "loss" in r}


def launch_two_processes(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(_free_port()), "-m", "train.pretrain_bert", *args]
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory):
    from train.core.corpus import tokenizer_training_texts
    from train.core.tokenization import train_tokenizer

    folder = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer("bert", tokenizer_training_texts(size=200), 600, model_max_length=64).save_pretrained(folder)
    return str(folder)


def test_two_processes_match_one_process_with_the_same_global_batch(tmp_path, tokenizer_folder):
    common = ["--recipe", "configs/recipes/bert-pretrain-tiny.yaml", "--tokenizer", tokenizer_folder,
              "--model_overrides", NO_DROPOUT, "--max_steps", "4", "--save_steps", "2", "--progress_bar", "false",
              "--report_to", "none", "--train_size", "60"]
    result = launch_two_processes(*common, "--per_device_train_batch_size", "4", "--output_dir", str(tmp_path / "ddp"))
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
    launch_two_processes("--recipe", "configs/recipes/bert-pretrain-tiny.yaml", "--nsp", "false", "--max_steps", "3",
                         "--save_steps", "0", "--progress_bar", "false", "--report_to", "none", "--train_size", "40",
                         "--output_dir", str(out))
    records = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3]  # one logger: the processes form one group
    assert (out / "checkpoints" / "step-00000003" / "random_states_1.pkl").is_file()
    config = json.loads((tmp_path / "mlm" / "model" / "config.json").read_text())
    assert config["architectures"] == ["LineageBertForMaskedLM"]
