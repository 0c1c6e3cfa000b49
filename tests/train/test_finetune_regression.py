"""The finetune task `regression` (STS-B's: a real-valued score per text or pair), end to end on data the tests write
in the layouts users have: a BERT on sentence pairs of a CSV file and a GPT on single texts of a parquet file with
integer ratings (its auxiliary LM loss on), a BERT streaming a `save_to_disk` DatasetDict shaped like GLUE's stsb and
one reading that layout as the Hub dataset `nyu-mll/glue` (`stsb`). Each trains, reports Pearson's and Spearman's
correlation and the mean squared error, saves a folder that `AutoModelForSequenceClassification` and the
text-classification pipeline read as a Hub user does (a raw score, the head's output); `lineage evaluate` scores the
folder again. Refused before any work: no data given, or labels that are no scores."""

import json
import math
import random
import re
import shutil
from types import SimpleNamespace

import datasets
import pandas as pd
import pytest
import torch
from conftest import hub_dataset
from huggingface_hub import ModelCard
from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

from train import evaluate, finetune
from train.data.labels import LabelError
from train.run.publish import read_card_metadata
from train.run.recipes import RecipeError

QUICK = ["--max_steps", "2", "--save_steps", "0", "--progress_bar", "false", "--report_to", "none"]
FIGURES = ("eval_pearson", "eval_spearmanr", "eval_mse")
WORDS = ("the cat dog bird sat ran flew on over under a mat tree roof red big small green old new quick slow "
         "house river hill").split()


def pairs(count: int, seed: int) -> list[dict]:
    """STS-B's layout: two sentences and their similarity, 0 to 5, the less alike the more of the second's words
    are replaced."""
    draw, rows = random.Random(seed), []
    for index in range(count):
        first = draw.choices(WORDS, k=6)
        changed = draw.randint(0, 6)
        second = [draw.choice(WORDS) if i < changed else word for i, word in enumerate(first)]
        rows.append({"sentence1": " ".join(first), "sentence2": " ".join(second),
                     "label": round(5 * (1 - changed / 6), 2), "idx": index})
    return rows


def check_figures(results: dict) -> None:
    """Correlations within [-1, 1] (NaN only for a constant prediction, which these runs do not make), a mean squared
    error of at least 0."""
    assert set(FIGURES) <= set(results) and "eval_accuracy" not in results
    assert -1 <= results["eval_pearson"] <= 1 and -1 <= results["eval_spearmanr"] <= 1
    assert results["eval_mse"] >= 0


def check_folder(folder, texts: list[tuple[str, str | None]]) -> None:
    """The folder as a Hub user loads it: one output of problem_type regression; the pipeline's score is that output,
    unchanged (no sigmoid), a float."""
    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert model.config.num_labels == 1 and model.config.problem_type == "regression"
    scorer = pipeline("text-classification", model=model, tokenizer=tokenizer)
    for text, pair in texts:
        said = scorer({"text": text, "text_pair": pair} if pair else text)
        said = said[0] if isinstance(said, list) else said
        with torch.no_grad():
            output = model(**tokenizer(text, pair, return_tensors="pt")).logits
        assert isinstance(said["score"], float) and said["score"] == pytest.approx(output.item(), abs=1e-5)


def test_a_regression_head_predicts_its_one_output_and_a_constant_prediction_has_no_correlation():
    labels = torch.tensor([1.0, 2.0, 3.0, 4.0])
    outputs = SimpleNamespace(logits=torch.full((4, 1), 2.5))  # (B, 1): one output per example
    predicted = finetune.predict_scores(None, {"labels": labels}, outputs)
    assert predicted["predictions"].shape == (4,)
    figures = finetune.score_metrics(predicted, 0.0)
    assert math.isnan(figures["pearson"]) and math.isnan(figures["spearmanr"]) and figures["mse"] == 1.25


@pytest.fixture(scope="module")
def bert_run(tmp_path_factory):
    """A BERT fine-tuned on the sentence pairs of a CSV file (pandas' `to_csv`), scored on another."""
    root = tmp_path_factory.mktemp("stsb-csv")
    train, dev = root / "train.csv", root / "dev.csv"
    pd.DataFrame(pairs(48, 0)).to_csv(train, index=False)
    pd.DataFrame(pairs(16, 1)).to_csv(dev, index=False)
    results, folder = finetune.main(["--recipe", "bert-finetune-nli-tiny", "--task", "regression", "--train_file",
                                     str(train), "--validation_file", str(dev), "--text_column", "sentence1",
                                     "--text_pair_column", "sentence2", *QUICK, "--output_dir", str(root / "run")])
    return results, folder, root


def test_bert_learns_scores_of_pairs_from_a_csv_and_saves_a_folder_of_one_output(bert_run):
    results, folder, _ = bert_run
    check_figures(results)
    # the eval loss of a BERT regression head is the mean squared error over the validation rows
    assert results["eval_mse"] == pytest.approx(results["eval_loss"], rel=1e-4)
    check_folder(folder, [("the cat sat on a mat", "the dog sat on a mat"), ("a red house", "an old river")])
    card = read_card_metadata(folder / "README.md")
    assert card["pipeline_tag"] == "text-classification"
    assert {"pearson", "spearmanr", "mse"} <= set(card["metrics"])
    saved = json.loads((folder / "results.json").read_text())
    assert {name: saved[name] for name in FIGURES} == {name: results[name] for name in FIGURES}
    assert "| eval_pearson |" in (folder / "README.md").read_text()


def strict_json(text: str):
    """`text` read as strict JSON, as jq and JavaScript's JSON.parse read it: the bare tokens NaN and Infinity that
    Python's json writes refused."""
    def refuse(token):
        raise ValueError(f"{token} is no JSON")

    return json.loads(text, parse_constant=refuse)


def test_undefined_correlations_are_null_in_what_the_run_and_lineage_evaluate_write_and_no_card_holds_nan(tmp_path):
    """Validation scores all alike: Pearson's and Spearman's correlation are undefined (NaN) however the model predicts.
    results.json and metrics.jsonl hold null for them; the card's table says `undefined` and its model-index, whose
    metrics the Hub needs values of, carries the mean squared error alone (huggingface_hub reads the card back)."""
    train, dev = tmp_path / "train.csv", tmp_path / "dev.csv"
    pd.DataFrame(pairs(48, 0)).to_csv(train, index=False)
    pd.DataFrame([{**row, "label": 2.5} for row in pairs(16, 1)]).to_csv(dev, index=False)
    results, folder = finetune.main(["--recipe", "bert-finetune-nli-tiny", "--task", "regression", "--train_file",
                                     str(train), "--validation_file", str(dev), *GLUE_COLUMNS, *QUICK,
                                     "--output_dir", str(tmp_path / "run")])
    assert math.isnan(results["eval_pearson"]) and math.isnan(results["eval_spearmanr"])
    saved = strict_json((folder / "results.json").read_text())
    assert saved["eval_pearson"] is None and saved["eval_spearmanr"] is None and saved["eval_mse"] >= 0
    logged = [strict_json(line) for line in (tmp_path / "run" / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [r["eval_pearson"] for r in logged if "eval_pearson" in r] == [None]
    card = ModelCard.load(folder / "README.md")  # as the Hub reads it
    assert [(r.metric_type, r.metric_value) for r in card.data.eval_results] == [("mse", round(saved["eval_mse"], 4))]
    assert "| eval_pearson | undefined |" in card.text and not re.search(r"\bnan\b", card.content, re.IGNORECASE)
    out = evaluate.main(["--model", str(folder), "--dataset", str(dev), "--write_card", "true",
                         "--output_dir", str(tmp_path / "eval")])
    scored = strict_json((out / "results.json").read_text())["scores"]["regression"]
    assert scored["pearson"] is None and scored["spearmanr"] is None and scored["mse"] >= 0
    text = (folder / "README.md").read_text()
    assert "| regression | pearson | undefined |" in text and not re.search(r"\bnan\b", text, re.IGNORECASE)
    entries = read_card_metadata(folder / "README.md")["model-index"][0]["results"]
    # the evaluation of the run's own validation file replaces the run's entry for it: one entry per task and data
    assert [[m["type"] for m in entry["metrics"]] for entry in entries] == [["loss", "mse"]]


@pytest.fixture
def progress_bars():
    """datasets' progress bars shown, as a user sees them (other test modules switch them off)."""
    disabled = datasets.are_progress_bars_disabled()
    datasets.enable_progress_bars()
    yield
    if disabled:
        datasets.disable_progress_bars()


def test_the_progress_of_tokenizing_names_regression_the_task_trained_and_scored_not_its_encoder(tmp_path, capfd,
                                                                                                 progress_bars):
    """Regression encodes its rows as classification does; what the run and lineage evaluate show says regression."""
    train = tmp_path / "train.csv"
    pd.DataFrame(pairs(24, 6)).to_csv(train, index=False)
    _, folder = finetune.main(["--recipe", "bert-finetune-nli-tiny", "--task", "regression", "--train_file", str(train),
                               *GLUE_COLUMNS, *QUICK, "--output_dir", str(tmp_path / "run")])
    shown = capfd.readouterr()
    assert "tokenizing (regression)" in shown.err and "classification" not in shown.out + shown.err
    evaluate.main(["--model", str(folder), "--dataset", str(train), "--output_dir", str(tmp_path / "eval")])
    shown = capfd.readouterr()
    assert "tokenizing (regression)" in shown.err and "classification" not in shown.out + shown.err


def test_gpt_learns_integer_ratings_of_single_texts_from_parquet_with_its_auxiliary_lm_loss(tmp_path):
    rows = [{"review": row["sentence1"], "stars": 1 + int(row["label"]) % 5} for row in pairs(40, 2)]
    train, dev = tmp_path / "train.parquet", tmp_path / "dev.parquet"
    pd.DataFrame(rows[:32]).to_parquet(train)
    pd.DataFrame(rows[32:]).to_parquet(dev)
    results, folder = finetune.main(["--recipe", "gpt-finetune-nli-tiny", "--task", "regression", "--train_file",
                                     str(train), "--validation_file", str(dev), "--text_column", "review",
                                     "--label_column", "stars", "--lm_loss_weight", "0.5", *QUICK,
                                     "--output_dir", str(tmp_path / "run")])
    check_figures(results)
    assert results["eval_loss"] > results["eval_mse"]  # the LM loss is added, weighted
    check_folder(folder, [("the cat sat on a mat", None)])


def stsb_splits(root) -> dict:
    """GLUE's stsb as datasets has it: sentence1, sentence2, a float32 label and idx; its test split labelled -1."""
    features = datasets.Features({"sentence1": datasets.Value("string"), "sentence2": datasets.Value("string"),
                                  "label": datasets.Value("float32"), "idx": datasets.Value("int32")})
    files = {}
    for split, (count, seed) in {"train": (32, 3), "validation": (12, 4), "test": (8, 5)}.items():
        rows = [{**row, "label": -1.0} if split == "test" else row for row in pairs(count, seed)]
        files[split] = root / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps(row) + "\n" for row in rows))
    return files, features


GLUE_COLUMNS = ["--text_column", "sentence1", "--text_pair_column", "sentence2"]


def test_a_saved_dataset_dict_of_glues_stsb_layout_streams_and_its_test_split_is_refused(tmp_path, capsys):
    files, features = stsb_splits(tmp_path)
    saved = tmp_path / "stsb"
    datasets.DatasetDict({split: datasets.Dataset.from_json(str(path), features=features)
                          for split, path in files.items()}).save_to_disk(saved)
    base = ["--recipe", "bert-finetune-nli-tiny", "--task", "regression", "--train_file", str(saved), *GLUE_COLUMNS]
    for skip in ("false", "true"):  # labelled -1.0 throughout: nothing to evaluate on either way
        with pytest.raises(LabelError, match=r"stsb \(test\): every row is labelled -1( or without a score)? in "
                                             r"column 'label'"):
            finetune.main([*base, "--validation_split", "test", "--skip_unlabeled", skip, *QUICK,
                           "--output_dir", str(tmp_path / "refused")])
    assert not (tmp_path / "refused").exists()
    results, folder = finetune.main([*base, "--streaming", "true", *QUICK, "--output_dir", str(tmp_path / "run")])
    check_figures(results)
    assert "stream: 1 shard" in capsys.readouterr().out and "streaming: true" in (folder / "recipe.yaml").read_text()


def test_glues_stsb_reads_as_the_hub_dataset(tmp_path, monkeypatch):
    files, features = stsb_splits(tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    hub_dataset(tmp_path / "cache", "nyu-mll/glue", "stsb", files, features)
    results, folder = finetune.main(["--recipe", "bert-finetune-nli-tiny", "--task", "regression", "--dataset",
                                     "nyu-mll/glue", "--dataset_config", "stsb", *GLUE_COLUMNS, *QUICK,
                                     "--output_dir", str(tmp_path / "run")])
    check_figures(results)
    card = read_card_metadata(folder / "README.md")["model-index"][0]["results"][0]
    assert card["dataset"] == {"name": "nyu-mll/glue", "type": "nyu-mll/glue", "config": "stsb",
                               "split": "validation"}
    assert {m["type"] for m in card["metrics"]} == {"pearson", "spearmanr", "mse"}


@pytest.mark.parametrize("data", [[], ["--dataset", "embedded:nli"]])
def test_regression_without_data_of_the_users_is_refused_naming_the_keys_before_any_work(tmp_path, data):
    with pytest.raises(RecipeError, match=r"recipe key 'task' is 'regression', which has no embedded data \(the "
                                          r"embedded corpus holds classes; the recipe's dataset is 'embedded:nli'\): "
                                          r"name your data with 'train_file' .* or 'dataset'"):
        finetune.main(["--recipe", "bert-finetune-nli-tiny", "--task", "regression", *data,
                       "--output_dir", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("label, line, refusal", [("high", 3, "label 'high' is text, not a number"),
                                                  ("NaN", 3, "label 'NaN' is not a finite number")])
def test_a_label_that_is_no_score_is_refused_naming_file_line_and_column(tmp_path, label, line, refusal):
    train = tmp_path / "train.csv"
    train.write_text(f"text,label\na good film,4.5\nan odd film,{label}\na bad film,1\n")
    with pytest.raises(LabelError, match=rf"train.csv: line {line} \(CSV, column 'label'\): {refusal}"):
        finetune.main(["--recipe", "bert-finetune-nli-tiny", "--task", "regression", "--train_file", str(train),
                       *QUICK, "--output_dir", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("streaming", ["false", "true"])
def test_a_row_without_a_score_is_refused_naming_skip_unlabeled_which_leaves_it_out(tmp_path, streaming, capsys):
    """An empty score (pandas writes a missing value as an empty CSV field) is an unlabelled row, as -1 is: refused
    naming its line and skip_unlabeled, which leaves it out; counted in results.json, in memory before training, as a
    stream reads them (before: a stream counted none)."""
    rows = pairs(24, 6)
    for index in (3, 9):
        rows[index]["label"] = None
    train, dev = tmp_path / "train.csv", tmp_path / "dev.csv"
    pd.DataFrame(rows).to_csv(train, index=False)
    pd.DataFrame(pairs(8, 7)).to_csv(dev, index=False)
    base = ["--recipe", "bert-finetune-nli-tiny", "--task", "regression", "--train_file", str(train),
            "--validation_file", str(dev), *GLUE_COLUMNS, "--streaming", streaming, *QUICK]
    with pytest.raises(LabelError, match=r"train.csv: line 5 \(CSV, column 'label'\): the row has no score \(null, "
                                         r"or an empty or blank field\): a row without a score is unlabelled; set "
                                         r"skip_unlabeled: true to skip such rows"):
        finetune.main([*base, "--output_dir", str(tmp_path / "refused")])
    assert not (tmp_path / "refused").exists()
    results, _ = finetune.main([*base, "--skip_unlabeled", "true", "--output_dir", str(tmp_path / "run")])
    check_figures(results)
    assert results["skipped_unlabeled"] == 2
    said = capsys.readouterr().out
    streamed = ("train.csv: rows labelled -1 or without a score in column 'label' are skipped as the stream reads "
                "them (skip_unlabeled; counted as it reads them, in results.json's skipped_unlabeled")
    memory = "train.csv: skipped 2 rows labelled -1 or without a score in column 'label'"
    assert (memory if streaming == "false" else streamed) in said


def test_lineage_evaluate_scores_a_regression_run_with_its_columns_and_skips_unlabelled_rows(bert_run, capsys):
    results, folder, root = bert_run
    dev = root / "dev.csv"
    out = evaluate.main(["--model", str(folder), "--dataset", str(dev), "--output_dir", str(root / "eval")])
    report = json.loads((out / "results.json").read_text())
    figures = report["scores"]["regression"]
    assert report["data"]["task"] == "regression" and report["data"]["rows"] == 16
    assert {name: figures[name.removeprefix("eval_")] for name in FIGURES} == pytest.approx(
        {name: results[name] for name in FIGURES}, abs=1e-4)  # the run's validation rows again, in other batches
    unlabelled = root / "test.csv"
    pd.DataFrame([{**row, "label": -1.0} if row["idx"] % 4 == 0 else row for row in pairs(16, 1)]).to_csv(
        unlabelled, index=False)
    out = evaluate.main(["--model", str(folder), "--dataset", str(unlabelled), "--skip_unlabeled",
                         "--output_dir", str(root / "eval-skipped")])
    assert json.loads((out / "results.json").read_text())["data"]["rows"] == 12
    assert "skipped 4 rows labelled -1" in capsys.readouterr().out
    assert math.isfinite(figures["loss"])
    with pytest.raises(LabelError, match=r"dev.csv: line 2 \(CSV, column 'label'\): label .* is not a class: .*set "
                                         r"task: regression"):  # scores read as classes
        evaluate.main(["--model", str(folder), "--task", "nli", "--dataset", str(dev),
                       "--output_dir", str(root / "eval-nli")])
    with pytest.raises(evaluate.EvaluateError, match=r"--task 'regression' has no embedded data: give --dataset"):
        evaluate.main(["--model", str(folder), "--output_dir", str(root / "eval-none")])


def test_lineage_evaluate_refuses_regression_for_a_head_of_classes(bert_run, tmp_path):
    _, folder, root = bert_run
    classes = shutil.copytree(folder, tmp_path / "classes")
    config = json.loads((classes / "config.json").read_text())
    config.update(id2label={str(i): name for i, name in enumerate("abc")}, problem_type=None)
    (classes / "config.json").write_text(json.dumps(config))
    with pytest.raises(evaluate.EvaluateError, match=r"--task 'regression' needs a SequenceClassification head of "
                                                     r"one output \(num_labels 1\); --model is a "
                                                     r"LineageBertForSequenceClassification of 3 outputs: give --task "
                                                     r"sequence-classification or nli"):
        evaluate.main(["--model", str(classes), "--task", "regression", "--dataset", str(root / "dev.csv"),
                       "--output_dir", str(tmp_path / "eval")])
