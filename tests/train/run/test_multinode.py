"""Two machines proven on one: two "nodes", each a launcher started as on its own machine (`torchrun --nnodes 2
--node_rank R`, `accelerate launch --num_machines 2 --machine_rank R`) with one process, on the loopback (gloo),
sharing one output folder and one LINEAGE_CACHE as on a shared file system. In memory the corpus is prepared once
(once per node where each has its own cache); streamed from a folder of 4 shards each node tokenizes only its own 2;
the losses equal one process's with the same global batch, node 0 alone publishes the model (node 1 adds only its
random state to each checkpoint), and a second launch resumes the checkpoint. docs/scaling.md, "Several machines".
"""

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import exact_resume
from launching import LAUNCH_TIMEOUT, stop, with_stacks

from train.pretrain_gpt import main as pretrain_gpt

REPO = Path(__file__).resolve().parents[3]
DRIVER = str(REPO / "tests" / "distributed_driver.py")
NO_DROPOUT = "{hidden_dropout_prob: 0.0, attention_probs_dropout_prob: 0.0}"
PREPARED = re.compile(r": prepared [\d,]+ documents")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_nodes(launcher: str, what: list[str], caches: list[Path], hf_cache: Path) -> list[str]:
    """Two nodes of one process each, started together with `launcher` (`torchrun` or `accelerate`), node R with
    LINEAGE_CACHE `caches[R]`, running `what` (a script and its arguments); each node's output, both having exited 0."""
    port, nodes = _free_port(), []
    for rank in (0, 1):
        how = (["-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(rank), "--nproc_per_node", "1",
                "--master_addr", "127.0.0.1", "--master_port", str(port)] if launcher == "torchrun" else
               ["-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "2", "--machine_rank", str(rank),
                "--num_processes", "2", "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
                "--mixed_precision", "no", "--dynamo_backend", "no"])
        env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true", "HF_HUB_OFFLINE": "1",
               "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "LINEAGE_CACHE": str(caches[rank]),
               "HF_DATASETS_CACHE": str(hf_cache),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        nodes.append(subprocess.Popen([sys.executable, *how, *what], cwd=REPO, env=with_stacks(env), text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    try:
        logs = [node.communicate(timeout=LAUNCH_TIMEOUT)[0] for node in nodes]
    except subprocess.TimeoutExpired:
        for node in nodes:
            stop(node)
        logs = [node.communicate()[0] for node in nodes]
        pytest.fail(f"the nodes ran past {LAUNCH_TIMEOUT} s and were stopped:\n" +
                    "\n".join(f"node {rank}:\n{log[-8000:]}" for rank, log in enumerate(logs)))
    for rank, (node, log) in enumerate(zip(nodes, logs)):
        assert node.returncode == 0, f"node {rank} exited {node.returncode}:\n{log[-8000:]}"
    return logs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A folder of 4 shards, one document per line, and a GPT tokenizer for them."""
    from train.data.corpus import generate_records
    from train.data.tokenization import train_tokenizer

    root = tmp_path_factory.mktemp("corpus")
    texts = [r["text"] for r in generate_records("documents", "train", 0, 160)]
    for shard in range(4):
        (root / "shards").mkdir(exist_ok=True)
        (root / "shards" / f"part-{shard}.txt").write_text("\n".join(texts[shard::4]) + "\n")
    train_tokenizer("gpt", texts, 600, model_max_length=64).save_pretrained(root / "tokenizer")
    return root


def _args(corpus: Path, out: Path, *more: str) -> list[str]:
    return ["--recipe", "gpt-pretrain-tiny", "--train_file", str(corpus / "shards"), "--tokenizer",
            str(corpus / "tokenizer"), "--model_overrides", NO_DROPOUT, "--progress_bar", "false",
            "--report_to", "none", "--logging_steps", "1", "--save_steps", "2", "--output_dir", str(out), *more]


def _losses(out: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "loss" in r}


def _files(out: Path) -> set[str]:
    return {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}


def _same_losses(nodes: Path, one: Path) -> None:
    two, alone = _losses(nodes), _losses(one)
    assert sorted(two) == sorted(alone) == [1, 2, 3, 4]
    for step in alone:
        assert two[step] == pytest.approx(alone[step], abs=1e-5), step


def _node_one_adds_only_its_random_states(nodes: Path, one: Path) -> None:
    """Exactly one model folder, node 0's: the output holds the one-process run's files and, in each checkpoint,
    node 1's random state."""
    assert sorted(str(p.parent.relative_to(nodes)) for p in nodes.rglob("config.json")) == ["model"]
    added = _files(nodes) - _files(one)
    assert added == {f"checkpoints/step-0000000{s}/random_states_1.pkl" for s in (2, 4)}, added
    assert _files(one) <= _files(nodes)


def test_two_torchrun_nodes_prepare_once_train_as_one_process_and_resume(tmp_path, corpus):
    """In memory: on a shared cache the two nodes' first processes prepare the corpus once (the other opens it); a
    second launch resumes at step 2 with node 1 on a cache of its own, which it prepares once for itself."""
    shared, nodes, hf = tmp_path / "cache", tmp_path / "nodes", tmp_path / "hf"
    command = ["-m", "train.pretrain_gpt", *_args(corpus, nodes, "--per_device_train_batch_size", "4")]
    logs = launch_nodes("torchrun", [*command, "--max_steps", "2"], [shared, shared], hf)
    assert [len(PREPARED.findall(log)) for log in logs] in ([1, 0], [0, 1]), logs
    assert sum(log.count("prepared corpus reused from") for log in logs) == 1
    logs = launch_nodes("torchrun", [*command, "--max_steps", "4", "--resume_from_checkpoint", "latest"],
                        [shared, tmp_path / "node-1"], hf)
    assert "resumed from" in logs[0] and "prepared corpus reused from" in logs[0]
    assert len(PREPARED.findall(logs[1])) == 1  # its own cache: prepared once on that node
    pretrain_gpt(_args(corpus, tmp_path / "one", "--per_device_train_batch_size", "8", "--max_steps", "4"))
    _same_losses(nodes, tmp_path / "one")
    _node_one_adds_only_its_random_states(nodes, tmp_path / "one")


@exact_resume
def test_two_accelerate_machines_stream_a_folder_each_reading_its_own_shards_and_resume(tmp_path, corpus):
    """Streamed: each machine's process tokenizes the documents of its own 2 of the 4 shards and no other (counted),
    every document once; the losses equal one process's, and a second launch resumes the stream at step 2."""
    shared, nodes, hf, counted = tmp_path / "cache", tmp_path / "nodes", tmp_path / "hf", tmp_path / "counted"
    counted.mkdir()
    args = ["--streaming", "true", "--per_device_train_batch_size", "4"]
    logs = launch_nodes("accelerate", [DRIVER, "train.pretrain_gpt", "--record_to", str(counted),
                                       *_args(corpus, nodes, *args, "--max_steps", "2")], [shared, shared], hf)
    assert "stream: 4 shards divided between 2 processes by shard, 2 each (every byte is read once)" in logs[0]
    documents = [(corpus / "shards" / f"part-{shard}.txt").read_text().splitlines() for shard in range(4)]
    tokenized = [json.loads((counted / f"tokenized-rank{rank}.json").read_text()) for rank in (0, 1)]
    for rank in (0, 1):
        assert sorted(tokenized[rank]) == sorted(documents[rank] + documents[rank + 2]), rank  # each document once
    launch_nodes("accelerate", ["-m", "train.pretrain_gpt", *_args(corpus, nodes, *args, "--max_steps", "4",
                                                                   "--resume_from_checkpoint", "latest")],
                 [shared, shared], hf)
    pretrain_gpt(_args(corpus, tmp_path / "one", "--streaming", "true", "--per_device_train_batch_size", "8",
                       "--max_steps", "4"))
    _same_losses(nodes, tmp_path / "one")
    _node_one_adds_only_its_random_states(nodes, tmp_path / "one")
