"""Training from a stream (`datasets.IterableDataset`, `streaming: true`): sharding every W-th example, per-example
seeds by position in the stream, passes that end together on every process, exact resume from the stream position a
checkpoint saves (one process and two CPU processes), and the refusals (no max_steps, loader workers, an empty
stream, a streamed evaluation set, classes a stream does not declare).

Run as a script (`accelerate launch ... tests/train/data/test_streaming.py OUT TOKENIZER [--key value ...]`), this file
trains one streamed run per process group: what the two-process test launches.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import torch

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))  # run as a script under accelerate launch

from train.data.batching import (  # noqa: E402  (after the path insert above)
    EXACT_STREAM_RESUME,
    EmptyStreamError,
    SeededCollate,
    StreamBatches,
    example_seed,
    stream_resume_problem,
)
from train.run import checkpoints  # noqa: E402
from train.run.engine import Engine  # noqa: E402
from train.run.recipes import RecipeError, recipe_from_dict  # noqa: E402

torch.set_num_threads(1)
exact_resume = pytest.mark.skipif(stream_resume_problem() is not None,
                                  reason=f"datasets < {EXACT_STREAM_RESUME} restores a stream's position inexactly")
TEXTS = 44  # rows of the test stream: 5 micro-batches of 8, and 4 rows a pass leaves out


# ----------------------------------------------------------------------------- StreamBatches


def _numbers(n: int, shards: int = 4) -> datasets.IterableDataset:
    """A stream of `{"x": i}`, i = 0..n-1, through a batched map as a tokenizer would run."""
    rows = datasets.Dataset.from_dict({"n": list(range(max(n, 1)))})
    base = rows.to_iterable_dataset(num_shards=min(shards, max(n, 1)))
    base = base if n else base.filter(lambda row: False)
    return base.map(lambda rows: {"x": rows["n"]}, batched=True, batch_size=3, remove_columns=["n"])


def _recording_collate(calls: list):
    def collate(features, seeds):
        calls.append(seeds)
        return {"x": torch.tensor([f["x"] for f in features])}
    return SeededCollate(collate, seed=5)


def _pass(batches) -> list[list[int]]:
    return [b["x"].tolist() for b in batches]


def test_two_processes_read_every_other_example_and_seed_by_position_in_the_stream():
    """The micro-batch of two processes with 2 examples each holds the examples of one process's micro-batch of 4,
    each collated with the same seed: its position in the pass."""
    one_calls, two_calls = [], []
    one = StreamBatches(_numbers(18), 4, _recording_collate(one_calls))
    ranks = [StreamBatches(_numbers(18), 2, _recording_collate(two_calls), rank, 2) for rank in (0, 1)]
    single = _pass(one.batches(epoch=0))
    assert single == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]  # 16, 17: no full micro-batch
    per_rank = [_pass(r.batches(epoch=0)) for r in ranks]
    assert per_rank[0][0] == [0, 2] and per_rank[1][0] == [1, 3] and len(per_rank[0]) == len(per_rank[1]) == 4
    for step, batch in enumerate(single):
        assert sorted(per_rank[0][step] + per_rank[1][step]) == batch
    seeds_one = {x: s for batch, seeds in zip(single, one_calls) for x, s in zip(batch, seeds)}
    rank_batches = per_rank[0] + per_rank[1]
    seeds_two = {x: s for batch, seeds in zip(rank_batches, two_calls) for x, s in zip(batch, seeds)}
    assert seeds_one == seeds_two == {x: example_seed(5, 0, x) for x in range(16)}
    assert ranks[0].state_dict() == ranks[1].state_dict()  # one position in the stream for every process


def test_a_pass_ends_at_the_first_micro_batch_the_stream_cannot_fill_and_the_next_pass_is_the_next_epoch():
    calls = []
    batches = StreamBatches(_numbers(11), 4, _recording_collate(calls))
    assert _pass(batches.batches(epoch=0)) == [[0, 1, 2, 3], [4, 5, 6, 7]]  # 8, 9, 10: no full micro-batch
    later = _pass(batches.batches(epoch=2))  # set_epoch: the shards (files) in an order seeded by the epoch
    reference = _numbers(11)
    reference.set_epoch(2)
    assert later == [[row["x"] for row in reference][i:i + 4] for i in (0, 4)]
    assert calls[-1] == [example_seed(5, 2, i) for i in range(4, 8)]
    second = StreamBatches(_numbers(7), 2, _recording_collate([]), 1, 2)
    assert next(second.batches(epoch=0))["x"].tolist() == [1, 3]
    resumed = StreamBatches(_numbers(7), 2, _recording_collate([]), 1, 2)
    resumed.load_state_dict(second.state_dict())
    assert _pass(resumed.batches(epoch=0, start=1)) == []  # a resumed pass ends quietly, a pass from its start does not
    with pytest.raises(EmptyStreamError, match=r"yielded 7 examples, fewer than one micro-batch of 8 \(per_device_"
                                               r"train_batch_size 4 x 2 processes\)"):
        list(StreamBatches(_numbers(7), 4, _recording_collate([]), 1, 2).batches(epoch=0))
    with pytest.raises(EmptyStreamError, match="the training stream yielded no example"):
        list(StreamBatches(_numbers(0), 4, _recording_collate([])).batches(0))


@exact_resume
def test_state_after_a_micro_batch_resumes_with_the_next_one_and_again_after_a_resume():
    stream = _numbers(30)
    straight = _pass(StreamBatches(stream, 4, _recording_collate([])).batches(epoch=1))
    first = StreamBatches(stream, 4, _recording_collate([]))
    drawn = first.batches(epoch=1)
    head = [next(drawn)["x"].tolist() for _ in range(3)]
    state = json.loads(json.dumps(first.state_dict()))  # as a checkpoint keeps it
    calls = []
    resumed = StreamBatches(stream, 4, _recording_collate(calls))
    resumed.load_state_dict(state)
    drawn = resumed.batches(epoch=1, start=3)
    middle = next(drawn)["x"].tolist()
    assert calls[0] == [example_seed(5, 1, i) for i in range(12, 16)]  # positions continue from the saved batch
    again = StreamBatches(stream, 4, _recording_collate([]))  # a second resume, from the resumed run's position
    again.load_state_dict(json.loads(json.dumps(resumed.state_dict())))
    assert head + [middle] + _pass(again.batches(epoch=1, start=4)) == straight


# ----------------------------------------------------------------------------- the engine


def _recipe(out: Path, **keys):
    fields = {"model": "bert-tiny", "output_dir": str(out), "max_steps": 8, "per_device_train_batch_size": 8,
              "gradient_accumulation_steps": 2, "learning_rate": 1e-3, "lr_scheduler": "constant", "warmup_steps": 0,
              "save_steps": 3, "save_total_limit": 5, "logging_steps": 1, "progress_bar": False, "report_to": "none",
              "streaming": True, "seed": 3, **keys}
    return recipe_from_dict(fields)


def _stream(tokenizer, rows: int = TEXTS) -> datasets.IterableDataset:
    from train.data.corpus import tokenizer_training_texts

    texts = [t for t in tokenizer_training_texts(size=60) if t.strip()][:max(rows, 1)]
    base = datasets.Dataset.from_dict({"text": texts}).to_iterable_dataset(num_shards=min(4, max(rows, 1)))
    base = base if rows else base.filter(lambda row: False)
    return base.map(lambda r: tokenizer(r["text"], truncation=True, max_length=32), batched=True, batch_size=10,
                    remove_columns=["text"])


def streamed_run(out: Path, tokenizer_folder: str, rows: int = TEXTS, eval_dataset=None, **keys) -> Engine:
    """An MLM run of the tiny BERT (no dropout) on a stream of `rows` texts; the engine after training."""
    from transformers import AutoModelForMaskedLM

    from train.data.collators import MaskedLMCollator
    from train.data.tokenization import config_kwargs_from_tokenizer, load_tokenizer
    from train.run.distributed import token_mean
    from train.run.engine import seed_everything
    from train.run.recipes import load_model_config

    recipe = _recipe(out, **keys)
    tokenizer = load_tokenizer(tokenizer_folder, "bert")
    seed_everything(recipe.seed)
    config = load_model_config("bert-tiny", **config_kwargs_from_tokenizer(tokenizer, "bert"), hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)
    model = AutoModelForMaskedLM.from_config(config)
    engine = Engine(recipe, model, _stream(tokenizer, rows), MaskedLMCollator(tokenizer), tokenizer=tokenizer,
                    eval_dataset=eval_dataset,
                    loss_fn=lambda outputs, batch, e: token_mean(e.accelerator, outputs.loss, batch["labels"]))
    engine.train()
    return engine


def _losses(out: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "loss" in r}


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory):
    from train.data.corpus import tokenizer_training_texts
    from train.data.tokenization import train_tokenizer

    folder = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer("bert", tokenizer_training_texts(size=200), 600, model_max_length=64).save_pretrained(folder)
    return str(folder)


def _interrupt_at(monkeypatch, step: int) -> None:
    original = Engine._compute_loss

    def interrupted(self, batch):
        if self.state.step + 1 == step:
            raise KeyboardInterrupt("simulated interruption")
        return original(self, batch)

    monkeypatch.setattr(Engine, "_compute_loss", interrupted)


@exact_resume
def test_interrupted_streamed_run_resumes_every_step_loss_bit_for_bit(tmp_path, tokenizer_folder, monkeypatch):
    """44 rows, micro-batches of 8, 2 per step: a pass is 5 micro-batches (4 rows left out), so steps cross pass ends
    inside an accumulation window; the run is interrupted in step 7 and resumed from the checkpoint of step 6."""
    straight = streamed_run(tmp_path / "straight", tokenizer_folder)
    assert straight.state.epoch == 3 and straight.steps_per_epoch is None
    reference = _losses(tmp_path / "straight")
    assert sorted(reference) == list(range(1, 9))
    _interrupt_at(monkeypatch, 7)
    with pytest.raises(KeyboardInterrupt):
        streamed_run(tmp_path / "resumed", tokenizer_folder)
    monkeypatch.undo()
    saved = tmp_path / "resumed/checkpoints/step-00000006"
    position = json.loads((saved / checkpoints.STREAM_STATE).read_text())
    state = json.loads((saved / checkpoints.STATE_FILE).read_text())
    assert state["state"]["epoch"] == 2 and state["state"]["batch_in_epoch"] == 2 and position["epoch"] == 2
    assert state["run"]["dataset"]["examples"] == "stream"
    streamed_run(tmp_path / "resumed", tokenizer_folder, resume_from_checkpoint="latest")
    resumed = _losses(tmp_path / "resumed")
    assert resumed == reference  # bit for bit


def test_streamed_recipe_without_max_steps_or_with_workers_is_refused_before_anything_is_written(
        tmp_path, tokenizer_folder):
    from train.setup.splits import load_split

    for keys, named in (({"max_steps": -1}, "'max_steps' is -1"), ({"dataloader_num_workers": 2},
                                                                    "'dataloader_num_workers' is 2")):
        with pytest.raises(RecipeError, match=f"recipe key 'streaming' is true but {named}"):
            load_split(_recipe(tmp_path / "run", dataset="embedded:nli", **keys), "train", ())
        with pytest.raises(RecipeError, match=named):
            streamed_run(tmp_path / "run", tokenizer_folder, **keys)
    assert not (tmp_path / "run").exists()


def test_empty_stream_and_streamed_evaluation_set_are_refused(tmp_path, tokenizer_folder):
    with pytest.raises(EmptyStreamError, match="the training stream yielded no example"):
        streamed_run(tmp_path / "empty", tokenizer_folder, rows=0)
    with pytest.raises(TypeError, match="the evaluation dataset is a stream"):
        streamed_run(tmp_path / "eval", tokenizer_folder, eval_dataset=_numbers(4))


def test_streamed_resume_is_refused_where_datasets_cannot_restore_the_position(tmp_path, tokenizer_folder,
                                                                            monkeypatch):
    streamed_run(tmp_path / "run", tokenizer_folder, max_steps=3)
    log = (tmp_path / "run/logs/metrics.jsonl").read_text()
    monkeypatch.setattr(datasets, "__version__", "4.3.0")
    with pytest.raises(checkpoints.CheckpointError, match=r"is a streamed run's: the installed datasets 4.3.0 does "
                                                          r"not restore .* needs datasets>=5.2.0"):
        streamed_run(tmp_path / "run", tokenizer_folder, max_steps=6, resume_from_checkpoint="latest")
    assert (tmp_path / "run/logs/metrics.jsonl").read_text() == log


def test_checkpoint_of_a_run_that_did_not_stream_is_refused(tmp_path):
    folder = tmp_path / "step-00000001"
    folder.mkdir()
    (folder / checkpoints.STATE_FILE).write_text(json.dumps({"state": {}, "files": {}}))
    with pytest.raises(checkpoints.CheckpointError, match="holds no position in a training stream"):
        checkpoints.load_stream_state(folder)
    (folder / checkpoints.STREAM_STATE).write_text('{"epoch": 1}')
    assert checkpoints.load_stream_state(folder) == {"epoch": 1}


# ----------------------------------------------------------------------------- the commands


def test_load_split_streams_the_training_split_and_reads_validation_whole(tmp_path, capsys):
    from train.setup.splits import load_split

    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"text": f"row {i}", "label": i % 2}) + "\n" for i in range(10)))
    recipe = recipe_from_dict({"train_file": str(path), "streaming": True, "max_steps": 2, "train_size": 4})
    train = load_split(recipe, "train", [("text", "text")])
    assert isinstance(train, datasets.IterableDataset) and [r["text"] for r in train] == [f"row {i}" for i in range(4)]
    assert "train_size 4: using the first 4 rows of" in capsys.readouterr().out
    embedded = recipe_from_dict({"dataset": "embedded:nli", "streaming": True, "max_steps": 2, "train_size": 6,
                                 "eval_size": 5})
    assert isinstance(load_split(embedded, "train", ["premise"]), datasets.IterableDataset)
    validation = load_split(embedded, "validation", ["premise"])
    assert isinstance(validation, datasets.Dataset) and len(validation) == 5


def test_finetune_streams_with_the_classes_its_features_declare_and_refuses_data_that_declares_none(tmp_path):
    from train.finetune import main as finetune

    base = ["--recipe", "bert-finetune-nli-tiny", "--streaming", "true", "--max_steps", "2", "--save_steps", "0",
            "--train_size", "40", "--eval_size", "16", "--progress_bar", "false", "--report_to", "none"]
    results, folder = finetune([*base, "--output_dir", str(tmp_path / "nli")])
    config = json.loads((folder / "config.json").read_text())
    assert config["id2label"] == {"0": "entailment", "1": "neutral", "2": "contradiction"}
    assert results["steps"] == 2 and "eval_accuracy" in results
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"text": f"row {i}", "label": i % 2}) + "\n" for i in range(10)))
    with pytest.raises(RecipeError, match="declares no classes for column 'label'.*set streaming: false"):
        finetune([*base[:4], "--max_steps", "2", "--task", "sequence-classification", "--train_file", str(path),
                  "--output_dir", str(tmp_path / "file")])


def test_translation_trains_from_a_stream(tmp_path):
    from train.train_translation import main as train_translation

    results, folder = train_translation(["--recipe", "rnn-translation-tiny", "--streaming", "true", "--max_steps", "2",
                                         "--save_steps", "0", "--train_size", "40", "--eval_size", "8",
                                         "--progress_bar", "false", "--report_to", "none",
                                         "--output_dir", str(tmp_path / "run")])
    assert results["steps"] == 2 and (folder / "model.safetensors").is_file()


# ----------------------------------------------------------------------------- two processes


def _launch_two(out: Path, tokenizer_folder: str, *keys: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--num_processes", "2", "--main_process_port",
           str(port), __file__, str(out), tokenizer_folder, *keys]
    result = subprocess.run(cmd, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-12000:]


@exact_resume
def test_two_processes_stream_as_one_and_resume_bit_for_bit(tmp_path, tokenizer_folder):
    """Two CPU processes with micro-batches of 4 each train on the examples of one process's micro-batches of 8 (the
    same MLM masks: each example's seed is its position in the stream); a two-process run interrupted in step 7
    and resumed from its checkpoint of step 6 repeats the uninterrupted one's losses bit for bit, and one process
    resumes the two processes' checkpoint where they were."""
    _launch_two(tmp_path, tokenizer_folder, "--per_device_train_batch_size", "4")
    two = _losses(tmp_path / "straight")
    streamed_run(tmp_path / "one", tokenizer_folder)
    one = _losses(tmp_path / "one")
    assert sorted(two) == sorted(one) == list(range(1, 9))
    for step in one:
        assert two[step] == pytest.approx(one[step], abs=1e-5), step
    assert _losses(tmp_path / "resumed") == two  # bit for bit
    # the two processes' checkpoint resumed by one process with micro-batches of 8: the same position in the stream
    streamed_run(tmp_path / "regrouped", tokenizer_folder,
                 resume_from_checkpoint=str(tmp_path / "straight/checkpoints/step-00000006"))
    regrouped = _losses(tmp_path / "regrouped")
    assert sorted(regrouped) == [7, 8]
    for step in regrouped:
        assert regrouped[step] == pytest.approx(two[step], abs=1e-5), step


def _main(argv: list[str]) -> None:
    """Under accelerate launch, in `OUT`: a streamed run (`straight`), and the same run (`resumed`) interrupted in
    step 7 on every process, then resumed from its latest checkpoint in the same processes."""
    out, tokenizer_folder, rest = Path(argv[0]), argv[1], argv[2:]
    keys = {rest[i].removeprefix("--"): int(rest[i + 1]) for i in range(0, len(rest), 2)}
    streamed_run(out / "straight", tokenizer_folder, **keys)
    original = Engine._compute_loss

    def interrupted(self, batch):
        if self.state.step + 1 == 7:
            raise KeyboardInterrupt("simulated interruption")
        return original(self, batch)

    Engine._compute_loss = interrupted
    try:
        streamed_run(out / "resumed", tokenizer_folder, **keys)
    except KeyboardInterrupt:
        pass
    Engine._compute_loss = original
    streamed_run(out / "resumed", tokenizer_folder, resume_from_checkpoint="latest", **keys)


if __name__ == "__main__":
    _main(sys.argv[1:])
