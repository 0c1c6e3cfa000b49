"""Training from a stream (`datasets.IterableDataset`, `streaming: true`): one canonical order (the shards in turn)
divided by shard or by example, per-example seeds by position in it, passes that end together on every process,
exact resume from the stream position a checkpoint saves (one process and two CPU processes), and the refusals
(no max_steps, loader workers, an empty stream, a streamed evaluation set, classes a stream does not declare).

Run as a script (`accelerate launch ... tests/train/data/test_streaming.py OUT TOKENIZER [--key value ...]`), this file
trains one streamed run per process group: what the two-process test launches.
"""

import json
import os
import socket
import sys
import threading
from pathlib import Path

import datasets
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # run as a script under accelerate launch: the project, conftest

from conftest import exact_resume  # noqa: E402  (after the path insert above)
from launching import run_launch  # noqa: E402

from train.data.batching import (  # noqa: E402
    MAX_LANES,
    EmptyStreamError,
    SeededCollate,
    StreamBatches,
    example_seed,
    stream_lanes,
)
from train.data.labels import LabelError  # noqa: E402
from train.run import checkpoints  # noqa: E402
from train.run.engine import Engine  # noqa: E402
from train.run.recipes import RecipeError, recipe_from_dict  # noqa: E402

torch.set_num_threads(1)
TEXTS = 44  # rows of the test stream: 5 micro-batches of 8, and 4 rows a pass leaves out


# ----------------------------------------------------------------------------- StreamBatches


def _numbers(n: int, shards: int = 4) -> datasets.IterableDataset:
    """A stream of `{"x": i}`, i = 0..n-1, through a batched map as a tokenizer would run."""
    rows = datasets.Dataset.from_dict({"n": list(range(max(n, 1)))})
    base = rows.to_iterable_dataset(num_shards=min(shards, max(n, 1)))
    base = base if n else base.filter(lambda row: False)
    return base.map(lambda rows: {"x": rows["n"]}, batched=True, batch_size=3, remove_columns=["n"])


def _shards(sizes: list[int], opened: list | None = None) -> datasets.IterableDataset:
    """A stream of shards of `sizes` rows, row `i` of shard `s` being `{"x": 100 * s + i}`, through a batched map;
    each shard opened is recorded in `opened` as `(thread, shard)`."""
    def rows(shards):
        for shard in shards:
            if opened is not None:
                opened.append((threading.get_ident(), shard))
            yield from ({"n": 100 * shard + i} for i in range(sizes[shard]))

    base = datasets.IterableDataset.from_generator(rows, gen_kwargs={"shards": list(range(len(sizes)))})
    return base.map(lambda rows: {"x": rows["n"]}, batched=True, batch_size=3, remove_columns=["n"])


def _round_robin(sizes: list[int]) -> list[int]:
    """The canonical order of `_shards(sizes)` in its first pass: the shards in turn, each that ends dropping out."""
    return [100 * shard + i for i in range(max(sizes)) for shard in range(len(sizes)) if i < sizes[shard]]


class _Peers:
    """Processes played by threads: `all` and `gather` meet at a barrier, as `CpuPeers` meets in a process group."""

    def __init__(self, rank: int, barrier: threading.Barrier, values: list):
        self.rank, self.barrier, self.values = rank, barrier, values

    def gather(self, value) -> list:
        self.values[self.rank] = value
        self.barrier.wait()
        gathered = list(self.values)
        self.barrier.wait()
        return gathered

    def all(self, flag: bool) -> bool:
        return all(self.gather(flag))


def _in_processes(count: int, work) -> list:
    """`work(rank, peers)` in `count` threads that play processes; their results in rank order."""
    barrier, values, results = threading.Barrier(count), [None] * count, [None] * count

    def run(rank):
        results[rank] = work(rank, _Peers(rank, barrier, values))

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "the processes disagreed on the end of a pass"
    return results


def _recording_collate(calls: list):
    def collate(features, seeds):
        calls.append(seeds)
        return {"x": torch.tensor([f["x"] for f in features])}
    return SeededCollate(collate, seed=5)


def _pass(batches) -> list[list[int]]:
    return [b["x"].tolist() for b in batches]


@settings(max_examples=12, deadline=None, database=None, derandomize=True)
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=6), processes=st.sampled_from([1, 2, 3]),
       per_process=st.integers(1, 3))
def test_processes_hold_the_positions_of_one_canonical_order_and_read_only_their_own_shards(sizes, processes,
                                                                                           per_process):
    """One process's pass is the shards' round robin cut into micro-batches of `per_process x W`. W processes yield
    equally many micro-batches; by shard (W divides the shards) each opens only its own shards (`rank`, `rank + W`,
    ...) and their micro-batches hold the one-process ones' examples with the same seeds while every shard runs;
    otherwise every process reads all and the pass is the one-process pass."""
    every = per_process * processes
    assume(min(sizes) * len(sizes) >= every)  # a micro-batch before the first shard ends
    order, one_calls = _round_robin(sizes), []
    single = _pass(StreamBatches(_shards(sizes), every, _recording_collate(one_calls)).batches(epoch=0))
    assert single == [order[i:i + every] for i in range(0, len(order) - every + 1, every)]
    one_seeds = {x: seed for batch, seeds in zip(single, one_calls) for x, seed in zip(batch, seeds)}
    opened, calls, threads = [], [[] for _ in range(processes)], {}

    def work(rank, peers):
        threads[threading.get_ident()] = rank
        batches = StreamBatches(_shards(sizes, opened), per_process, _recording_collate(calls[rank]), rank,
                                processes, peers)
        return _pass(batches.batches(epoch=0)), batches.by_shard

    results = _in_processes(processes, work)
    by_shard = results[0][1]
    assert by_shard == (processes > 1 and len(sizes) % processes == 0)
    steps = len(results[0][0])
    assert all(len(batches) == steps for batches, _ in results)
    running = min(sizes) * len(sizes) // every if by_shard else steps  # drawn while every shard runs
    assert (running <= steps <= len(single)) if by_shard else steps == len(single)
    seeds = {x: seed for rank, (batches, _) in enumerate(results) for batch, drawn in zip(batches, calls[rank])
             for x, seed in zip(batch, drawn)}
    for step in range(running):
        held = [x for batches, _ in results for x in batches[step]]
        assert sorted(held) == sorted(single[step])
        assert {x: seeds[x] for x in held} == {x: one_seeds[x] for x in held}
    if by_shard:
        read = [shard for _, shard in opened]
        assert len(read) == len(set(read))  # no shard read twice
        assert all(shard % processes == threads[thread] for thread, shard in opened)


def test_a_pass_ends_at_the_first_micro_batch_the_stream_cannot_fill_and_the_next_pass_is_the_next_epoch():
    calls = []
    batches = StreamBatches(_shards([3, 3, 3, 2]), 4, _recording_collate(calls))
    first = _pass(batches.batches(epoch=0))
    assert first == [_round_robin([3, 3, 3, 2])[i:i + 4] for i in (0, 4)]  # 3 more rows: no full micro-batch
    later = _pass(batches.batches(epoch=2))  # the shards in turn in an order seeded by the epoch
    assert later != first and [sorted(b) for b in later] == first and _pass(batches.batches(epoch=2)) == later
    assert calls[-1] == [example_seed(5, 2, i) for i in range(4, 8)]
    with pytest.raises(EmptyStreamError, match=r"yielded 7 examples, fewer than one micro-batch of 8 \(per_device_"
                                               r"train_batch_size 4 x 2 processes\)"):
        list(StreamBatches(_numbers(7, shards=1), 4, _recording_collate([]), 1, 2).batches(epoch=0))
    with pytest.raises(EmptyStreamError, match="the training stream yielded no example"):
        list(StreamBatches(_numbers(0), 4, _recording_collate([])).batches(0))
    refusals = _in_processes(2, lambda rank, peers: _refusal(StreamBatches(_shards([2, 9]), 4, _recording_collate([]),
                                                                           rank, 2, peers)))
    assert refusals[0] == refusals[1]  # every process refuses, and says why
    assert ("stream's 2 shards, divided between 2 processes, gave process 0 2 examples of the 4 it needs for one "
            "micro-batch of 8") in refusals[0]


def _refusal(batches: StreamBatches) -> str:
    with pytest.raises(EmptyStreamError) as refused:
        list(batches.batches(epoch=0))
    return str(refused.value)


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
    built_there = StreamBatches(stream, 4, _recording_collate([]), position=state)  # as the engine resumes
    assert head + _pass(built_there.batches(epoch=1, start=3)) == straight


@exact_resume
@pytest.mark.parametrize("sizes", [[6, 9, 7, 8], [8, 8, 8]], ids=["by shard", "every other example"])
def test_two_processes_resume_their_pass_exactly_and_one_process_resumes_it_too(sizes):
    """Two processes stopped after 2 micro-batches and resumed from the state they saved give the rest of the pass
    they would have given; by shard the state is gathered from both, and one process resumes it where they were."""
    def run(rank, peers, state=None, start=0, stop=None):
        batches = StreamBatches(_shards(sizes), 2, _recording_collate([]), rank, 2, peers)
        if state is not None:
            batches.load_state_dict(json.loads(json.dumps(state)))
        drawn = batches.batches(epoch=1, start=start)
        head = [b["x"].tolist() for _, b in zip(range(stop), drawn)] if stop else _pass(drawn)
        return head, batches.state_dict()

    straight = _in_processes(2, lambda rank, peers: run(rank, peers)[0])
    stopped = _in_processes(2, lambda rank, peers: run(rank, peers, stop=2))
    assert stopped[0][1] == stopped[1][1]  # one position, gathered from every process
    rest = _in_processes(2, lambda rank, peers: run(rank, peers, stopped[rank][1], start=2)[0])
    assert [stopped[rank][0] + rest[rank] for rank in (0, 1)] == straight
    alone = StreamBatches(_shards(sizes), 4, _recording_collate([]))
    alone.load_state_dict(stopped[0][1])
    after = _pass(alone.batches(epoch=1, start=2))
    running = min(sizes) * len(sizes) // 4 - 2  # micro-batches left before the first shard ends
    assert [sorted(b) for b in after[:running]] == [sorted(a + b) for a, b in zip(rest[0], rest[1])][:running]


def test_lanes_divide_the_shards_and_a_state_read_in_other_lanes_is_refused():
    for shards in range(1, 70):
        alone = stream_lanes(shards)
        assert shards % alone == 0 and alone <= MAX_LANES
        assert alone == shards or shards > MAX_LANES
        for processes in range(1, 9):
            lanes = stream_lanes(shards, processes)
            assert shards % lanes == 0
            assert lanes == alone if shards % processes else lanes % processes == 0 and lanes % alone == 0
    stream = _numbers(40, shards=32)
    with pytest.raises(ValueError, match=r"saved in 16 lanes; this launch reads the stream's 32 shards in 32 lanes "
                                         r"\(32 processes\): resume with the number of processes that wrote it"):
        StreamBatches(stream, 1, _recording_collate([]), 0, 32, peers=object()).load_state_dict(
            StreamBatches(stream, 1, _recording_collate([])).state_dict())
    with pytest.raises(ValueError, match="saved as one stream, by an earlier release"):
        StreamBatches(stream, 1, _recording_collate([])).load_state_dict({"epoch": 0, "examples_iterable": {}})
    with pytest.raises(ValueError, match="saved as one stream, by an earlier release"):
        StreamBatches(stream, 1, _recording_collate([]), position={"epoch": 0, "examples_iterable": {}})


# ----------------------------------------------------------------------------- the engine


def _recipe(out: Path, **keys):
    fields = {"model": "bert-tiny", "output_dir": str(out), "max_steps": 8, "per_device_train_batch_size": 8,
              "gradient_accumulation_steps": 2, "learning_rate": 1e-3, "lr_scheduler": "constant", "warmup_steps": 0,
              "save_steps": 3, "save_total_limit": 5, "logging_steps": 1, "progress_bar": False, "report_to": "none",
              "streaming": True, "seed": 3, **keys}
    return recipe_from_dict(fields)


def _stream(tokenizer, rows: int = TEXTS, shards: int = 4) -> datasets.IterableDataset:
    from train.data.corpus import tokenizer_training_texts

    texts = [t for t in tokenizer_training_texts(size=60) if t.strip()][:max(rows, 1)]
    base = datasets.Dataset.from_dict({"text": texts}).to_iterable_dataset(num_shards=min(shards, max(rows, 1)))
    base = base if rows else base.filter(lambda row: False)
    return base.map(lambda r: tokenizer(r["text"], truncation=True, max_length=32), batched=True, batch_size=10,
                    remove_columns=["text"])


def streamed_run(out: Path, tokenizer_folder: str, rows: int = TEXTS, eval_dataset=None, shards: int = 4,
                 **keys) -> Engine:
    """An MLM run of the tiny BERT (no dropout) on a stream of `rows` texts in `shards` shards; the engine after
    training."""
    from transformers import AutoModelForMaskedLM

    from train.data.collators import MaskedLMCollator
    from train.data.tokenization import config_kwargs_from_tokenizer, load_tokenizer
    from train.run.engine import TokenMean
    from train.run.run_folder import start_run
    from train.setup.presets import load_model_config

    recipe = _recipe(out, **keys)
    tokenizer = load_tokenizer(tokenizer_folder, "bert")
    with start_run(recipe) as run:  # seeds
        config = load_model_config("bert-tiny", **config_kwargs_from_tokenizer(tokenizer, "bert"),
                                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        model = AutoModelForMaskedLM.from_config(config)
        engine = Engine(run, model, _stream(tokenizer, rows, shards), MaskedLMCollator(tokenizer), tokenizer=tokenizer,
                        eval_dataset=eval_dataset, token_mean=TokenMean())
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


@exact_resume
def test_a_streamed_checkpoint_read_in_other_lanes_is_refused_naming_it(tmp_path, tokenizer_folder):
    streamed_run(tmp_path / "run", tokenizer_folder, max_steps=3)
    log = (tmp_path / "run/logs/metrics.jsonl").read_text()
    with pytest.raises(checkpoints.CheckpointError, match=r"step-00000003: the checkpoint's stream position was saved "
                                                          r"in 4 lanes; this launch reads the stream's 3 shards in 3 "
                                                          r"lanes \(1 process\)"):
        streamed_run(tmp_path / "run", tokenizer_folder, max_steps=6, shards=3, resume_from_checkpoint="latest")
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
    assert "train_rows" not in results  # a stream's rows are counted by nothing before they train
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"text": f"row {i}", "label": i % 2}) + "\n" for i in range(10)))
    with pytest.raises(LabelError, match="declares no classes for column 'label'.*set streaming: false"):
        finetune([*base[:4], "--max_steps", "2", "--task", "sequence-classification", "--train_file", str(path),
                  "--output_dir", str(tmp_path / "file")])


def test_a_streamed_finetune_counts_the_rows_skip_unlabeled_skips_as_in_memory(tmp_path, capsys):
    """GLUE's layout, a saved split of declared classes with rows labelled -1: streamed, the rows skipped are counted as
    the stream reads them and results.json gives `skipped_unlabeled` as a run in memory does (before: said and
    counted in memory alone)."""
    from train.data.corpus import generate_records
    from train.finetune import main as finetune

    rows = [{**row, "label": -1 if i % 4 == 1 else row["label"]}
            for i, row in enumerate(generate_records("nli", "train", size=40))]
    features = datasets.Features({"premise": datasets.Value("string"), "hypothesis": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["entailment", "neutral", "contradiction"])})
    datasets.Dataset.from_list(rows, features=features).save_to_disk(str(tmp_path / "glue"))
    base = ["--recipe", "bert-finetune-nli-tiny", "--train_file", str(tmp_path / "glue"), "--skip_unlabeled", "true",
            "--max_steps", "2", "--save_steps", "0", "--progress_bar", "false", "--report_to", "none"]
    runs = {streaming: finetune([*base, "--streaming", streaming, "--output_dir", str(tmp_path / streaming)])
            for streaming in ("false", "true")}
    assert runs["true"][0]["skipped_unlabeled"] == runs["false"][0]["skipped_unlabeled"] == 10
    assert json.loads((runs["true"][1] / "results.json").read_text())["skipped_unlabeled"] == 10
    assert "rows labelled -1 in column 'label' are skipped as the stream reads them (skip_unlabeled; counted" in \
        capsys.readouterr().out


def test_translation_trains_from_a_stream(tmp_path):
    from train.train_translation import main as train_translation

    results, folder = train_translation(["--recipe", "rnn-translation-tiny", "--streaming", "true", "--max_steps", "2",
                                         "--save_steps", "0", "--train_size", "40", "--eval_size", "8",
                                         "--progress_bar", "false", "--report_to", "none",
                                         "--output_dir", str(tmp_path / "run")])
    assert results["steps"] == 2 and (folder / "model.safetensors").is_file()


# ----------------------------------------------------------------------------- two processes


def _launch_two(out: Path, tokenizer_folder: str, *keys: str) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--num_processes", "2", "--main_process_port",
           str(port), __file__, str(out), tokenizer_folder, *keys]
    result = run_launch(cmd, env)
    assert result.returncode == 0, result.stderr[-12000:]
    return result.stdout


@exact_resume
def test_two_processes_stream_as_one_and_resume_bit_for_bit(tmp_path, tokenizer_folder):
    """Two CPU processes with micro-batches of 4 each train on the examples of one process's micro-batches of 8 (the
    same MLM masks: each example's seed is its position in the stream), each reading its own 2 of 4 shards, or, from
    3 shards, every other example of all; a two-process run interrupted in step 7 and resumed from its checkpoint of
    step 6 repeats the uninterrupted one's losses bit for bit, and one process resumes the two processes' checkpoint
    where they were."""
    log = _launch_two(tmp_path, tokenizer_folder, "--per_device_train_batch_size", "4")
    assert log.count("stream: 4 shards divided between 2 processes by shard, 2 each") == 3  # printed once a run
    assert log.count("stream: every process reads all 3 shards and keeps one example in 2") == 3
    for shards in (4, 3):
        out = tmp_path / f"shards-{shards}"
        two = _losses(out / "straight")
        streamed_run(out / "one", tokenizer_folder, shards=shards)
        one = _losses(out / "one")
        assert sorted(two) == sorted(one) == list(range(1, 9))
        for step in one:
            assert two[step] == pytest.approx(one[step], abs=1e-5), (shards, step)
        assert _losses(out / "resumed") == two, shards  # bit for bit
        # the two processes' checkpoint resumed by one process with micro-batches of 8: the same stream position
        streamed_run(out / "regrouped", tokenizer_folder, shards=shards,
                     resume_from_checkpoint=str(out / "straight/checkpoints/step-00000006"))
        regrouped = _losses(out / "regrouped")
        assert sorted(regrouped) == [7, 8]
        for step in regrouped:
            assert regrouped[step] == pytest.approx(two[step], abs=1e-5), (shards, step)


def _main(argv: list[str]) -> None:
    """Under accelerate launch, in `OUT/shards-<n>` for a stream of 4 shards and one of 3: a streamed run
    (`straight`), and the same run (`resumed`) interrupted in step 7 on every process, then resumed from its latest
    checkpoint in the same processes."""
    out, tokenizer_folder, rest = Path(argv[0]), argv[1], argv[2:]
    keys = {rest[i].removeprefix("--"): int(rest[i + 1]) for i in range(0, len(rest), 2)}
    original = Engine._compute_loss

    def interrupted(self, batch):
        if self.state.step + 1 == 7:
            raise KeyboardInterrupt("simulated interruption")
        return original(self, batch)

    for shards in (4, 3):
        streamed_run(out / f"shards-{shards}" / "straight", tokenizer_folder, shards=shards, **keys)
        Engine._compute_loss = interrupted
        try:
            streamed_run(out / f"shards-{shards}" / "resumed", tokenizer_folder, shards=shards, **keys)
        except KeyboardInterrupt:
            pass
        Engine._compute_loss = original
        streamed_run(out / f"shards-{shards}" / "resumed", tokenizer_folder, resume_from_checkpoint="latest",
                     shards=shards, **keys)


if __name__ == "__main__":
    _main(sys.argv[1:])
