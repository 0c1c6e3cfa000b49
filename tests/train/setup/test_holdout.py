"""Data of no validation split (a Hub corpus of one split, as `wikimedia/wikipedia`, local training files, a saved
dataset): without `eval_size` the run trains without evaluation, said once; with `eval_size N` set by the user it holds
out the data's first N rows to evaluate on and trains on the others, in memory and streamed alike (a stream, whatever
its shards and lanes, never trains on a held-out row), `train_size` cutting what is left; the card names the split
`train[:N]`. A Hub dataset with other splits but not the one named is still refused, naming them. The paper-scale
recipes `bert-base-wikipedia` and `gpt-117m-wikipedia` read that corpus so, their `eval_size` sizing their own data."""

import json

import datasets
import pytest
from conftest import hub_dataset

from train import evaluate, finetune, pretrain_bert, pretrain_gpt
from train.data.corpus import generate_records
from train.data.errors import UnknownSplitError
from train.data.files import load_text_dataset
from train.data.labels import LabelError, class_labels, score_labels
from train.data.table_files import row_location
from train.run.recipes import RecipeError, load_recipe, parse_args
from train.setup.splits import load_splits

datasets.disable_progress_bars()
TEXTS = [f"Article {i} tells of the river {i % 7} and the town {i % 5}. It ends here." for i in range(40)]
COLUMNS = [("text", "text")]


def _rows(batch) -> list[str]:
    return [row["text"] for row in batch]


def _recipe(*argv: str):
    return parse_args(["--recipe", "gpt-pretrain-tiny", *argv], command="pretrain_gpt")


@pytest.fixture
def wikipedia(tmp_path, monkeypatch):
    """`wikimedia/wikipedia` (config `20231101.en`: a `train` split only) in the offline datasets cache."""
    rows = tmp_path / "train.jsonl"
    rows.write_text("".join(json.dumps({"id": str(i), "title": f"A{i}", "text": t}) + "\n"
                            for i, t in enumerate(TEXTS)))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    hub_dataset(tmp_path / "cache", "wikimedia/wikipedia", "20231101.en", {"train": rows})
    return ["--dataset", "wikimedia/wikipedia", "--dataset_config", "20231101.en"]


@pytest.mark.parametrize("streaming", ["false", "true"])
def test_a_corpus_of_one_split_trains_without_evaluation_unless_eval_size_is_set(wikipedia, streaming, capsys):
    recipe = _recipe(*wikipedia, "--streaming", streaming)
    train, validation = load_splits(recipe, COLUMNS)
    assert validation is None and recipe.eval_size is None and _rows(train) == TEXTS
    assert "has no split 'validation' to evaluate on: training without evaluation (set eval_size" in \
        capsys.readouterr().out


@pytest.mark.parametrize("streaming", ["false", "true"])
def test_eval_size_holds_out_the_first_rows_and_trains_on_the_others(wikipedia, streaming, capsys):
    recipe = _recipe(*wikipedia, "--streaming", streaming, "--eval_size", "6", "--train_size", "20")
    train, validation = load_splits(recipe, COLUMNS)
    assert list(validation["text"]) == TEXTS[:6]
    assert _rows(train) == TEXTS[6:26]  # train_size cuts the rows left, never the held-out ones
    assert recipe.held_out == 6 and recipe.evaluated_split == "train[:6]"
    assert "wikimedia/wikipedia (train[:6])" == recipe.split_name("validation")
    assert "held out of training (eval_size 6)" in capsys.readouterr().out


def test_a_stream_read_by_shards_never_trains_on_a_held_out_row(tmp_path, capsys):
    """A saved dataset of 4 Arrow files streams as 4 shards, read in lanes side by side (`StreamBatches`): the rows
    left out are the held-out ones, whichever lane reads them."""
    folder = tmp_path / "saved"
    datasets.Dataset.from_dict({"text": TEXTS}).save_to_disk(str(folder), num_shards=4)
    recipe = _recipe("--train_file", str(folder), "--streaming", "true", "--eval_size", "5")
    train, validation = load_splits(recipe, COLUMNS)
    lanes = [row for lane in range(4) for row in _rows(train.shard(4, lane, contiguous=False))]
    held = list(validation["text"])
    assert held == _rows(load_text_dataset(folder, columns=COLUMNS, streaming=True).take(5))
    assert sorted(lanes) == sorted(t for t in TEXTS if t not in held) and len(held) == 5
    assert recipe.held_out_copies() is None  # lanes number their rows each from 0: no count could be exact
    assert "(uncounted: its 4 shards are read in lanes side by side" in capsys.readouterr().out


def test_local_training_files_hold_out_rows_as_a_hub_corpus_does(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS) + "\n")
    train, validation = load_splits(_recipe("--train_file", str(corpus), "--eval_size", "4"), COLUMNS)
    assert list(validation["text"]) == TEXTS[:4] and list(train["text"]) == TEXTS[4:]


@pytest.mark.parametrize("streaming, size", [("false", 40), ("true", 41)])  # a stream cannot count what is left
def test_holding_out_every_row_is_refused(wikipedia, streaming, size):
    with pytest.raises(RecipeError, match=rf"recipe key 'eval_size' is {size}: .* holds out its first {size} rows .* "
                                          r"nothing would be left to train on"):
        load_splits(_recipe(*wikipedia, "--streaming", streaming, "--eval_size", str(size)), COLUMNS)


@pytest.mark.parametrize("streaming", ["false", "true"])
def test_no_row_left_but_copies_of_held_out_ones_is_refused(tmp_path, streaming):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS[:6] + TEXTS[:6]) + "\n")
    with pytest.raises(RecipeError, match=rf"recipe key 'eval_size' is 6: {corpus} has no row after its first 6, held "
                                          r"out to evaluate on, that is not identical to a held-out one: nothing would "
                                          r"be left to train on"):
        load_splits(_recipe("--train_file", str(corpus), "--eval_size", "6", "--streaming", streaming), COLUMNS)


def test_a_stream_held_out_whole_is_refused_before_the_run_writes_anything(tmp_path):
    """A stream cannot count its rows ahead: it is read up to the first row left to train on (before: a tokenizer
    trained on nothing, `train_tokenizer got no non-empty text`, in a run folder left behind)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS) + "\n")
    with pytest.raises(RecipeError, match=r"has no row after its first 40, .*nothing would be left to train on"):
        pretrain_gpt.main(["--train_file", str(corpus), "--eval_size", "40", "--streaming", "true", "--max_steps", "2",
                           "--report_to", "none", "--output_dir", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("streaming", ["false", "true"])
def test_a_hub_dataset_with_other_splits_is_still_refused_naming_them(tmp_path, monkeypatch, streaming):
    files = {}
    for split in ("train", "test"):
        files[split] = tmp_path / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS[:8]))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    hub_dataset(tmp_path / "cache", "lineage-tests/reviews", "default", files)
    with pytest.raises(UnknownSplitError, match=r"has no split 'validation'.*test.*validation_split.*or eval_size to "
                                                r"hold out rows"):
        load_splits(_recipe("--dataset", "lineage-tests/reviews", "--streaming", streaming), COLUMNS)


def test_a_run_on_a_corpus_of_one_split_evaluates_on_its_held_out_rows(wikipedia, tmp_path):
    results, folder = pretrain_gpt.main([*wikipedia, "--eval_size", "8", "--max_steps", "2", "--save_steps", "0",
                                         "--progress_bar", "false", "--report_to", "none",
                                         "--output_dir", str(tmp_path / "run")])
    assert "eval_loss" in results and "eval_size: 8" in (folder / "recipe.yaml").read_text()
    card = (folder / "README.md").read_text()
    assert "split: train[:8]" in card and "config: 20231101.en" in card


@pytest.mark.parametrize("streaming", ["false", "true"])
def test_rows_identical_to_a_held_out_row_never_train_in_memory_or_streamed(tmp_path, streaming, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS[:20] + TEXTS[:2] + TEXTS[20:] + TEXTS[1:3]) + "\n")
    recipe = _recipe("--train_file", str(corpus), "--eval_size", "4", "--streaming", streaming)
    train, validation = load_splits(recipe, COLUMNS)
    assert list(validation["text"]) == TEXTS[:4] and _rows(train) == TEXTS[4:]
    assert recipe.held_out_copies() == 4  # a stream's, of the rows it read: all of them
    out = capsys.readouterr().out
    said = f"{corpus}: left 4 rows out of training, each identical to one of the 4 held out (eval_size)"
    assert (said in out) == (streaming == "false")  # a stream is counted by nothing ahead: it says it leaves them out
    assert (f"{corpus}: rows identical to a held-out row are left out of training as the stream reads them" in out) \
        == (streaming == "true")


def test_a_stream_counts_the_copies_it_left_out_of_the_rows_it_read_and_none_once_resumed_past_rows_unread(tmp_path):
    """A stream counts the copies of held-out rows among the rows it has read, one run of rows from the start (its
    first read: a filter batch of 1,000 rows); a stream resumed at a later position (`load_state_dict`, as a resumed
    run's) has skipped rows an earlier process read, so its count would be short: none."""
    texts = [f"row {i}" for i in range(2200)]
    for row in (10, 1200, 2150):
        texts[row] = texts[row % 4]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(texts) + "\n")

    def stream():
        recipe = _recipe("--train_file", str(corpus), "--eval_size", "4", "--streaming", "true")
        return recipe, load_splits(recipe, COLUMNS)[0]

    recipe, train = stream()
    assert recipe.held_out_copies() == 1  # rows 4 to 999 read: the copy in row 10
    rows = iter(train)
    for _ in range(1100):
        next(rows)
    assert recipe.held_out_copies() == 2  # rows to 1999 read: the copy in row 1200 too; row 2150 not yet
    for _ in range(1000):
        next(rows)
    position = train.state_dict()
    assert len(list(rows)) == 2200 - 4 - 3 - 2100 and recipe.held_out_copies() == 3
    resumed, train = stream()
    train.load_state_dict(position)
    assert _rows(train) == [t for t in texts[2106:] if t not in texts[:4]] and resumed.held_out_copies() is None


@pytest.mark.parametrize("streaming", ["false", "true"])
def test_a_run_records_the_copies_of_held_out_rows_it_left_out(tmp_path, streaming):
    """results.json and the card record `held_out_copies`, counted before training in memory, as a stream reads it."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS[:20] + TEXTS[:2] + TEXTS[20:] + TEXTS[1:3]) + "\n")
    results, folder = pretrain_gpt.main(["--recipe", "gpt-pretrain-tiny", "--train_file", str(corpus), "--eval_size",
                                         "4", "--streaming", streaming, "--max_steps", "2", "--save_steps", "0",
                                         "--tokenizer_vocab_size", "300", "--progress_bar", "false", "--report_to",
                                         "none", "--output_dir", str(tmp_path / "run")])
    assert results["held_out_copies"] == 4
    assert json.loads((folder / "results.json").read_text())["held_out_copies"] == 4
    assert "| held_out_copies | 4 |" in (folder / "README.md").read_text()


def test_an_error_in_held_out_rows_names_the_files_line(tmp_path):
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    recipe = _finetune_recipe("--train_file", str(path), "--eval_size", "20")
    load_splits(recipe, COLUMNS)
    assert row_location(recipe.split_name("validation"), 7, "text") == f"{path}: line 8 (JSON Lines, column 'text')"
    assert recipe.split_name("validation") == f"{path} (train[:20])"
    assert row_location(recipe.split_name("train"), 7, "text") == f"{path}: line 28 (JSON Lines, column 'text')"


def _finetune_recipe(*argv: str):
    return parse_args(["--recipe", "bert-finetune-nli-tiny", *argv], command="finetune")


def _scores_file(path, scores) -> str:
    path.write_text("text,score\n" + "".join(f"{TEXTS[i]},{score}\n" for i, score in enumerate(scores)))
    return str(path)


@pytest.mark.parametrize("streaming", ["false", "true"])
@pytest.mark.parametrize("row", [3, 25])  # held out, then left to train on behind a left-out copy of a held-out row
def test_a_bad_score_is_named_by_its_line_in_the_file_whatever_rows_are_held_out(tmp_path, streaming, row):
    rows = [{"text": t, "score": "abc" if i == row else 0.5} for i, t in enumerate(TEXTS)]
    rows[10] = rows[2]
    path = tmp_path / "scores.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = _finetune_recipe("--task", "regression", "--train_file", str(path), "--eval_size", "5",
                              "--streaming", streaming)
    with pytest.raises(LabelError, match=rf"^{path}: line {row + 1} \(JSON Lines, column 'score'\): label 'abc' is"):
        train, validation = load_splits(recipe, [("text", "text"), ("score", "score")])
        train, _ = score_labels(train, validation, "score", (recipe.split_name("train"),
                                                             recipe.split_name("validation")))
        list(train)


def test_a_word_among_held_out_scores_read_as_text_is_named_not_the_first_number(tmp_path):
    scores = [0.5] * 40
    scores[30] = "n/a"
    path = _scores_file(tmp_path / "scores.csv", scores)
    recipe = _finetune_recipe("--task", "regression", "--train_file", path, "--eval_size", "10")
    train, validation = load_splits(recipe, [("text", "text"), ("score", "score")])
    with pytest.raises(LabelError, match=r"line 32 \(CSV, column 'score'\): label 'n/a' is text"):
        score_labels(train, validation, "score", (recipe.split_name("train"), recipe.split_name("validation")))


def test_a_bad_class_id_is_named_by_its_line_whatever_rows_are_held_out(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps({"text": t, "label": -5 if i == 30 else i % 2}) + "\n"
                            for i, t in enumerate(TEXTS)))
    recipe = _finetune_recipe("--task", "sequence-classification", "--train_file", str(path), "--eval_size", "5")
    train, validation = load_splits(recipe, [("text", "text"), ("label", "label")])
    with pytest.raises(LabelError, match=rf"^{path}: line 31 \(JSON Lines, column 'label'\): label -5"):
        class_labels(train, validation, "label", (recipe.split_name("train"), recipe.split_name("validation")))


PAPERS = {  # recipe -> (command, the paper's settings)
    "bert-base-wikipedia": (pretrain_bert, {
        "model": "bert-base", "max_seq_length": 128, "nsp": True, "mlm_probability": 0.15, "learning_rate": 1e-4,
        "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-6, "weight_decay": 0.01, "lr_scheduler": "linear",
        "warmup_steps": 10_000, "max_steps": 900_000, "tokenizer_vocab_size": 30522,
        "per_device_train_batch_size": 32}),
    "gpt-117m-wikipedia": (pretrain_gpt, {
        "model": "gpt-117m", "max_seq_length": 512, "pack_documents": False, "learning_rate": 2.5e-4,
        "weight_decay": 0.01, "lr_scheduler": "cosine", "warmup_steps": 2000, "tokenizer_vocab_size": 40478,
        "per_device_train_batch_size": 8}),
}


@pytest.mark.parametrize("name", list(PAPERS))
def test_the_paper_scale_recipes_hold_the_papers_settings_and_size_their_own_corpus(name):
    recipe = load_recipe(name)
    assert {key: getattr(recipe, key) for key in PAPERS[name][1]} == PAPERS[name][1]
    assert (recipe.dataset, recipe.dataset_config, recipe.streaming, recipe.eval_size) == (
        "wikimedia/wikipedia", "20231101.en", True, 1000)
    assert "eval_size" in recipe.set_by_user  # its held-out rows are of its own corpus
    assert "eval_size" not in load_recipe(name, {"train_file": "books.txt"}).set_by_user  # never of the user's


@pytest.mark.parametrize("name", list(PAPERS))
def test_the_paper_scale_recipes_train_on_the_hubs_wikipedia_shrunk(name, wikipedia, tmp_path):
    command, _ = PAPERS[name]
    tiny, keys = ("bert-tiny", ()) if command is pretrain_bert else ("gpt-tiny", ("--max_new_tokens", "8"))
    results, folder = command.main(["--recipe", name, "--model", tiny, "--tokenizer_vocab_size", "300",
                                    "--max_seq_length", "32", "--per_device_train_batch_size", "4", "--eval_size", "8",
                                    *keys, "--max_steps", "2", "--warmup_steps", "1", "--save_steps", "0",
                                    "--eval_steps", "0", "--progress_bar", "false", "--report_to", "none",
                                    "--output_dir", str(tmp_path / "run")])
    assert results["steps"] == 2 and "eval_loss" in results
    assert "split: train[:8]" in (folder / "README.md").read_text()


def test_berts_second_phase_continues_from_the_first_runs_model(wikipedia, tmp_path):
    """training.md's second phase (512 tokens in the paper): the recipe again, from the first run's model and tokenizer
    (the recipe's tokenizer_vocab_size is its own key, never the user's, so the pretrained tokenizer is kept)."""
    shrunk = ["--tokenizer_vocab_size", "300", "--per_device_train_batch_size", "4", "--eval_size", "8",
              "--max_steps", "2", "--save_steps", "0", "--eval_steps", "0", "--progress_bar", "false",
              "--report_to", "none"]
    _, first = pretrain_bert.main(["--recipe", "bert-base-wikipedia", "--model", "bert-tiny", "--max_seq_length", "32",
                                   "--warmup_steps", "1", *shrunk, "--output_dir", str(tmp_path / "first")])
    results, _ = pretrain_bert.main(["--recipe", "bert-base-wikipedia", "--model", str(first), "--max_seq_length",
                                     "64", "--warmup_steps", "0", "--learning_rate", "1e-5", *shrunk[2:],
                                     "--output_dir", str(tmp_path / "second")])
    assert results["steps"] == 2 and "eval_loss" in results


def test_a_fine_tuned_model_scores_its_held_out_rows_again_with_lineage_evaluate(tmp_path, monkeypatch):
    """A Hub classification data set of one split: finetune holds out its first rows, and `lineage evaluate --split
    train --eval_size N` scores exactly those (the same figures as the run's own evaluation)."""
    rows = tmp_path / "train.jsonl"
    datasets.Dataset.from_list(generate_records("nli", "train", size=40)).to_json(rows)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    hub_dataset(tmp_path / "cache", "lineage-tests/pairs", "default", {"train": rows})
    results, folder = finetune.main(["--recipe", "bert-finetune-nli-tiny", "--dataset", "lineage-tests/pairs",
                                     "--eval_size", "10", "--max_steps", "2", "--save_steps", "0",
                                     "--progress_bar", "false", "--report_to", "none",
                                     "--output_dir", str(tmp_path / "run")])
    out = evaluate.main(["--model", str(folder), "--dataset", "lineage-tests/pairs", "--split", "train",
                         "--eval_size", "10", "--max_seq_length", "64", "--output_dir", str(tmp_path / "eval")])
    figures = json.loads((out / "results.json").read_text())["scores"]["nli"]
    assert figures["accuracy"] == results["eval_accuracy"] and figures["f1"] == pytest.approx(results["eval_f1"])
