"""A `save_to_disk` DatasetDict given as `train_file` or `dataset` is read as a Hub dataset is: its `train` split
trains and its `validation` split evaluates (said once), in memory and streamed; `validation_file` still wins, and a
folder of a `train` split alone evaluates on nothing, as any local data without a validation file; so is a folder
whose files name their splits as datasets reads them (train.csv and dev.csv, a Hub repository's data/ folder).
`validation_split` names another split that evaluates (MNLI's `validation_matched`); a Hub dataset or saved folder
without the split, of other splits, is refused naming its splits and the key. Question-answering windows too short
for a question of `max_query_length` tokens are refused exactly where the tokenizer would panic, with lengths that
fit, within the model's positions; consecutive windows share exactly `doc_stride` context tokens (default: a quarter
of the window)."""

import json
import re

import datasets
import pytest
from conftest import hub_dataset
from hypothesis import given, settings
from hypothesis import strategies as st

from train import finetune
from train.data.corpus import generate_records, tokenizer_training_texts
from train.data.errors import DataError, UnknownColumnError, UnknownSplitError
from train.data.tokenization import train_tokenizer
from train.run.recipes import RecipeError, parse_args
from train.setup.splits import load_splits, qa_doc_stride, question_room_problem

datasets.disable_progress_bars()
COLUMNS = (("premise", "text"), ("hypothesis", "text"), ("label", "label"))


def _saved(tmp_path, splits: dict[str, int]):
    folder = tmp_path / "nli"
    datasets.DatasetDict({split: datasets.Dataset.from_list(generate_records("nli", split, size=size))
                          for split, size in splits.items()}).save_to_disk(str(folder))
    return folder


def _recipe(*argv: str):
    return parse_args(["--recipe", "bert-finetune-nli-tiny", *argv], command="finetune")


@pytest.mark.parametrize("streaming", ["false", "true"])
@pytest.mark.parametrize("key", ["train_file", "dataset"])
def test_a_saved_validation_split_evaluates(key, streaming, tmp_path, capsys):
    folder = _saved(tmp_path, {"train": 12, "validation": 5, "test": 3})
    train, validation = load_splits(_recipe(f"--{key}", str(folder), "--streaming", streaming), COLUMNS)
    assert sum(1 for _ in train) == 12
    assert list(validation["premise"]) == [r["premise"] for r in generate_records("nli", "validation", size=5)]
    assert f"{folder}: evaluating on its saved split 'validation'" in capsys.readouterr().out


@pytest.mark.parametrize("streaming", ["false", "true"])
def test_an_eval_size_beyond_the_validation_split_is_said_and_recorded_as_the_rows_used(streaming, tmp_path, capsys):
    """`--eval_size 50` of a split of 5 rows: all 5 evaluate, said with both counts and recorded as eval_size 5, in
    memory and streamed (before, streamed: `using the first 50 rows`, and 50 recorded); one within it takes its first
    rows, as said."""
    folder = _saved(tmp_path, {"train": 12, "validation": 5})
    recipe = _recipe("--dataset", str(folder), "--streaming", streaming, "--eval_size", "50")
    _, validation = load_splits(recipe, COLUMNS)
    assert len(validation) == 5 and recipe.eval_size == 5
    assert (f"eval_size 50: {folder} has only 5 rows, fewer than asked: using all 5 (recorded as "
            f"eval_size 5)") in capsys.readouterr().out
    recipe = _recipe("--dataset", str(folder), "--streaming", streaming, "--eval_size", "3")
    _, validation = load_splits(recipe, COLUMNS)
    assert list(validation["premise"]) == [r["premise"] for r in generate_records("nli", "validation", size=5)][:3]
    assert "eval_size 3: using the first 3 " in capsys.readouterr().out and recipe.eval_size == 3


def _split_files(tmp_path, layout: str):
    """A folder of the splits train (12 rows), validation (5) and test (3), as the tools write them: pandas' CSV files
    named by their split (dev.csv: validation); a Hub repository's data/<split>-00000-of-00001.parquet, as
    `Dataset.to_parquet` writes each split; `Dataset.to_json` into a folder per split (train/, validation/)."""
    import pandas as pd

    folder = tmp_path / "glue"
    for split, size in (("train", 12), ("validation", 5), ("test", 3)):
        rows = datasets.Dataset.from_list(generate_records("nli", split, size=size))
        if layout == "named files":
            folder.mkdir(exist_ok=True)
            pd.DataFrame(rows.to_list()).to_csv(folder / f"{'dev' if split == 'validation' else split}.csv",
                                                index=False)
        elif layout == "hub data folder":
            (folder / "data").mkdir(parents=True, exist_ok=True)
            rows.to_parquet(folder / "data" / f"{split}-00000-of-00001.parquet")
        else:
            (folder / split).mkdir(parents=True)
            rows.to_json(folder / split / "shard-0.jsonl")
    if layout == "hub data folder":
        (folder / "README.md").write_text("---\nlicense: mit\n---\n")
    return folder


@pytest.mark.parametrize("streaming", ["false", "true"])
@pytest.mark.parametrize("layout", ["named files", "hub data folder", "split folders"])
def test_a_folder_of_files_named_by_their_splits_trains_on_train_and_evaluates_on_validation(layout, streaming,
                                                                                             tmp_path, capsys):
    """As datasets reads such a folder (`load_dataset(folder)`): before, its files were read as one training split,
    the validation and test rows trained on (or the Hub's layout refused: 'folder holds no data files')."""
    folder = _split_files(tmp_path, layout)
    train, validation = load_splits(_recipe("--train_file", str(folder), "--streaming", streaming), COLUMNS)
    assert [row["premise"] for row in train] == [r["premise"] for r in generate_records("nli", "train", size=12)]
    assert list(validation["premise"]) == [r["premise"] for r in generate_records("nli", "validation", size=5)]
    assert f"{folder}: evaluating on its files of the split 'validation'" in capsys.readouterr().out
    _, test = load_splits(_recipe("--dataset", str(folder), "--validation_split", "test"), COLUMNS)
    assert list(test["premise"]) == [r["premise"] for r in generate_records("nli", "test", size=3)]


def test_a_folder_of_split_files_with_a_file_of_no_split_is_refused_naming_it(tmp_path):
    folder = _split_files(tmp_path, "named files")
    (folder / "notes.csv").write_text((folder / "test.csv").read_text())
    with pytest.raises(ValueError, match=re.escape(f"{folder}: its files name their splits, as datasets reads a folder "
                                                   "(dev.csv: validation, test.csv: test, train.csv: train), but "
                                                   "notes.csv names none: give each file a name of one split")):
        load_splits(_recipe("--train_file", str(folder)), COLUMNS)


def test_a_folder_of_split_files_without_the_validation_split_is_refused_naming_its_splits(tmp_path):
    folder = _split_files(tmp_path, "named files")
    (folder / "dev.csv").rename(folder / "eval.csv")  # datasets' word for a test split
    with pytest.raises(UnknownSplitError, match=re.escape(f"{folder}: its files name the splits test, train (as "
                                                          "datasets reads a folder), not 'validation'; set the recipe "
                                                          "key validation_split")):
        load_splits(_recipe("--train_file", str(folder)), COLUMNS)


def test_hub_shards_name_splits_of_any_name(tmp_path, capsys):
    """The Hub's glue/mnli folder: <split>-00000-of-00001.parquet of the splits train, validation_matched,
    validation_mismatched, test_matched (as datasets reads a shard's split from its name)."""
    folder = tmp_path / "mnli"
    folder.mkdir()
    for split, size in (("train", 12), ("validation_matched", 5), ("validation_mismatched", 4), ("test_matched", 3)):
        rows = datasets.Dataset.from_list(generate_records("nli", split.split("_")[0], size=size))
        rows.to_parquet(folder / f"{split}-00000-of-00001.parquet")
    with pytest.raises(UnknownSplitError, match=re.escape("its files name the splits test_matched, train, "
                                                          "validation_matched, validation_mismatched (as datasets "
                                                          "reads a folder), not 'validation'; set the recipe key "
                                                          "validation_split")):
        load_splits(_recipe("--train_file", str(folder)), COLUMNS)
    train, validation = load_splits(_recipe("--train_file", str(folder), "--validation_split", "validation_matched"),
                                    COLUMNS)
    assert (len(train), len(validation)) == (12, 5)


def test_a_folder_of_configuration_folders_is_refused_naming_them(tmp_path):
    """A Hub repository of several configurations (glue/cola/..., glue/sst2/...): name the one to read."""
    (tmp_path / "glue").mkdir()
    for config in ("sst2", "cola"):
        (tmp_path / config).mkdir()
        _split_files(tmp_path / config, "hub data folder").rename(tmp_path / "glue" / config)
    glue = tmp_path / "glue"
    with pytest.raises(DataError, match=re.escape(f"{glue}: its folders cola, sst2 each hold files named by their "
                                                  "splits (as datasets reads a folder): read as one, their splits "
                                                  f"would train and evaluate together; name one of them, e.g. "
                                                  f"{glue / 'cola'}")):
        load_splits(_recipe("--train_file", str(glue)), COLUMNS)
    train, _ = load_splits(_recipe("--train_file", str(glue / "cola")), COLUMNS)
    assert len(train) == 12


def test_a_file_without_the_label_column_is_told_it_has_nothing_to_evaluate_or_train_on(tmp_path):
    """GLUE's SST-2 as its download script writes it: train.tsv (sentence, label) and test.tsv (index, sentence), its
    labels kept by GLUE; before: the advice to name the columns alone."""
    (tmp_path / "train.tsv").write_text("sentence\tlabel\nit is good \t1\nit is bad \t0\n")
    (tmp_path / "test.tsv").write_text("index\tsentence\n0\tit is fine \n")
    columns = (("sentence", "text"), ("label", "label"))
    recipe = _recipe("--train_file", str(tmp_path / "train.tsv"), "--validation_file", str(tmp_path / "test.tsv"))
    with pytest.raises(UnknownColumnError, match=re.escape(
            "test.tsv: no column 'label' in the header (line 1); the file has columns ['index', 'sentence']: name the "
            "right one with the recipe keys text_column, text_pair_column and label_column, or rename it; if it has no "
            "labels (as GLUE's test files: GLUE keeps theirs), it has nothing to evaluate on: give labelled data as "
            "validation_file (GLUE's dev.tsv), or drop it (lineage evaluate --predictions true writes a trained "
            "model's predictions for it)")):
        load_splits(recipe, columns)
    with pytest.raises(UnknownColumnError, match=r"test.tsv: .*it has nothing to train on: give labelled data$"):
        load_splits(_recipe("--train_file", str(tmp_path / "test.tsv")), columns)
    with pytest.raises(UnknownColumnError, match=r"train.tsv: no column 'text' .* or rename it$"):
        load_splits(_recipe("--train_file", str(tmp_path / "train.tsv")), (("text", "text"), ("label", "label")))


def test_a_validation_file_wins_over_the_saved_split(tmp_path):
    folder = _saved(tmp_path, {"train": 12, "validation": 5})
    other = tmp_path / "dev.jsonl"
    datasets.Dataset.from_list(generate_records("nli", "test", size=4)).to_json(other)
    _, validation = load_splits(_recipe("--train_file", str(folder), "--validation_file", str(other)), COLUMNS)
    assert len(validation) == 4


def test_a_saved_folder_of_a_training_split_alone_evaluates_on_nothing(tmp_path):
    recipe = _recipe("--train_file", str(_saved(tmp_path, {"train": 12})))
    assert load_splits(recipe, COLUMNS)[1] is None and recipe.eval_size is None


@pytest.mark.parametrize("streaming", ["false", "true"])
@pytest.mark.parametrize("key", ["train_file", "dataset"])
def test_a_saved_folder_of_other_splits_is_refused_naming_them_and_the_key_as_a_hub_dataset_is(key, streaming,
                                                                                              tmp_path):
    """Before: trained without evaluation, saying only that it had no split 'validation'."""
    folder = _saved(tmp_path, {"train": 12, "test": 3})
    with pytest.raises(UnknownSplitError, match=rf"^{folder}: the saved DatasetDict has no split 'validation'; its "
                                                r"splits are train, test; set the recipe key validation_split to the "
                                                r"split that evaluates \(now 'validation'\), or eval_size to hold out"):
        load_splits(_recipe(f"--{key}", str(folder), "--streaming", streaming), COLUMNS)
    _, validation = load_splits(_recipe(f"--{key}", str(folder), "--validation_split", "test"), COLUMNS)
    assert len(validation) == 3


def test_finetune_reports_the_saved_validation_splits_figures(tmp_path):
    results, folder = finetune.main(["--recipe", "bert-finetune-nli-tiny", "--train_file",
                                str(_saved(tmp_path, {"train": 16, "validation": 6})), "--max_steps", "2",
                                "--save_steps", "0", "--progress_bar", "false", "--report_to", "none",
                                "--output_dir", str(tmp_path / "run")])
    assert "eval_accuracy" in results and "eval_size: 6" in (folder / "recipe.yaml").read_text()


def _hub_cache(root, splits: dict[str, int]):
    """`nyu-mll/glue` config `mnli` in the offline datasets cache, with MNLI's split names."""
    files = {}
    for split, size in splits.items():
        files[split] = root / f"{split}.jsonl"
        datasets.Dataset.from_list(generate_records("nli", "train" if split == "train" else "validation",
                                                    size=size)).to_json(files[split])
    hub_dataset(root / "cache", "nyu-mll/glue", "mnli", files)
    return root / "cache"


@pytest.fixture
def mnli(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", _hub_cache(tmp_path, {
        "train": 16, "validation_matched": 6, "test": 4}))
    return ["--dataset", "nyu-mll/glue", "--dataset_config", "mnli"]


def test_a_hub_dataset_without_the_validation_split_is_refused_naming_its_splits_and_the_key(mnli):
    with pytest.raises(UnknownSplitError, match=r"has no split 'validation'.*validation_matched.*set the recipe key "
                                                r"validation_split"):
        load_splits(_recipe(*mnli), COLUMNS)


def test_validation_split_names_the_split_that_evaluates(mnli, tmp_path):
    results, folder = finetune.main(["--recipe", "bert-finetune-nli-tiny", *mnli, "--validation_split",
                                     "validation_matched", "--max_steps", "2", "--save_steps", "0",
                                     "--progress_bar", "false", "--report_to", "none",
                                     "--output_dir", str(tmp_path / "run")])
    assert "eval_accuracy" in results and "eval_size: 6" in (folder / "recipe.yaml").read_text()
    card = (folder / "README.md").read_text()
    assert "split: validation_matched" in card and "config: mnli" in card


@pytest.mark.parametrize("split, refusal", [("train", r"not the one that trains"), ("", r"not the one that trains"),
                                            ("dev", r"embedded:nli has the splits train, validation, test")])
def test_a_validation_split_that_cannot_evaluate_is_refused_first(split, refusal):
    with pytest.raises(RecipeError, match=refusal):
        load_splits(_recipe("--validation_split", split), COLUMNS)


def test_the_embedded_corpus_evaluates_on_the_named_split():
    _, validation = load_splits(_recipe("--validation_split", "test", "--eval_size", "3"), COLUMNS)
    assert list(validation["premise"]) == [r["premise"] for r in generate_records("nli", "test", seed=42, size=3)]


@pytest.fixture(scope="module")
def bert():
    return train_tokenizer("bert", tokenizer_training_texts(size=300), 400, model_max_length=512)


@pytest.mark.parametrize("doc_stride", [None, 8, 40])
@pytest.mark.parametrize("max_seq_length, positions", [(64, 64), (48, 64), (8, 64), (64, 512), (4, 6), (100, 128)])
def test_question_room_advice_keeps_within_the_models_positions(max_seq_length, positions, doc_stride):
    """Every setting the refusal advises fits the question's windows and the model's positions (before: `set
    max_seq_length to at least 90` for a model of 64 positions, which the run then refused)."""
    problem = question_room_problem(max_seq_length, 64, positions, doc_stride)
    if problem is None:
        return
    settings = re.findall(r"max_seq_length to (?:at least )?(\d+) and max_query_length to at most (\d+)|"
                          r"(max_seq_length|max_query_length|doc_stride) to at (?:least|most) (\d+)", problem)
    assert settings or problem.endswith("use a model of more positions")
    for wider, query, key, value in settings:
        length, query, stride = ((int(wider), int(query), doc_stride) if wider
                                 else (int(value), 64, doc_stride) if key == "max_seq_length"
                                 else (max_seq_length, int(value), doc_stride) if key == "max_query_length"
                                 else (max_seq_length, 64, int(value)))
        assert length <= positions and question_room_problem(length, query, positions, stride) is None


def test_a_question_answering_run_advises_only_what_its_model_takes(tmp_path):
    rows = tmp_path / "qa.jsonl"
    rows.write_text(json.dumps({"id": "0", "question": "Who?", "context": "Ann sat.",
                                "answers": {"text": ["Ann"], "answer_start": [0]}}) + "\n")
    with pytest.raises(RecipeError, match=r"the model's 64 positions \(max_position_embeddings\) cannot hold the 90 "
                                          r"tokens that question needs: set max_query_length to at most 44$"):
        finetune.main(["--recipe", "bert-finetune-nli-tiny", "--task", "question-answering", "--train_file",
                       str(rows), "--output_dir", str(tmp_path / "run")])


@pytest.mark.parametrize("max_seq_length, max_query_length, doc_stride", [
    (64, 44, None), (64, 45, None), (90, 64, None), (89, 64, None), (48, 20, None), (48, 33, None), (6, 1, None),
    (5, 1, None), (4, 1, None), (384, 64, 128), (64, 44, 16), (64, 44, 17), (64, 20, 40), (64, 20, 41), (64, 61, 0),
    (64, 60, 0), (8, 1, 4), (8, 1, 3)])
def test_question_room_is_refused_exactly_where_the_tokenizer_cannot_window_the_question(bert, max_seq_length,
                                                                                         max_query_length, doc_stride):
    """A question of `max_query_length` tokens beside a long context: the windows are made when the room is granted,
    and the fast tokenizer fails (a Rust panic, which derives from BaseException) when it is refused; the lengths and
    the stride the refusal offers are the nearest that fit."""
    question, context = " ".join(["the"] * max_query_length), " ".join(["the"] * 300)
    assert len(bert(question, add_special_tokens=False)["input_ids"]) == max_query_length

    def windows():
        return bert(question, context, truncation="only_second", max_length=max_seq_length,
                    stride=qa_doc_stride(max_seq_length, doc_stride), return_overflowing_tokens=True)

    def fits(length: int = max_seq_length, query: int = max_query_length, stride: int | None = doc_stride) -> bool:
        return question_room_problem(length, query, None, stride) is None

    problem = question_room_problem(max_seq_length, max_query_length, None, doc_stride)
    if problem is None:
        assert all(len(ids) <= max_seq_length for ids in windows()["input_ids"])
        return
    with pytest.raises(BaseException, match="`stride` must be strictly less than|too short to respect"):
        windows()
    rule = "max_seq_length // 4" if doc_stride is None else "doc_stride"
    assert problem.startswith(f"max_seq_length {max_seq_length} cannot hold a question of max_query_length "
                              f"{max_query_length} tokens, 3 special tokens and more context than the doc stride of "
                              f"{qa_doc_stride(max_seq_length, doc_stride)} tokens ({rule}, ")
    shortest = int(re.search(r"max_seq_length to at least (\d+)", problem)[1])
    assert fits(length=shortest) and not fits(length=shortest - 1)
    longest = re.search(r"max_query_length to at most (\d+)", problem)
    if longest:
        assert fits(query=int(longest[1])) and not fits(query=int(longest[1]) + 1)
    else:
        assert not fits(query=1)
    lower = re.search(r"doc_stride to at most (\d+)", problem)
    if lower:
        assert fits(stride=int(lower[1])) and not fits(stride=int(lower[1]) + 1)
    else:
        assert not fits(stride=0)


def _shared_context_tokens(max_seq_length: int, max_query_length: int, doc_stride: int | None, bert) -> list[int]:
    """How many context tokens each window of a long context shares with the next, as finetune encodes them."""
    context = " ".join(f"Sentence {i} names the {word} of Lima." for i, word in
                       enumerate(["river", "bridge", "market", "tower"] * 15))
    rows = datasets.Dataset.from_list([{"id": "0", "question": " ".join(["the"] * max_query_length), "context": context,
                                        "answers": {"text": ["Sentence"], "answer_start": [0]}}])
    stride = [] if doc_stride is None else ["--doc_stride", str(doc_stride)]
    recipe = parse_args(["--recipe", "bert-finetune-nli-tiny", "--task", "question-answering", "--max_seq_length",
                         str(max_seq_length), "--max_query_length", str(max_query_length), *stride],
                        command="finetune")
    data, _ = finetune.encoded(recipe, bert, "question-answering", rows, "question", "context", None, "rows",
                               scored=True)
    spans = [[tuple(o) for o in offsets if o is not None] for offsets in data["offset_mapping"]]
    assert len(spans) >= 3 and data["example_id"] == [0] * len(spans)
    shared = []
    for before, after in zip(spans, spans[1:]):
        common = len(set(before) & set(after))
        assert before[len(before) - common:] == after[:common]  # the end of one window opens the next
        shared.append(common)
    return shared


@settings(max_examples=25, deadline=None, database=None, derandomize=True)
@given(st.integers(24, 96).flatmap(lambda length: st.integers(1, length - 5).flatmap(
    lambda query: st.tuples(st.just(length), st.just(query), st.integers(0, length - query - 4)))))
def test_consecutive_windows_share_exactly_doc_stride_context_tokens(bert, lengths):
    max_seq_length, max_query_length, doc_stride = lengths
    assert set(_shared_context_tokens(max_seq_length, max_query_length, doc_stride, bert)) == {doc_stride}


@pytest.mark.parametrize("max_seq_length", [48, 64, 96])
def test_without_doc_stride_windows_share_a_quarter_of_their_length_as_before(bert, max_seq_length):
    assert set(_shared_context_tokens(max_seq_length, 4, None, bert)) == {max_seq_length // 4}
