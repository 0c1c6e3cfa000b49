"""The lineage experiment (train.lineage_experiment) and the engine's wall-clock budget (max_train_seconds)."""

from __future__ import annotations

import json
import re
import shlex
from itertools import pairwise

import pytest
import torch
from PIL import Image
from transformers import AutoTokenizer

from train import lineage_experiment
from train.analysis.experiment import bleu_by_bucket, length_buckets
from train.lineage_experiment import ARMS, ExperimentError
from train.run.recipes import RecipeError, load_recipe
from train.run.run_log import read_jsonl


def _decodable(path) -> tuple[int, int]:
    with Image.open(path) as image:
        image.load()
        return image.size


def test_quick_experiment_reports_every_arm(tmp_path):
    out = tmp_path / "report"
    paths = lineage_experiment.main(["--quick", "--output_dir", str(out)])
    results = json.loads(paths["results"].read_text())
    assert list(results["arms"]) == list(ARMS)
    report = paths["report"].read_text()
    eval_rows = results["meta"]["eval_rows"]
    for arm, row in results["arms"].items():
        assert re.search(rf"^\| {re.escape(arm)} \|", report, re.MULTILINE), f"no table row for {arm}"
        assert row["steps"] >= 1 and row["parameters"] > 0 and row["tokens_per_s"] > 0
        # the budget ended the run (after the step that passed it), unless the quick step cap came first
        assert row["training_seconds"] >= 1.0 or row["steps"] == lineage_experiment.QUICK["max_steps"]
        assert sum(b["sentences"] for b in row["bleu_by_length"]) == eval_rows
        assert 0 <= row["bleu"] <= 100
        times = [t for t, _ in row["eval_curve"]]
        assert times and times == sorted(times)
        assert row["training_seconds"] <= times[-1] <= row["training_seconds"] + 0.5  # the final one follows the loop
        if arm == "rnn-none":
            assert row["heatmap"] is None  # no attention, no alignment
        else:
            assert row["heatmap"] == f"alignment_{arm}.png" and f"]({row['heatmap']})" in report
            width, height = _decodable(out / row["heatmap"])
            assert width > 100 and height > 100
        assert (out / "runs" / arm / "model" / "config.json").is_file()
        card = (out / "runs" / arm / "model" / "README.md").read_text()
        assert "label_smoothing" in card and "mlm_probability" not in card  # the keys a translation run reads
    for name in ("loss_vs_time", "bleu_vs_length"):
        assert _decodable(paths[name])[0] > 100 and f"]({name}.png)" in report
    tokenizers = {json.loads((out / "runs" / arm / "model" / "tokenizer.json").read_text())["model"]["vocab"].__repr__()
                  for arm in ARMS}
    assert len(tokenizers) == 1  # one shared tokenizer


@pytest.mark.parametrize("argv, message", [
    (["--arms", "rnn-none,lstm"], "--arms"),
    (["--arms", "rnn-none,rnn-none"], "--arms"),
    (["--train_file", "missing.tsv", "--validation_file", "missing.tsv"], "--train_file"),
    (["--train_file", "missing.tsv"], "--validation_file"),
    (["--max_steps", "3", "--max_train_seconds", "5"], "--max_steps"),
])
def test_bad_arguments_fail_before_training(tmp_path, argv, message):
    out = tmp_path / "report"
    with pytest.raises(ExperimentError, match=re.escape(message)):
        lineage_experiment.main(["--quick", "--output_dir", str(out), *argv])
    assert not out.exists()


def test_a_step_budget_gives_the_same_report_twice_and_every_figure_names_its_command(tmp_path):
    argv = ["--quick", "--max_steps", "3", "--arms", "rnn-bahdanau,transformer"]
    first, second = (json.loads(lineage_experiment.main([*argv, "--output_dir", str(tmp_path / name)])["results"]
                                .read_text()) for name in ("a", "b"))
    for arm, row in first["arms"].items():
        again = second["arms"][arm]
        assert row["steps"] == again["steps"] == 3
        for key in ("bleu", "bleu_by_length", "samples", "alignment"):
            assert row[key] == again[key], (arm, key)
        assert [loss for _, loss in row["eval_curve"]] == [loss for _, loss in again["eval_curve"]]
        weights = row["alignment"]["weights"]  # the numbers of the heatmap: target x source, rows sum to one
        assert len(weights) == len(row["alignment"]["rows"]) and len(weights[0]) == len(row["alignment"]["columns"])
        assert all(abs(sum(r) - 1) < 1e-3 for r in weights)
    assert first["meta"]["max_steps"] == 3 and "3 optimizer steps per arm" in (tmp_path / "a" / "report.md").read_text()
    command = shlex.join(["lineage", "experiment", *argv, "--output_dir", str(tmp_path / "a")])
    assert first["meta"]["command"] == command and first["meta"]["versions"]["torch"] == torch.__version__
    for png in sorted((tmp_path / "a").glob("*.png")):
        with Image.open(png) as image:
            assert image.text["Source"] == command and image.text["Title"]


def test_missing_validation_file_named(tmp_path):
    train = tmp_path / "train.tsv"
    train.write_text("source\ttarget\none\teins\n")
    with pytest.raises(ExperimentError, match="--validation_file 'nowhere.tsv' does not exist"):
        lineage_experiment.main(["--output_dir", str(tmp_path / "r"), "--train_file", str(train),
                                 "--validation_file", "nowhere.tsv"])


def test_budget_key_is_checked():
    with pytest.raises(RecipeError, match="max_train_seconds"):
        load_recipe("experiment-transformer", {"max_train_seconds": -1})


def test_engine_stops_after_the_step_that_spends_the_budget(tmp_path):
    from train import train_translation

    out = tmp_path / "run"
    results, _ = train_translation.main([
        "--recipe", "rnn-translation-tiny", "--max_steps", "100000", "--max_train_seconds", "1.5",
        "--eval_steps", "4", "--save_steps", "0", "--report_to", "none", "--progress_bar", "false",
        "--output_dir", str(out)])
    records = read_jsonl(out / "logs" / "metrics.jsonl")
    steps = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval_loss" in r]
    assert results["steps"] == steps[-1]["step"] < 100000
    assert steps[-1]["seconds"] >= 1.5 > steps[-2]["seconds"]  # stopped right after passing the budget
    assert "tokens_per_s" in steps[-1]  # the last step is logged as the last
    times = [r["seconds"] for r in records]
    assert times == sorted(times)
    if len(evals) > 1:  # periodic evaluations (beam search) ran and their time is not training time
        assert results["train_seconds"] > steps[-1]["seconds"]


def test_length_buckets_cover_every_length():
    lengths = [3, 4, 4, 5, 7, 9, 12, 12, 15, 20]
    buckets = length_buckets(lengths)
    assert buckets[0][0] == 3 and buckets[-1][1] == 20
    assert all(a[1] + 1 == b[0] for a, b in pairwise(buckets))  # contiguous, no overlap
    rows = bleu_by_bucket(["a b c d"] * 10, ["a b c d"] * 10, lengths, buckets)
    assert sum(r["sentences"] for r in rows) == len(lengths)
    assert all(r["bleu"] == pytest.approx(100) for r in rows)
    assert length_buckets([6, 6, 6]) == [(6, 6)]


def test_the_shared_tokenizer_reads_a_stream_only_as_far_as_tokenizer_train_size(tmp_path, monkeypatch):
    """A streamed training set is read for the tokenizer up to its `tokenizer_train_size` characters, not whole."""
    import datasets

    def rows():
        for i in range(40):
            yield {"source": f"number {i} in english", "target": f"zahl {i} auf deutsch"}
        raise AssertionError("the stream was read past its first 40 rows")

    stream = datasets.IterableDataset.from_generator(rows)
    validation = datasets.Dataset.from_dict({"source": ["one"], "target": ["eins"]})
    monkeypatch.setattr(lineage_experiment, "load_splits", lambda *args: (stream, validation))
    recipe = load_recipe("experiment-transformer", {**lineage_experiment.QUICK, "tokenizer_train_size": 400,
                                                 "tokenizer": None, "output_dir": str(tmp_path / "runs" / "arm")})
    train_rows, eval_rows, tokenizer = lineage_experiment.shared_data(recipe, tmp_path)
    assert train_rows is stream and eval_rows is validation
    assert AutoTokenizer.from_pretrained(tmp_path / "tokenizer").get_vocab() == tokenizer.get_vocab()


def test_a_source_longer_than_the_positions_is_cut_and_counted_as_lineage_evaluate_cuts_it(tmp_path, capsys):
    """Each validation source is cut to max_seq_length, as training and `lineage evaluate` cut it, and counted as
    evaluate counts it (before: the Transformer refused a source past its 128 positions, after training)."""
    from train import evaluate

    pairs = [("one two", "eins zwei"), ("three four five", "drei vier fuenf"), ("six", "sechs")]
    (tmp_path / "train.tsv").write_text("source\ttarget\n" + "".join(f"{s}\t{t}\n" for s, t in pairs * 20))
    long = (" ".join(["one two three"] * 100), " ".join(["eins zwei drei"] * 100))
    (tmp_path / "dev.tsv").write_text("source\ttarget\n" + "".join(f"{s}\t{t}\n" for s, t in [*pairs, long]))
    out = tmp_path / "report"
    paths = lineage_experiment.main(["--quick", "--arms", "transformer", "--output_dir", str(out), "--train_file",
                                     str(tmp_path / "train.tsv"), "--validation_file", str(tmp_path / "dev.tsv")])
    meta = json.loads(paths["results"].read_text())["meta"]
    printed = capsys.readouterr().out
    assert meta["sources_cut"] == 1
    assert f"cut 1 of 4 sources to their first {meta['max_source_length']} tokens" in printed
    assert meta["sentence"]["source"] != long[0]  # the alignment shows the longest source translated whole
    scored = evaluate.main(["--model", str(out / "runs" / "transformer" / "model"), "--dataset",
                            str(tmp_path / "dev.tsv"), "--num_beams", "1", "--max_new_tokens", "3",
                            "--output_dir", str(tmp_path / "scored")])
    translation = json.loads((scored / "results.json").read_text())["translation"]
    assert (translation["sources_cut"], translation["max_source_length"]) == (meta["sources_cut"],
                                                                             meta["max_source_length"])
