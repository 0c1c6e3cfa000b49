"""The minor cases of issue 39's trial, each refused or handled as a user expects: `num_proc` capped at the rows and
the usable cores (one line says so), an unwritable LINEAGE_CACHE named with the remedy, `lineage prepare` asking for
its recipe, two spellings of one flag with different values refused, a bare boolean switch before another flag, a
resume with nothing left to train refused before any work, and `train_size` / `eval_size` recorded as applied."""

import itertools
import json
import os
import re
import typing
from pathlib import Path

import datasets
import pytest

from train import benchmark, cli, export, prepare, pretrain_gpt, train_tokenizer
from train.data import token_store, workers
from train.data.files import load_text_dataset
from train.data.model_inputs import tokenize_dataset
from train.data.tokenization import CacheFolderError, cache_folder, reused_or_trained
from train.data.tokenization import train_tokenizer as make_tokenizer
from train.run import recipes
from train.run.recipes import RecipeError, load_recipe, parse_args, parse_overrides, recipe_from_dict
from train.setup.splits import load_splits

TEXTS = [f"Document {i} tells of the number {i * 7} and of the river that runs past the old mill." for i in range(40)]


@pytest.fixture(scope="module")
def gpt():
    return make_tokenizer("gpt", TEXTS * 3, 300)


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "docs.txt"
    path.write_text("\n".join(TEXTS) + "\n")
    return path


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file under `folder` (the lock aside, held by this process until it exits) with its size, time and bytes."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".lock"}


# ----------------------------------------------------------------------------- num_proc


@pytest.mark.parametrize("cores", [1, 2, 16])
def test_num_proc_is_capped_at_the_rows_and_the_cores_in_one_line(cores, monkeypatch, capsys):
    monkeypatch.setattr(workers, "usable_cores", lambda: cores)
    for asked, rows in itertools.product([1, 2, 3, 24, 100_000], [1, 5, 24, 30_000]):
        used = workers.process_count(asked, rows, "docs.txt")
        assert used == max(1, min(asked, rows, cores))
        said = capsys.readouterr().out.splitlines()
        assert len(said) == (used < asked)
        if said:
            assert said[0] == (f"docs.txt: num_proc {asked} capped at {used} process{'es' if used > 1 else ''} "
                               f"({rows:,} rows, {cores} CPU cores usable)")
    assert (workers.process_count(None, 50_000, "docs.txt")
            == max(1, min(cores, 50_000 // workers.ROWS_PER_PROCESS)))


def test_the_usable_cores_are_this_process_s_affinity():
    expected = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert workers.usable_cores() == expected


def test_the_prepared_store_forks_no_more_processes_than_rows_or_cores(gpt, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LINEAGE_CACHE", str(tmp_path / "cache"))
    docs = datasets.Dataset.from_dict({"text": TEXTS[:24]})
    store = token_store.prepared_store(docs, gpt, "documents", num_proc=100_000, source="docs")
    cap = min(24, workers.usable_cores())
    assert store.info["processes"] == cap
    assert f"docs: num_proc 100000 capped at {cap} process" in capsys.readouterr().out


@pytest.mark.parametrize("asked", [None, 1, 3, 100_000])
def test_tokenize_dataset_hands_map_the_capped_count(asked, gpt, monkeypatch):
    monkeypatch.setattr(workers, "usable_cores", lambda: 2)
    handed = {}
    monkeypatch.setattr(datasets.Dataset, "map", lambda self, function, **kwargs: handed.update(kwargs))
    rows = datasets.Dataset.from_dict({"text": TEXTS[:5], "label": [0, 1, 0, 1, 0]})
    tokenize_dataset(rows, gpt, "classification", num_proc=asked, text_column="text", label_column="label")
    assert handed["num_proc"] == (None if asked is None else min(asked, 5, 2))


def test_reading_files_in_parallel_uses_no_more_processes_than_files_or_cores(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(workers, "usable_cores", lambda: 2)
    for i in range(3):
        (tmp_path / f"part-{i}.txt").write_text("\n".join(TEXTS[i::3]) + "\n")
    handed, load = {}, datasets.load_dataset

    def spy(*args, **kwargs):
        handed.update(kwargs)
        return load(*args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", spy)
    rows = load_text_dataset(str(tmp_path), cache_dir=str(tmp_path / "hf"), num_proc=100_000)
    assert handed["num_proc"] == 2 and len(rows) == len(TEXTS)
    assert "num_proc 100000 capped at 2 processes (3 files, 2 CPU cores usable)" in capsys.readouterr().out


# ----------------------------------------------------------------------------- LINEAGE_CACHE


@pytest.fixture
def under_a_file(tmp_path, monkeypatch) -> Path:
    """LINEAGE_CACHE below a regular file: no user, root included, can create it."""
    (tmp_path / "afile").write_text("not a folder")
    monkeypatch.setenv("LINEAGE_CACHE", str(tmp_path / "afile" / "cache"))
    return tmp_path / "afile"


def check_named(error: CacheFolderError, blocker: Path) -> None:
    message = str(error)
    assert message.startswith(f"LINEAGE_CACHE={blocker / 'cache'}: {blocker} is a file, not a folder")
    assert "set LINEAGE_CACHE to a folder this user can write" in message


def test_an_unwritable_cache_is_named_where_it_is_resolved_for_writing(under_a_file):
    assert cache_folder() == under_a_file / "cache"  # resolving it to compare paths asks nothing of it
    with pytest.raises(CacheFolderError) as error:
        cache_folder(writing=True)
    check_named(error.value, under_a_file)


@pytest.mark.parametrize("writer", ["data check", "prepared store", "tokenizer"])
def test_every_writer_of_the_cache_names_lineage_cache_before_its_work(writer, under_a_file, corpus, gpt):
    """The first thing a run writes into the cache is one of these three; none gets as far as a raw OSError."""
    work = {"data check": lambda: load_text_dataset(str(corpus), cache_dir=str(corpus.parent / "hf")),
            "prepared store": lambda: token_store.prepared_store(datasets.Dataset.from_dict({"text": TEXTS}), gpt,
                                                              "documents"),
            "tokenizer": lambda: reused_or_trained("gpt", lambda: iter(TEXTS), 300, sample_size=None,
                                                   model_max_length=64)}
    with pytest.raises(CacheFolderError) as error:
        work[writer]()
    check_named(error.value, under_a_file)
    assert under_a_file.read_text() == "not a folder"


def test_the_default_cache_is_named_with_lineage_cache_unset(tmp_path, monkeypatch):
    (tmp_path / "home").write_text("a file where the home folder should be")
    monkeypatch.delenv("LINEAGE_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(CacheFolderError, match=re.escape(f"the cache folder {tmp_path / 'home' / '.cache' / 'lineage'} "
                                                         "(LINEAGE_CACHE is not set): ")):
        cache_folder(writing=True)


# ----------------------------------------------------------------------------- lineage prepare without a recipe


@pytest.mark.parametrize("argv", [[], ["--train_file", "corpus.txt"], ["--model", "gpt-tiny", "--num_proc", "2"]])
def test_prepare_asks_for_the_recipe_of_its_run(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LINEAGE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(RecipeError, match="lineage prepare needs --recipe") as error:
        prepare.main(argv)
    message = str(error.value)
    assert "lineage configs recipes" in message
    named = [name for name in recipes.bundled("recipes") if re.search(rf"(?<![\w-]){name}(?![\w-])", message)]
    assert named == sorted(prepare.EXAMPLE_RECIPES)  # shipped recipes, by their real names
    assert list(tmp_path.iterdir()) == []  # nothing written: no cache, no output


def test_prepare_still_answers_help_without_a_recipe(capsys):
    with pytest.raises(SystemExit) as exit_:
        prepare.main(["--help"])
    assert exit_.value.code == 0 and "--recipe" in capsys.readouterr().out


# ----------------------------------------------------------------------------- two spellings of one flag


def toy_parser() -> cli.CommandParser:
    parser = cli.CommandParser(prog="toy", old_flags={"--out": "--output_dir", "--overwrite": "--overwrite_output_dir",
                                                      "--no-lower": "--lower=false", "--size-mb": "--size_mb"})
    parser.add_argument("--output_dir")
    parser.add_argument("--size_mb", type=float)
    parser.add_switch("--overwrite_output_dir")
    parser.add_switch("--lower", default=None)
    return parser


# (old words, new words, whether the two give the same value)
PAIRS = [(["--out", "a"], ["--output_dir", "a"], True), (["--out=a"], ["--output_dir", "b"], False),
         (["--size-mb", "3"], ["--size_mb=3.0"], True), (["--size-mb", "3"], ["--size_mb", "4"], False),
         (["--overwrite"], ["--overwrite_output_dir", "true"], True),
         (["--overwrite"], ["--overwrite_output_dir=false"], False),
         (["--no-lower"], ["--lower", "false"], True), (["--no-lower"], ["--lower"], False)]


@pytest.mark.parametrize("old, new, same", PAIRS)
def test_both_spellings_with_different_values_are_refused_in_either_order(old, new, same, capsys):
    for argv in ([*old, *new], [*new, *old]):
        if same:
            assert toy_parser().parse_args(argv) == toy_parser().parse_args(new)
            continue
        with pytest.raises(SystemExit) as exit_:
            toy_parser().parse_args(argv)
        assert exit_.value.code == 2
        error = capsys.readouterr().err.strip().splitlines()[-1]
        flag = new[0].partition("=")[0]
        for words in (old, new):  # both spellings and both values, as given
            assert (" ".join(words) if len(words) > 1 else words[0]) in error
        assert error.endswith(f"give {flag} once")


def test_one_spelling_twice_keeps_argparse_s_last_wins():
    assert toy_parser().parse_args(["--out", "a", "--out", "b"]).output_dir == "b"


@pytest.mark.parametrize("parse, argv, named", [
    (export.parse_args, ["--model", "m", "--out", "a", "--output_dir", "b"], ("--out a", "--output_dir b")),
    (lambda argv: benchmark.make_parser().parse_args(argv),
     ["--model", "gpt-tiny", "--task", "mlm", "--dtype", "fp32", "--mixed_precision", "bf16"],
     ("--dtype fp32", "--mixed_precision bf16")),
    (train_tokenizer.parse_args, ["--family", "bert", "--vocab_size", "300", "--output_dir", "o", "--kind", "gpt"],
     ("--family bert", "--kind gpt")),
])
def test_the_commands_refuse_two_spellings_with_different_values(parse, argv, named, capsys):
    with pytest.raises(SystemExit):
        parse(argv)
    error = capsys.readouterr().err
    assert all(words in error for words in named) and "two spellings of" in error


def test_an_old_value_that_reads_as_the_new_one_is_the_same_value():
    argv = ["--model", "gpt-tiny", "--task", "mlm", "--dtype", "fp32", "--mixed_precision", "no"]
    assert benchmark.make_parser().parse_args(argv).mixed_precision == "no"


# ----------------------------------------------------------------------------- a bare boolean switch


SWITCHES = [key for key, tp in typing.get_type_hints(recipes.Recipe).items() if tp is bool]  # the boolean keys


@pytest.mark.parametrize("key", SWITCHES)
def test_a_bare_boolean_key_is_true_and_the_next_flag_is_its_own(key):
    assert parse_overrides([f"--{key}", "--max_steps", "2"]) == {key: True, "max_steps": 2}
    assert parse_overrides(["--max_steps", "2", f"--{key}"]) == {"max_steps": 2, key: True}
    assert parse_overrides([f"--{key}", "--set", "seed=3"]) == {key: True, "seed": 3}
    assert parse_overrides([f"--{key}", "false", "--max_steps", "2"]) == {key: False, "max_steps": 2}


def test_the_documented_example_streams_and_stops_after_two_steps():
    recipe = parse_args(["--recipe", "gpt-pretrain-tiny", "--streaming", "--max_steps", "2"])
    assert recipe.streaming is True and recipe.max_steps == 2
    assert {"streaming", "max_steps"} <= recipe.set_by_user


@pytest.mark.parametrize("argv", [["--output_dir", "--max_steps", "2"], ["--max_steps"]])
def test_a_key_that_needs_a_value_is_refused_without_one(argv):
    with pytest.raises(RecipeError, match=f"^{argv[0]} expects a value") as error:
        parse_overrides(argv)
    if len(argv) > 1:
        assert f"got the flag {argv[1]}" in str(error.value)


# ----------------------------------------------------------------------------- a resume with nothing to train


def run(out: Path, corpus: Path, *argv: str):
    held_out = corpus.with_name("held-out.txt")
    held_out.write_text("\n".join(TEXTS[::4]) + "\n")
    return pretrain_gpt.main(["--recipe", "gpt-pretrain-tiny", "--train_file", str(corpus), "--output_dir", str(out),
                              "--validation_file", str(held_out),
                              "--max_seq_length", "32", "--save_steps", "0", "--progress_bar", "false",
                              "--report_to", "none", "--max_new_tokens", "2", *argv])


@pytest.fixture
def finished(tmp_path, corpus, monkeypatch) -> Path:
    monkeypatch.setenv("LINEAGE_CACHE", str(tmp_path / "cache"))
    run(tmp_path / "run", corpus, "--max_steps", "2", "--train_size", "1000")
    return tmp_path / "run"


def test_train_size_above_the_rows_is_recorded_as_applied_and_a_resume_past_max_steps_does_nothing(finished, corpus):
    """One trained run serves both: its card and recipe record the rows used, and resuming it with max_steps at or
    below its checkpoint's step is refused, naming both numbers, with every file of the run left as it was."""
    card = (finished / "model" / "README.md").read_text()
    for text in (card, (finished / "model" / "recipe.yaml").read_text()):
        assert f"\ntrain_size: {len(TEXTS)}\n" in text and f"\neval_size: {len(TEXTS[::4])}\n" in text
        assert "1000" not in text
    before = snapshot(finished)
    for max_steps in (1, 2):
        with pytest.raises(RecipeError) as error:
            run(finished, corpus, "--max_steps", str(max_steps), "--train_size", "1000",
                "--resume_from_checkpoint", "latest")
        assert (f"recipe key 'max_steps' is {max_steps} but checkpoint {finished / 'checkpoints'}" in str(error.value)
                and "is at step 2: already past max_steps" in str(error.value))
        assert snapshot(finished) == before


def test_a_resume_at_max_steps_whose_run_never_published_finishes_it(finished, corpus):
    """A run stopped after its final checkpoint (in its evaluation, say) resumes to evaluate and publish, once."""
    results = json.loads((finished / "model" / "results.json").read_text())
    evaluations = (finished / "logs" / "metrics.jsonl").read_text().count("eval_loss")
    for path in sorted((finished / "model").iterdir()):
        path.unlink()
    (finished / "model").rmdir()
    run(finished, corpus, "--max_steps", "2", "--train_size", "1000", "--resume_from_checkpoint", "latest")
    again = json.loads((finished / "model" / "results.json").read_text())
    assert again["steps"] == results["steps"] == 2
    assert (finished / "logs" / "metrics.jsonl").read_text().count("eval_loss") == evaluations + (evaluations > 0)


# ----------------------------------------------------------------------------- train_size / eval_size


@pytest.mark.parametrize("size", [1, len(TEXTS) - 1, len(TEXTS), len(TEXTS) + 1, 100_000])
def test_a_size_key_records_the_rows_used(size, corpus, capsys):
    recipe = recipe_from_dict({"train_file": str(corpus), "train_size": size}).reading("embedded:documents")
    train, validation = load_splits(recipe, [("text", "text")])
    used = min(size, len(TEXTS))
    assert len(train) == recipe.train_size == used
    assert validation is None and recipe.eval_size is None  # no validation file: no evaluation (eval_size holds out:
    # tests/train/setup/test_holdout.py)
    out = capsys.readouterr().out
    fewer = f"train_size {size}: {corpus} has only {len(TEXTS)} rows, fewer than asked: using all {len(TEXTS)}"
    assert (fewer in out) == (size > len(TEXTS))


@pytest.mark.parametrize("rows", [10, 100, 400])
def test_a_shipped_recipe_s_size_left_unapplied_records_the_rows_read(rows, tmp_path, capsys):
    path = tmp_path / "mine.txt"
    path.write_text("".join(f"line {i} of my own data.\n" for i in range(rows)))
    recipe = load_recipe("gpt-pretrain-tiny", {"train_file": str(path)})
    shipped = recipe.train_size
    train, _ = load_splits(recipe, [("text", "text")])
    assert len(train) == recipe.train_size == rows  # a shipped size sizes the embedded corpus only
    said = f"using all {rows} rows (the shipped recipe's train_size {shipped}"
    assert (said in capsys.readouterr().out) == (rows != shipped)


def test_the_embedded_corpus_keeps_its_sizes(capsys):
    recipe = load_recipe("gpt-pretrain-tiny", {"train_size": 30, "eval_size": 7})
    train, validation = load_splits(recipe, [("text", "text")])
    assert (len(train), len(validation), recipe.train_size, recipe.eval_size) == (30, 7, 30, 7)

