"""`lineage glue` (train/glue.py) on an offline copy of `nyu-mll/glue` in its Hub layout (cola, mrpc, stsb and mnli,
with their columns, label features, split names and test splits labelled -1): each task's GLUE figures under their
names, MNLI's mismatched accuracy from `lineage evaluate`, the average as GLUE computes it (checked by hand from the
runs' own results files), a failing task reported while the others run on, and the refusals before any work."""

import json
import math

import datasets
import pytest
from conftest import hub_dataset

from train import cli, glue
from train.data.corpus import generate_records
from train.run.recipes import RecipeError
from train.run.run_folder import OutputDirError

QUICK = ["--model", "bert-tiny", "--recipe", "bert-finetune-nli-tiny", "--max_steps", "2", "--save_steps", "0",
         "--eval_size", "6", "--report_to", "none", "--progress_bar", "false"]
CLASSES = {"cola": ["unacceptable", "acceptable"], "mrpc": ["not_equivalent", "equivalent"],
           "mnli": ["entailment", "neutral", "contradiction"], "ax": ["entailment", "neutral", "contradiction"]}
SPLITS = {"cola": ("train", "validation", "test"), "mrpc": ("train", "validation", "test"),
          "stsb": ("train", "validation", "test"),
          "mnli": ("train", "validation_matched", "validation_mismatched", "test_matched", "test_mismatched"),
          "ax": ("test",)}


def glue_rows(config: str, split: str, size: int) -> list[dict]:
    """Rows of `config` in GLUE's columns, made from the embedded corpus (CoLA's from its sentiment texts, the pair
    tasks' from its NLI pairs: equivalent where entailed, STS-B's score 5, 2.5 or 0); a test split labelled -1."""
    corpus = "train" if split == "train" else "test" if split == "validation_mismatched" else "validation"
    if config == "cola":
        rows = [{"sentence": r["text"], "label": r["label"]} for r in generate_records("sentiment", corpus, size=size)]
    else:
        pairs = generate_records("nli", corpus, size=size)
        columns = ("premise", "hypothesis") if config in ("mnli", "ax") else ("sentence1", "sentence2")
        label = {"mrpc": lambda c: int(c == 0), "stsb": lambda c: (5.0, 2.5, 0.0)[c], "mnli": lambda c: c,
                 "ax": lambda c: c}[config]
        rows = [{columns[0]: r["premise"], columns[1]: r["hypothesis"], "label": label(r["label"])} for r in pairs]
    return [{**row, "idx": i, **({"label": -1} if split.startswith("test") else {})} for i, row in enumerate(rows)]


def glue_copy(root) -> None:
    """The five configs (with GLUE's diagnostic set ax) in the datasets cache `root / "cache"`, as an online load of
    `nyu-mll/glue` leaves them."""
    for config, splits in SPLITS.items():
        texts = ["sentence"] if config == "cola" else ["premise", "hypothesis"] if config in ("mnli", "ax") else [
            "sentence1", "sentence2"]
        label = datasets.Value("float32") if config == "stsb" else datasets.ClassLabel(names=CLASSES[config])
        features = datasets.Features({**{t: datasets.Value("string") for t in texts}, "label": label,
                                      "idx": datasets.Value("int32")})
        files = {}
        for split in splits:
            files[split] = root / config / f"{split}.jsonl"
            files[split].parent.mkdir(exist_ok=True)
            datasets.Dataset.from_list(glue_rows(config, split, 32 if split == "train" else 8)).to_json(files[split])
        hub_dataset(root / "cache", "nyu-mll/glue", config, files, features)


@pytest.fixture(scope="module")
def glue_cache(tmp_path_factory):
    """The datasets cache holding the copy."""
    root = tmp_path_factory.mktemp("glue")
    glue_copy(root)
    return root / "cache"


@pytest.fixture(scope="module")
def glue_run(glue_cache, tmp_path_factory):
    """One run of cola, mrpc, stsb, mnli and qqp, which the copy lacks: (the GlueError, the output folder)."""
    out = tmp_path_factory.mktemp("glue-run") / "out"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(datasets.config, "HF_DATASETS_CACHE", glue_cache)
        with pytest.raises(glue.GlueError) as failed:
            glue.main([*QUICK, "--tasks", "mnli,cola,stsb,qqp,mrpc", "--output_dir", str(out)])
    return failed.value, out


def test_each_task_reports_the_figures_glue_reports_under_their_names(glue_run):
    _, out = glue_run
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["tasks"]) == ["cola", "mrpc", "stsb", "qqp", "mnli"]  # GLUE's order
    figures = {name: set(row.get("figures", ())) for name, row in summary["tasks"].items()}
    assert figures == {"cola": {"matthews_correlation"}, "mrpc": {"f1", "accuracy"}, "stsb": {"pearson", "spearmanr"},
                       "qqp": set(), "mnli": {"accuracy", "accuracy_mm"}}
    results = {name: json.loads((out / name / "model" / "results.json").read_text())
               for name in ("cola", "mrpc", "stsb", "mnli")}
    tasks = summary["tasks"]
    assert tasks["cola"]["figures"]["matthews_correlation"] == results["cola"]["eval_matthews_correlation"]
    assert tasks["mrpc"]["figures"] == {"f1": results["mrpc"]["eval_binary_f1"],  # F1 of class 1, equivalent
                                        "accuracy": results["mrpc"]["eval_accuracy"]}
    assert tasks["stsb"]["figures"] == {"pearson": results["stsb"]["eval_pearson"],
                                        "spearmanr": results["stsb"]["eval_spearmanr"]}
    assert tasks["mnli"]["figures"]["accuracy"] == results["mnli"]["eval_accuracy"]
    card = (out / "mnli" / "model" / "README.md").read_text()
    assert "config: mnli" in card and "split: validation_matched" in card


def test_mnli_is_also_scored_on_its_mismatched_split(glue_run):
    _, out = glue_run
    scored = json.loads((out / "mnli-mismatched" / "results.json").read_text())
    assert scored["data"] == {"dataset": "nyu-mll/glue", "split": "validation_mismatched", "rows": 6, "task": "nli"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tasks"]["mnli"]["figures"]["accuracy_mm"] == scored["scores"]["nli"]["accuracy"]
    assert summary["tasks"]["mnli"]["results"] == ["mnli/model/results.json", "mnli-mismatched/results.json"]


def test_the_average_is_the_mean_of_the_task_scores_each_the_mean_of_its_figures(glue_run):
    _, out = glue_run
    results = {name: json.loads((out / name / "model" / "results.json").read_text())
               for name in ("cola", "mrpc", "stsb", "mnli")}
    mismatched = json.loads((out / "mnli-mismatched" / "results.json").read_text())["scores"]["nli"]["accuracy"]
    scores = [results["cola"]["eval_matthews_correlation"],
              (results["mrpc"]["eval_binary_f1"] + results["mrpc"]["eval_accuracy"]) / 2,
              (results["stsb"]["eval_pearson"] + results["stsb"]["eval_spearmanr"]) / 2,
              (results["mnli"]["eval_accuracy"] + mismatched) / 2]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["average"] == pytest.approx(sum(scores) / 4)
    assert summary["averaged_tasks"] == ["cola", "mrpc", "stsb", "mnli"]
    page = (out / "summary.md").read_text()
    assert f"{100 * summary['average']:.1f}, over 4 of the 9 tasks (cola, mrpc, stsb, mnli); failed: qqp." in page
    assert summary["command"].startswith("lineage glue --model bert-tiny") and summary["command"] in page


def test_a_failing_task_is_reported_and_the_others_run_on(glue_run):
    error, out = glue_run
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failed"] == ["qqp"] and "qqp" in summary["tasks"]["qqp"]["error"]
    assert str(error).startswith("1 of 5 tasks failed (qqp: ") and str(out / "summary.md") in str(error)
    assert "| QQP | failed: " in (out / "summary.md").read_text()
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "cola", "mnli", "mnli-mismatched", "mrpc", "stsb", "summary.json", "summary.md"]


@pytest.mark.parametrize("argv, refusal", [
    (["--tasks", "cola,ax"], r"--tasks 'cola,ax': give distinct tasks from cola, sst2, mrpc, stsb, qqp, mnli, qnli, "
                             r"rte, wnli; unknown: ax \(ax, GLUE's diagnostic set, has no training split"),
    (["--tasks", "cola,cola"], r"give distinct tasks from cola, sst2"),
    (["--dataset_config", "sst2"], r"recipe key 'dataset_config': lineage glue sets it for each task"),
    (["--set", "output_dir=elsewhere"], r"recipe key 'output_dir': give --output_dir"),
    (["--push_to_hub", "me/glue"], r"recipe key 'push_to_hub': every task's model would be sent to the one repo"),
    (["--train_file", "cola.csv"], r"recipe key 'train_file': lineage glue reads nyu-mll/glue; fine-tune on your own "
                                   r"copy of a task with lineage train finetune --train_file"),
])
def test_what_it_cannot_run_is_refused_before_any_work(argv, refusal, tmp_path):
    with pytest.raises(glue.GlueError, match=refusal):
        glue.main([*QUICK, *argv, "--output_dir", str(tmp_path / "out")])
    assert list(tmp_path.iterdir()) == []


def test_recipe_keys_are_checked_as_finetune_checks_them_before_any_work(tmp_path, capsys):
    with pytest.raises(RecipeError, match=r"recipe key 'nsp' is read by pretrain_bert only"):
        glue.main([*QUICK, "--nsp", "false", "--output_dir", str(tmp_path / "out")])
    for key in ("max_query_length", "doc_stride", "null_score_diff_threshold"):
        with pytest.raises(glue.GlueError, match=f"recipe key '{key}': no GLUE task is question answering"):
            glue.main([*QUICK, f"--{key}", "32", "--output_dir", str(tmp_path / "out")])
    with pytest.raises(SystemExit, match=r"lineage glue: error: --tasks 'bogus': give distinct tasks from cola"):
        cli.main(["glue", "--model", "bert-tiny", "--tasks", "bogus", "--output_dir", str(tmp_path / "out")])
    assert list(tmp_path.iterdir()) == []


def test_it_replaces_only_its_own_earlier_output_and_only_when_told(glue_cache, tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", glue_cache)
    out = tmp_path / "out"
    glue.main([*QUICK, "--tasks", "mrpc", "--output_dir", str(out)])
    with pytest.raises(OutputDirError, match=r"holds an earlier output of glue; pass --overwrite_output_dir"):
        glue.main([*QUICK, "--tasks", "cola", "--output_dir", str(out)])
    summary = glue.main([*QUICK, "--tasks", "cola", "--output_dir", str(out), "--overwrite_output_dir"])
    assert list(summary["tasks"]) == ["cola"] and summary["average"] == summary["tasks"]["cola"]["score"]
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["cola", "summary.json",
                                                                                    "summary.md"]
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputDirError, match=r"holds notes.txt, which glue did not write there"):
        glue.main([*QUICK, "--tasks", "cola", "--output_dir", str(out), "--overwrite_output_dir"])
    assert (out / "notes.txt").read_text() == "mine" and (out / "cola" / "model").is_dir()


def test_an_undefined_figure_is_null_in_the_summary_and_so_are_its_tasks_score_and_the_average(tmp_path, monkeypatch):
    """STS-B's Pearson correlation of a constant prediction is undefined (NaN in finetune's results): summary.json,
    strict JSON, holds null for it, its task's score and the average; summary.md says `undefined`."""
    figures = {"cola": {"eval_matthews_correlation": 0.5}, "stsb": {"eval_pearson": math.nan, "eval_spearmanr": 0.25}}
    monkeypatch.setattr(glue.finetune, "main", lambda argv: (figures[argv[argv.index("--dataset_config") + 1]], None))
    monkeypatch.setattr(glue, "hub_splits", lambda name, config: ["train", "validation"])  # the runs are stand-ins
    out = tmp_path / "out"
    glue.main([*QUICK, "--tasks", "cola,stsb", "--output_dir", str(out)])

    def refuse(token):
        raise ValueError(f"{token} is no JSON")

    summary = json.loads((out / "summary.json").read_text(), parse_constant=refuse)
    assert summary["tasks"]["stsb"]["figures"] == {"pearson": None, "spearmanr": 0.25}
    assert summary["tasks"]["stsb"]["score"] is None and summary["tasks"]["cola"]["score"] == 0.5
    assert summary["average"] is None and summary["averaged_tasks"] == ["cola", "stsb"]
    page = (out / "summary.md").read_text()
    assert "| STS-B | Pearson undefined, Spearman 25.0 | undefined |" in page
    assert "): undefined, over 2 of the 9 tasks (cola, stsb)." in page


def test_tasks_whose_data_neither_the_hub_nor_the_cache_has_are_named_before_any_work(glue_cache, tmp_path,
                                                                                      monkeypatch, capsys):
    """Offline (the tests' HF_HUB_OFFLINE=1), a task the cache lacks cannot load: none of them loadable is refused
    before anything is written (before: every task started and failed in turn into a summary of failures); some
    of them are named up front, and the others run."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", glue_cache)
    with pytest.raises(glue.GlueError, match=r"neither the Hub nor the datasets cache \(.*\) has nyu-mll/glue qqp, "
                                             r"wnli: nothing to run"):
        glue.main([*QUICK, "--tasks", "qqp,wnli", "--output_dir", str(tmp_path / "out")])
    assert list(tmp_path.iterdir()) == []
    glue.check_reachable(["cola", "qqp"])
    assert "has nyu-mll/glue qqp; it fails in turn, the others run" in capsys.readouterr().out


def own_predictions(model_folder, rows: list[dict], columns: list[str]) -> list:
    """The saved model's outputs for `rows`, one unpadded row at a time: its class names, or its scores."""
    import torch
    import transformers

    model = transformers.AutoModelForSequenceClassification.from_pretrained(model_folder, trust_remote_code=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_folder)
    outputs = []
    with torch.no_grad():
        for row in rows:
            logits = model(**tokenizer(*[row[c] for c in columns], truncation=True, max_length=64,
                                       return_tensors="pt")).logits[0]
            outputs.append(logits[0].item() if model.config.num_labels == 1
                           else model.config.id2label[logits.argmax().item()])
    return outputs


def test_submission_holds_each_test_set_predicted_as_glues_server_reads_it(glue_cache, tmp_path, monkeypatch):
    """`--submission`: a TSV per test set (MNLI's model also predicts MNLI-mm and the diagnostic set AX), `index` the
    row's idx, CoLA's classes as numbers, MNLI's and AX's as names, STS-B's scores to 3 decimals: each the saved
    model's own prediction for that row alone, unpadded; no zip while files of the nine tasks are missing."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", glue_cache)
    out = tmp_path / "out"
    summary = glue.main([*QUICK, "--tasks", "cola,stsb,mnli", "--submission", "--output_dir", str(out)])
    files = {"CoLA.tsv": ("cola", "test"), "STS-B.tsv": ("stsb", "test"), "MNLI-m.tsv": ("mnli", "test_matched"),
             "MNLI-mm.tsv": ("mnli", "test_mismatched"), "AX.tsv": ("mnli", "test")}
    assert summary["submission"] == {"files": sorted(files), "zip": None, "unpredicted": {}}
    for file_name, (task, split) in files.items():
        config = "ax" if file_name == "AX.tsv" else task
        rows = glue_rows(config, split, 8)
        lines = (out / "submission" / file_name).read_text().splitlines()
        assert lines[0] == "index\tprediction" and len(lines) == 9
        indices, values = zip(*(line.split("\t") for line in lines[1:]))
        assert [int(i) for i in indices] == [row["idx"] for row in rows]
        columns = ["sentence"] if task == "cola" else (["sentence1", "sentence2"] if task == "stsb"
                                                       else ["premise", "hypothesis"])
        own = own_predictions(out / task / "model", rows, columns)
        if task == "stsb":
            assert all(len(v.split(".")[1]) == 3 for v in values)
            assert [float(v) for v in values] == pytest.approx(own, abs=5e-4 + 1e-5)
        elif task == "cola":
            assert list(values) == [str(CLASSES["cola"].index(name)) for name in own]
        else:
            assert list(values) == own and set(values) <= set(CLASSES["mnli"])
    page = (out / "summary.md").read_text()
    assert ("Test predictions: AX.tsv, CoLA.tsv, MNLI-m.tsv, MNLI-mm.tsv, STS-B.tsv in submission/; no "
            "submission.zip: GLUE's server takes all 11 files, and SST-2.tsv, MRPC.tsv, QQP.tsv, QNLI.tsv, RTE.tsv, "
            "WNLI.tsv are missing.") in page


def test_a_test_set_that_cannot_be_read_is_reported_and_its_tasks_figures_stand(glue_cache, tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", glue_cache)
    monkeypatch.setitem(glue.SUBMISSION_FILES, "mrpc", (("mrpc", "test_missing", "MRPC.tsv"),))
    out = tmp_path / "out"
    with pytest.raises(glue.GlueError, match=r"^no test predictions of mrpc \(UnknownSplitError: Hub dataset "
                                             r"'nyu-mll/glue' \(config 'mrpc'\) has no split 'test_missing'.*\); "
                                             r"the others' figures are in .*summary.md$"):
        glue.main([*QUICK, "--tasks", "mrpc", "--submission", "--output_dir", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["tasks"]["mrpc"]["figures"]) == {"f1", "accuracy"} and summary["failed"] == []
    assert summary["submission"]["files"] == [] and "mrpc" in summary["submission"]["unpredicted"]
    assert "Test predictions: none; none of mrpc (UnknownSplitError: " in (out / "summary.md").read_text()


def test_the_zip_holds_the_eleven_files_at_its_top_level_once_all_are_there(tmp_path):
    import zipfile

    folder = tmp_path / "submission"
    folder.mkdir()
    names = [f for files in glue.SUBMISSION_FILES.values() for _, _, f in files]
    for name in names[:-1]:
        (folder / name).write_text(f"index\tprediction\n0\t{name}\n")
    assert glue.zip_submission(folder) is None and not (tmp_path / "submission.zip").exists()
    (folder / names[-1]).write_text("index\tprediction\n0\t1\n")
    archive = glue.zip_submission(folder)
    assert archive == tmp_path / "submission.zip" and len(names) == 11
    with zipfile.ZipFile(archive) as bundle:
        assert sorted(bundle.namelist()) == sorted(names)
        assert bundle.read("CoLA.tsv").decode() == "index\tprediction\n0\tCoLA.tsv\n"
