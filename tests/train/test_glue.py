"""`lineage glue` (train/glue.py) on an offline copy of `nyu-mll/glue` in its Hub layout (cola, mrpc, stsb and mnli,
with their columns, label features, split names and test splits labelled -1): each task's GLUE figures under their
names, MNLI's mismatched accuracy from `lineage evaluate`, the average as GLUE computes it (checked by hand from the
runs' own results files), a failing task reported while the others run on, and the refusals before any work; and
`--data_dir`: GLUE's original TSVs and the Hub repository's parquet folders read as the Hub gives them."""

import json
import math

import datasets
import pytest
from conftest import hub_dataset

from train import cli, glue
from train.data import glue_files
from train.data.corpus import generate_records
from train.data.errors import DataError
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


def glue_features(config: str) -> datasets.Features:
    """`nyu-mll/glue`'s features of `config`: its text columns, its label (the Hub's class names in its order) and
    idx."""
    texts = ["sentence"] if config == "cola" else ["premise", "hypothesis"] if config in ("mnli", "ax") else [
        "sentence1", "sentence2"]
    label = datasets.Value("float32") if config == "stsb" else datasets.ClassLabel(names=CLASSES[config])
    return datasets.Features({**{t: datasets.Value("string") for t in texts}, "label": label,
                              "idx": datasets.Value("int32")})


def glue_copy(root) -> None:
    """The five configs (with GLUE's diagnostic set ax) in the datasets cache `root / "cache"`, as an online load of
    `nyu-mll/glue` leaves them."""
    for config, splits in SPLITS.items():
        features = glue_features(config)
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
    (["--train_file", "cola.csv"], r"recipe key 'train_file': lineage glue reads nyu-mll/glue \(or its copy in "
                                   r"--data_dir\); fine-tune on your own copy of a task with lineage train finetune "
                                   r"--train_file"),
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
    assert glue.check_data(glue.GlueSource(), ["cola", "qqp"]) == {
        "qqp": f"neither the Hub nor the datasets cache ({glue_cache}) has nyu-mll/glue qqp"}
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


# GLUE's original files (download_glue_data.py's glue_data/), as BERT's run_classifier.py reads them: CoLA's train and
# dev files have no header (source, label, the original's mark, sentence); the others' headers, label last
MNLI_COLUMNS = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
                "sentence2_parse\tsentence1\tsentence2")
STSB_COLUMNS = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
TSV_FILES = {("cola", "train"): "CoLA/train.tsv", ("cola", "validation"): "CoLA/dev.tsv",
             ("cola", "test"): "CoLA/test.tsv", ("stsb", "train"): "STS-B/train.tsv",
             ("stsb", "validation"): "STS-B/dev.tsv", ("stsb", "test"): "STS-B/test.tsv",
             ("mnli", "train"): "MNLI/train.tsv", ("mnli", "validation_matched"): "MNLI/dev_matched.tsv",
             ("mnli", "validation_mismatched"): "MNLI/dev_mismatched.tsv",
             ("mnli", "test_matched"): "MNLI/test_matched.tsv", ("mnli", "test_mismatched"): "MNLI/test_mismatched.tsv",
             ("ax", "test"): "diagnostic/diagnostic.tsv"}


def tsv_lines(config: str, split: str, rows: list[dict]) -> list[str]:
    """`rows` as GLUE's file of `config`'s `split` holds them (a test file: no label)."""
    test = split.startswith("test")
    if config == "cola":
        return ["index\tsentence", *(f"{r['idx']}\t{r['sentence']}" for r in rows)] if test else [
            f"gj04\t{r['label']}\t{'' if r['label'] else '*'}\t{r['sentence']}" for r in rows]
    if config == "stsb":
        return [STSB_COLUMNS + ("" if test else "\tscore"), *(
            f"{r['idx']}\tmain-captions\tMSRvid\t2012test\t{r['idx']:04d}\tnone\tnone\t{r['sentence1']}\t"
            f"{r['sentence2']}" + ("" if test else f"\t{r['label']:.3f}") for r in rows)]
    if config == "ax":
        return ["index\tsentence1\tsentence2", *(f"{r['idx']}\t{r['premise']}\t{r['hypothesis']}" for r in rows)]
    labels = "" if test else "\tlabel1\tgold_label" if split == "train" else (
        "".join(f"\tlabel{i}" for i in range(1, 6)) + "\tgold_label")
    return [MNLI_COLUMNS + labels, *(
        f"{r['idx']}\t{r['idx']}\t{r['idx']}e\tfiction\t( a )\t( b )\t(ROOT a)\t(ROOT b)\t{r['premise']}\t"
        f"{r['hypothesis']}" + "".join(f"\t{CLASSES['mnli'][r['label']]}" for _ in range(labels.count("\t")))
        for r in rows)]


def quoted(rows: list[dict]) -> list[dict]:
    """`rows` with quotes inside a text field, which GLUE's files hold unescaped (read with quoting off)."""
    first = next(c for c in rows[1] if c not in ("label", "idx"))
    return [rows[0], {**rows[1], first: f'"{rows[1][first]}" she said, "so'}, *rows[2:]]


@pytest.fixture(scope="module")
def glue_folders(tmp_path_factory):
    """cola, stsb, mnli and ax as GLUE's original files (`tsv/`) and as the Hub repository downloaded (`hub/`:
    `<config>/<split>-00000-of-00001.parquet`, written with the Hub's features, beside its README.md and the download's
    `.cache/`), from the same rows; STS-B's training file ends with a row lacking a field, which the Hub leaves out."""
    root = tmp_path_factory.mktemp("glue-folders")
    for config in ("cola", "stsb", "mnli", "ax"):
        for split in SPLITS[config]:
            rows = quoted(glue_rows(config, split, 32 if split == "train" else 8))
            tsv = root / "tsv" / TSV_FILES[config, split]
            tsv.parent.mkdir(parents=True, exist_ok=True)
            short = ["32\tmain-captions\tMSRvid"] if (config, split) == ("stsb", "train") else []
            tsv.write_text("\n".join([*tsv_lines(config, split, rows), *short]) + "\n", encoding="utf-8")
            shard = root / "hub" / config / f"{split}-00000-of-00001.parquet"
            shard.parent.mkdir(parents=True, exist_ok=True)
            datasets.Dataset.from_list(rows, features=glue_features(config)).to_parquet(shard)
    (root / "hub" / "README.md").write_text("---\npretty_name: GLUE\n---\n")
    (root / "hub" / ".cache" / "huggingface").mkdir(parents=True)
    return root


def test_glues_original_files_are_read_as_the_hub_gives_them(glue_folders):
    """Each split of GLUE's TSVs reads as the Hub's parquet of the same rows (datasets' own reading of it): the same
    columns, features (class names in the Hub's order) and values, quotes kept as they are in the fields."""
    for (config, split), _ in TSV_FILES.items():
        columns, left_out = glue_files.read_split(glue_folders / "tsv", config, split)
        read = datasets.Dataset.from_dict(columns, features=glue_files.features(config))
        hub = datasets.load_dataset("parquet", data_files=str(glue_folders / "hub" / config /
                                                              f"{split}-00000-of-00001.parquet"), split="train")
        assert read.features == hub.features == glue_features(config), (config, split)
        assert read.to_list() == hub.to_list(), (config, split)
        assert left_out == int((config, split) == ("stsb", "train"))
    mnli = glue_files.read_split(glue_folders / "tsv", "mnli", "validation_matched")[0]
    assert mnli["label"] == [CLASSES["mnli"].index(CLASSES["mnli"][r["label"]])
                             for r in glue_rows("mnli", "validation_matched", 8)]


def test_a_label_of_no_class_is_refused_naming_its_row(tmp_path):
    (tmp_path / "RTE").mkdir()
    (tmp_path / "RTE" / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailed\n")
    with pytest.raises(DataError, match=r"RTE/train.tsv, row 2: label 'entailed' is none of entailment, "
                                        r"not_entailment \(nor their numbers 0-1\)"):
        glue_files.read_split(tmp_path, "rte", "train")


def test_mrpcs_files_are_read_past_their_byte_order_mark_and_a_missing_one_is_named(tmp_path):
    """download_glue_data.py copies the header of Microsoft's msr_paraphrase_train.txt, byte-order mark and all, into
    MRPC/train.tsv; its test.tsv has an index and no label."""
    (tmp_path / "MRPC").mkdir()
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    (tmp_path / "MRPC" / "train.tsv").write_text(header + "1\t7\t8\ta\tb\n0\t9\t10\tc\td\n", encoding="utf-8-sig")
    (tmp_path / "MRPC" / "test.tsv").write_text(header.replace("Quality", "index") + "0\t1\t2\te\tf\n")
    assert glue_files.read_split(tmp_path, "mrpc", "train")[0] == {
        "sentence1": ["a", "c"], "sentence2": ["b", "d"], "label": [1, 0], "idx": [0, 1]}
    assert glue_files.read_split(tmp_path, "mrpc", "test")[0]["label"] == [-1]
    with pytest.raises(FileNotFoundError, match=r"MRPC has no dev.tsv \(the split validation\)"):
        glue_files.write_split(tmp_path, "mrpc", "validation", tmp_path / "out")


def test_a_hub_folder_lacking_a_split_names_the_splits_it_has(glue_folders, tmp_path):
    """A configuration's folder of the train shard alone has the split train (datasets reads one file as one split)."""
    (tmp_path / "cola").mkdir()
    shard = "train-00000-of-00001.parquet"
    (tmp_path / "cola" / shard).write_bytes((glue_folders / "hub" / "cola" / shard).read_bytes())
    assert glue_files.missing(tmp_path, "hub", "cola", ["train", "validation"]) == (
        f"{tmp_path / 'cola'} has no split validation (no validation-00000-of-00001.parquet); it has train")


@pytest.fixture(scope="module")
def folder_runs(glue_folders, tmp_path_factory):
    """cola, stsb, mnli and qqp, which neither folder has, run with --submission on each layout: {layout: (the
    GlueError, the output folder)}."""
    runs = {}
    for layout in ("tsv", "hub"):
        out = tmp_path_factory.mktemp(f"glue-{layout}") / "out"
        with pytest.raises(glue.GlueError) as failed:
            glue.main([*QUICK, "--tasks", "cola,stsb,qqp,mnli", "--data_dir", str(glue_folders / layout),
                       "--submission", "--output_dir", str(out)])
        runs[layout] = failed.value, out
    return runs


def test_a_glue_folder_of_either_layout_gives_the_hubs_figures_and_submission_files(folder_runs, glue_folders):
    (_, tsv), (_, hub) = folder_runs["tsv"], folder_runs["hub"]
    summaries = {layout: json.loads((out / "summary.json").read_text()) for layout, (_, out) in folder_runs.items()}
    assert [s["averaged_tasks"] for s in summaries.values()] == [["cola", "stsb", "mnli"]] * 2
    ran = {layout: {n: row for n, row in s["tasks"].items() if n != "qqp"} for layout, s in summaries.items()}
    assert ran["tsv"] == ran["hub"] and summaries["tsv"]["average"] == summaries["hub"]["average"] is not None
    assert summaries["tsv"]["data"] == str(glue_folders / "tsv")
    files = ["AX.tsv", "CoLA.tsv", "MNLI-m.tsv", "MNLI-mm.tsv", "STS-B.tsv"]
    assert summaries["tsv"]["submission"]["files"] == summaries["hub"]["submission"]["files"] == files
    for name in files:
        assert (tsv / "submission" / name).read_text() == (hub / "submission" / name).read_text()
    for task in ("cola", "mnli"):  # the classes in the Hub's order
        config = json.loads((tsv / task / "model" / "config.json").read_text())
        assert config["id2label"] == {str(i): name for i, name in enumerate(CLASSES[task])}
    scored = json.loads((tsv / "mnli-mismatched" / "results.json").read_text())["data"]
    assert scored["split"] == "validation_mismatched" and scored["rows"] == 6
    assert sorted(p.name for p in (tsv / "data" / "mnli").iterdir()) == [
        f"{split}-00000-of-00001.parquet" for split in sorted(SPLITS["mnli"])]
    assert not (hub / "data").exists()  # the Hub's layout is read where it is


def test_a_task_the_folder_lacks_fails_naming_what_was_expected_while_the_others_run(folder_runs, glue_folders):
    for layout, expected in (("tsv", "QQP: no such folder (GLUE's QQP/)"), ("hub", "qqp: no such folder")):
        error, out = folder_runs[layout]
        summary = json.loads((out / "summary.json").read_text())
        assert summary["failed"] == ["qqp"]
        assert str(glue_folders / layout / expected) in summary["tasks"]["qqp"]["error"]
        assert str(error).startswith("1 of 4 tasks failed (qqp: GlueError: ")


def test_a_folder_of_neither_layout_or_lacking_a_split_is_refused_before_any_work(glue_folders, tmp_path, capsys):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.csv").write_text("sentence,label\na,1\n")
    out = tmp_path / "out"
    for folder in (tmp_path / "data", tmp_path / "absent"):
        with pytest.raises((DataError, FileNotFoundError),
                           match=r"--data_dir .*: (holds neither|no such folder); give a folder of GLUE's original "
                                 r"distribution, as download_glue_data.py writes glue_data/ \(CoLA/train.tsv, .*\), or "
                                 r"the Hub's nyu-mll/glue as a folder"):
            glue.main([*QUICK, "--tasks", "cola", "--data_dir", str(folder), "--output_dir", str(out)])
    lacking = tmp_path / "glue_data"
    (lacking / "MNLI").mkdir(parents=True)
    for name in ("train.tsv", "dev_matched.tsv"):
        (lacking / "MNLI" / name).write_bytes((glue_folders / "tsv" / "MNLI" / name).read_bytes())
    with pytest.raises(glue.GlueError, match=r"MNLI has no dev_mismatched.tsv \(the split validation_mismatched\): "
                                             r"nothing to run \(--data_dir: give a folder of GLUE's original"):
        glue.main([*QUICK, "--tasks", "mnli", "--data_dir", str(lacking), "--output_dir", str(out)])
    with pytest.raises(OutputDirError, match=r"--output_dir .* lies in an input of lineage glue \(--data_dir"):
        glue.main([*QUICK, "--tasks", "cola", "--data_dir", str(glue_folders / "tsv"),
                   "--output_dir", str(glue_folders / "tsv" / "out")])
    assert not out.exists() and not (glue_folders / "tsv" / "out").exists()
    hub = glue.GlueSource.of(glue.parse_args(["--model", "m", "--data_dir", str(glue_folders / "hub")])[0])
    assert glue.check_data(hub, ["cola", "wnli"]) == {"wnli": f"{glue_folders / 'hub' / 'wnli'}: no such folder "
                                                              f"(nyu-mll/glue's wnli/)"}
    assert "wnli: no such folder (nyu-mll/glue's wnli/); it fails in turn, the others run" in capsys.readouterr().out
