"""Checkpoint averaging (`average_last_checkpoints`) on two CPU processes (gloo), DDP and FSDP2: the main process
alone opens the checkpoints, every process's model is the one-process average bit for bit, and a refusal is raised
by every process. Also run as the launched script: `python -m test_distributed_averaging RUN BAD OUT`."""

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_distributed import launch_two_processes
from test_distributed_fsdp import FSDP_CPU

from train import pretrain_gpt
from train.run import averaging, checkpoints

RUN = ["--recipe", "gpt-pretrain-tiny", "--progress_bar", "false", "--report_to", "none", "--max_steps", "3",
       "--save_steps", "1", "--save_total_limit", "3", "--eval_size", "4", "--max_new_tokens", "2"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A tiny one-process GPT run with checkpoints at steps 1, 2 and 3, and a copy of its last two, one broken."""
    root = tmp_path_factory.mktemp("averaging")
    pretrain_gpt.main([*RUN, "--output_dir", str(root / "run")])
    for path in checkpoints.complete_checkpoints(root / "run" / "checkpoints")[-2:]:
        shutil.copytree(path, root / "broken" / path.name)
    (root / "broken" / path.name / "model.safetensors").unlink()
    return root


def one_process_average(run: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    paths = checkpoints.complete_checkpoints(run / "checkpoints")[-2:]
    model = AutoModelForCausalLM.from_pretrained(run / "model")
    averaging.load_averaged(model, averaging.average_weights([averaging.checkpoint_member(p, str(p)) for p in paths]),
                            "one process")
    return model.state_dict()


@pytest.mark.parametrize("config", [None, FSDP_CPU], ids=["ddp", "fsdp"])
def test_the_main_process_alone_reads_the_checkpoints_and_every_process_gets_the_same_average(run, tmp_path,
                                                                                          monkeypatch, config):
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    launch_two_processes(str(run / "run"), str(run / "broken"), str(tmp_path), module=Path(__file__).stem,
                         config=config)
    want, last = one_process_average(run / "run"), checkpoints.complete_checkpoints(run / "run" / "checkpoints")[-2:]
    final = load_file(last[1] / "model.safetensors")
    assert any(not torch.equal(want[k], tensor) for k, tensor in final.items())  # an average, not the last weights
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert seen["opened"] == ([str(p / "model.safetensors") for p in last] if rank == 0 else [])
        assert seen["names"] == [p.name for p in last]
        assert "broken" in seen["refused"] and "model.safetensors should have" in seen["refused"]
        got = torch.load(tmp_path / f"averaged-rank{rank}.pt", weights_only=True)
        assert sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want), rank


def main(argv: list[str]) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from transformers import AutoModelForCausalLM

    from train.run import distributed

    run, broken, out = map(Path, argv)
    accelerator = distributed.build_accelerator(1)
    model = AutoModelForCausalLM.from_pretrained(run / "model")
    model, _ = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.0))  # FSDP2 takes both at once
    opened, safe_open = [], averaging.safe_open
    averaging.safe_open = lambda file, *args: opened.append(str(file)) or safe_open(file, *args)
    try:
        averaging.average_into(accelerator, model, broken, 2)
        refused = None
    except averaging.AveragingError as error:
        refused = str(error)
    names = averaging.average_into(accelerator, model, run / "checkpoints", 2)
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    rank = accelerator.process_index
    torch.save({k: v.clone() for k, v in state.items()}, out / f"averaged-rank{rank}.pt")
    (out / f"rank{rank}.json").write_text(json.dumps({"opened": opened, "refused": refused, "names": names}))


if __name__ == "__main__":
    main(sys.argv[1:])
