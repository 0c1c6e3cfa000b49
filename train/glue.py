"""GLUE in one command: fine-tune a model on each task of the benchmark (Wang et al. 2018) and score it as GLUE does.

    lineage glue --model google-bert/bert-base-uncased --output_dir outputs/glue
    lineage glue --model outputs/bert-pretrain/model --tasks cola,mrpc,stsb --learning_rate 3e-5 --output_dir DIR
    lineage glue --model outputs/bert-pretrain/model --data_dir glue_data --output_dir DIR  # offline, GLUE's files

Each task of the Hub's `nyu-mll/glue` (`TASKS`: its columns, finetune task, validation split and GLUE's figures), or
of its copy in `--data_dir` (`GlueSource`), is a `finetune` run in `<output_dir>/<task>` with `--recipe` and the other
recipe keys given; MNLI's model is also scored on the mismatched validation split by `lineage evaluate`. Then
`summary.json` and `summary.md`: each task's figures and the GLUE average; a task that fails is reported there and the
others run on. `--submission`: the test sets predicted into the files GLUE's server scores. docs/evaluation.md.
"""

from __future__ import annotations

import argparse
import json
import traceback
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import datasets

from train import evaluate, finetune
from train.cli import CommandParser, run_script, user_errors
from train.data import glue_files
from train.data.files import hub_splits
from train.run import recipes, run_folder, strict_json
from train.run.recipes import Recipe
from train.setup.models import model_source

COMMAND = "glue"
DATASET = "nyu-mll/glue"
DEFAULT_RECIPE = "bert-base-finetune"  # BERT's section 4: batch 32, 3 epochs, learning rate 2e-5


class Figure(NamedTuple):
    name: str  # in the summary, as transformers' run_glue names GLUE's figures
    metric: str  # finetune's metric it is: eval_<metric> in results.json, scores.<task>.<metric> of lineage evaluate
    label: str  # as GLUE's leaderboard heads it


class GlueTask(NamedTuple):
    title: str  # GLUE's name of the task
    columns: tuple[str, str | None]  # its text and second text columns (the label column is `label`)
    task: str  # finetune's task
    figures: tuple[Figure, ...]  # what GLUE reports of it
    validation_split: str = "validation"
    mismatched: str | None = None  # a second validation split lineage evaluate scores: its figures named <name>_mm


ACCURACY = Figure("accuracy", "accuracy", "acc.")
F1_ACCURACY = (Figure("f1", "binary_f1", "F1"), ACCURACY)  # F1 of class 1: MRPC's equivalent, QQP's duplicate
# in the order of GLUE's leaderboard
TASKS = {
    "cola": GlueTask("CoLA", ("sentence", None), "sequence-classification",
                     (Figure("matthews_correlation", "matthews_correlation", "Matthews corr."),)),
    "sst2": GlueTask("SST-2", ("sentence", None), "sequence-classification", (ACCURACY,)),
    "mrpc": GlueTask("MRPC", ("sentence1", "sentence2"), "sequence-classification", F1_ACCURACY),
    "stsb": GlueTask("STS-B", ("sentence1", "sentence2"), "regression",
                     (Figure("pearson", "pearson", "Pearson"), Figure("spearmanr", "spearmanr", "Spearman"))),
    "qqp": GlueTask("QQP", ("question1", "question2"), "sequence-classification", F1_ACCURACY),
    "mnli": GlueTask("MNLI", ("premise", "hypothesis"), "nli", (ACCURACY,), "validation_matched",
                     "validation_mismatched"),
    "qnli": GlueTask("QNLI", ("question", "sentence"), "nli", (ACCURACY,)),
    "rte": GlueTask("RTE", ("sentence1", "sentence2"), "nli", (ACCURACY,)),
    "wnli": GlueTask("WNLI", ("sentence1", "sentence2"), "nli", (ACCURACY,)),
}
# the test sets' files GLUE's server reads, per task: (configuration of DATASET, split, file name); the diagnostic set
# AX is predicted by MNLI's model
SUBMISSION_FILES = {"cola": (("cola", "test", "CoLA.tsv"),), "sst2": (("sst2", "test", "SST-2.tsv"),),
                    "mrpc": (("mrpc", "test", "MRPC.tsv"),), "stsb": (("stsb", "test", "STS-B.tsv"),),
                    "qqp": (("qqp", "test", "QQP.tsv"),),
                    "mnli": (("mnli", "test_matched", "MNLI-m.tsv"), ("mnli", "test_mismatched", "MNLI-mm.tsv"),
                             ("ax", "test", "AX.tsv")),
                    "qnli": (("qnli", "test", "QNLI.tsv"),), "rte": (("rte", "test", "RTE.tsv"),),
                    "wnli": (("wnli", "test", "WNLI.tsv"),)}
SUBMISSION_NAMES = [file_name for files in SUBMISSION_FILES.values() for _, _, file_name in files]  # GLUE's order
# the tasks whose files hold class names (as GLUE's own files label them); the others' hold class numbers, STS-B's
# scores
NAMED_CLASSES = ("mnli", "qnli", "rte")
PER_TASK = ("dataset", "dataset_config", "task", "text_column", "text_pair_column", "label_column", "validation_split")
# recipe keys a user may not pass through -> why
REFUSED_KEYS = {**dict.fromkeys(PER_TASK, "lineage glue sets it for each task (train.glue.TASKS)"),
                **dict.fromkeys(("train_file", "validation_file"),
                                f"lineage glue reads {DATASET} (or its copy in --data_dir); fine-tune on your "
                                f"own copy of a task with lineage train finetune --train_file ... "
                                f"--validation_file ... --task ... (the table of docs/evaluation.md gives each task's "
                                f"columns and task)"),
                "model": "give --model", "output_dir": "give --output_dir",
                "overwrite_output_dir": "give --overwrite_output_dir",
                "resume_from_checkpoint": "each task's run starts afresh in its folder",
                "push_to_hub": "every task's model would be sent to the one repo",
                **dict.fromkeys(("max_query_length", "doc_stride", "null_score_diff_threshold"),
                                "no GLUE task is question answering, the only task that reads it")}


class GlueError(ValueError):
    """An argument `lineage glue` cannot run with, or tasks that failed; the message names them."""


class GlueSource(NamedTuple):
    """Where the tasks' data is read: the Hub's `DATASET` (`folder` None), or a folder per configuration: `--data_dir`
    in the Hub repository's layout, read as it is, or the run's `<output_dir>/data`, into which each split a task
    reads is first converted from GLUE's original TSVs in `tsv` (`train.data.glue_files`), so that finetune, lineage
    evaluate and the test sets' predictions read every layout as the one they read already."""
    folder: Path | None = None
    tsv: Path | None = None

    @classmethod
    def of(cls, args: argparse.Namespace) -> GlueSource:
        """`--data_dir`'s source (its layout detected, or refused naming those it may have), or the Hub."""
        if args.data_dir is None:
            return cls()
        data_dir = Path(args.data_dir).expanduser()
        kind = glue_files.layout(data_dir)
        return cls(data_dir) if kind == "hub" else cls(Path(args.output_dir) / "data", data_dir)

    def argv(self, config: str) -> list[str]:
        """finetune's and lineage evaluate's arguments naming `config`'s data."""
        return (["--dataset", DATASET, "--dataset_config", config] if self.folder is None
                else ["--dataset", str(self.folder / config)])

    def split(self, config: str, split: str) -> tuple[str, str | None]:
        """`(dataset, dataset_config)` to read `config`'s `split` from (converted first from its TSV file)."""
        if self.folder is None:
            return DATASET, config
        if self.tsv is not None:
            glue_files.write_split(self.tsv, config, split, self.folder / config)
        return str(self.folder / config), None

    def unreadable(self, names: list[str]) -> dict[str, str]:
        """{task: why its training or validation data cannot be read} of `names`."""
        if self.folder is None:
            return {name: f"neither the Hub nor the datasets cache ({datasets.config.HF_DATASETS_CACHE}) has "
                          f"{DATASET} {name}" for name in names if hub_splits(DATASET, name) is None}
        kind, root = ("tsv", self.tsv) if self.tsv else ("hub", self.folder)
        why = {name: glue_files.missing(root, kind, name, task_splits(name)) for name in names}
        return {name: reason for name, reason in why.items() if reason}


def task_splits(name: str) -> list[str]:
    """The splits task `name` trains and is scored on."""
    spec = TASKS[name]
    return ["train", spec.validation_split, *([spec.mismatched] if spec.mismatched else [])]


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """The command's own arguments, and the rest: recipe keys for every task's finetune run."""
    parser = CommandParser(description=__doc__.splitlines()[0], allow_abbrev=False,
                           epilog="Any other --key value is a recipe key given to every task's finetune run, e.g. "
                                  "--learning_rate 3e-5 --max_steps 10 --train_size 2000 --eval_size 500.")
    parser.add_argument("--model", required=True, help="a saved Lineage BERT or GPT folder, a Hub id (a transformers "
                                                       "BERT or GPT checkpoint is converted on load) or a preset "
                                                       "(trained from scratch: smoke runs)")
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, from {', '.join(TASKS)}")
    parser.add_argument("--recipe", default=DEFAULT_RECIPE, help="a recipe name (lineage configs recipes) or a YAML "
                                                                 "file")
    parser.add_argument("--output_dir", default="outputs/glue", help="a folder per task, summary.json and "
                                                                     "summary.md (new or empty)")
    parser.add_switch("--overwrite_output_dir", help="replace an earlier output of lineage glue (nothing else)")
    parser.add_argument("--data_dir", help="GLUE as a folder, read instead of the Hub: GLUE's original distribution "
                                           "(download_glue_data.py's glue_data/: CoLA/train.tsv, ...) or the Hub's "
                                           "nyu-mll/glue downloaded (cola/train-00000-of-00001.parquet, ...)")
    parser.add_switch("--submission", help="also predict the test sets into submission/, the files GLUE's server "
                                           "scores (and submission.zip, once all nine tasks have them)")
    args, keys = parser.parse_known_args(argv)
    args.argv = None if argv is None else list(argv)  # the command line, for the summary
    return args, keys


def chosen_tasks(text: str) -> list[str]:
    """The tasks `--tasks` names, in GLUE's order, or a `GlueError` naming the allowed ones."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in names if t not in TASKS]
    if not names or unknown or len(set(names)) != len(names):
        ax = (" (ax, GLUE's diagnostic set, has no training split: its test split is scored by GLUE's server only)"
              if "ax" in unknown else "")
        raise GlueError(f"--tasks {text!r}: give distinct tasks from {', '.join(TASKS)}"
                        + (f"; unknown: {', '.join(unknown)}{ax}" if unknown else ""))
    return [t for t in TASKS if t in names]


def finetune_argv(args: argparse.Namespace, keys: list[str], name: str, source: GlueSource) -> list[str]:
    """The `finetune` command line of task `name`: the recipe, the user's keys, then the task's data and folder."""
    spec = TASKS[name]
    text, pair = spec.columns
    return ["--recipe", args.recipe, *keys, "--model", args.model, "--task", spec.task, *source.argv(name),
            "--validation_split", spec.validation_split, "--text_column", text,
            *(["--text_pair_column", pair] if pair else []), "--label_column", "label",
            "--output_dir", str(Path(args.output_dir) / name)]


def task_recipes(args: argparse.Namespace, keys: list[str], names: list[str], source: GlueSource
                 ) -> dict[str, Recipe]:
    """Each task's finetune recipe, checked as finetune checks it, and the model once: refused before any work."""
    refused = [key for key in recipes.parse_overrides(keys) if key in REFUSED_KEYS]
    if refused:
        raise GlueError("; ".join(f"recipe key {key!r}: {REFUSED_KEYS[key]}" for key in refused))
    chosen = {name: recipes.parse_args(finetune_argv(args, keys, name, source), finetune.DEFAULT_RECIPE, "",
                                       "finetune")
              for name in names}
    model_source(chosen[names[0]], "finetune", ("bert", "gpt"))
    return chosen


def mismatched_argv(name: str, recipe: Recipe, model: Path, source: GlueSource) -> list[str]:
    """The `lineage evaluate` command line scoring task `name`'s model on its mismatched split, with the run's length,
    batch size and (where the user set it) `eval_size`."""
    eval_size = ["--eval_size", str(recipe.eval_size)] if "eval_size" in recipe.set_by_user else []
    return ["--model", str(model), *source.argv(name), "--split", TASKS[name].mismatched,
            "--max_seq_length", str(recipe.max_seq_length), "--batch_size", str(recipe.per_device_eval_batch_size),
            *eval_size, "--output_dir", str(Path(recipe.output_dir).with_name(f"{name}-mismatched"))]


def run_task(name: str, argv: list[str], recipe: Recipe, source: GlueSource) -> tuple[dict[str, Any], Path]:
    """Fine-tune on task `name` (and score MNLI's mismatched split); its figures, its score (their mean) and the
    results files they were read from, relative to the output folder; and its model's folder."""
    spec = TASKS[name]
    for split in task_splits(name):
        source.split(name, split)
    results, model = finetune.main(argv)
    figures = strict_json.finite({f.name: results[f"eval_{f.metric}"] for f in spec.figures})  # NaN: undefined
    read = [f"{name}/model/results.json"]
    if spec.mismatched:
        scored = evaluate.main(mismatched_argv(name, recipe, model, source))
        scores = json.loads((scored / "results.json").read_text())["scores"][spec.task]
        figures.update({f"{f.name}_mm": scores[f.metric] for f in spec.figures})
        read.append(f"{scored.name}/results.json")
    defined = None not in figures.values()  # None: a correlation of constant predictions (null in results.json)
    return {"figures": figures, "score": sum(figures.values()) / len(figures) if defined else None,
            "results": read}, model


def predict_test_sets(name: str, model_folder: Path, recipe: Recipe, folder: Path, source: GlueSource) -> None:
    """Write the test sets' files of task `name` into `folder` as GLUE's server reads them: `index<TAB>prediction`,
    a row per test example in its order, the index its `idx`; the test rows cut and padded as the run's."""
    import transformers
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    from train.data.collators import PaddingCollator
    from train.data.files import load_text_dataset
    from train.run.evaluation import predictions

    spec = TASKS[name]
    text, pair = spec.columns
    model = transformers.AutoModelForSequenceClassification.from_pretrained(model_folder, trust_remote_code=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_folder)
    accelerator = Accelerator()
    model = accelerator.prepare(model)
    folder.mkdir(exist_ok=True)
    for config, split, file_name in SUBMISSION_FILES[name]:
        dataset, dataset_config = source.split(config, split)
        rows = load_text_dataset(dataset, split, columns=[c for c in (text, pair) if c], dataset_config=dataset_config)
        data, _ = finetune.encoded(recipe, tokenizer, spec.task, rows, text, pair, None, f"{DATASET} {config}")
        loader = accelerator.prepare(DataLoader(data, batch_size=recipe.per_device_eval_batch_size,
                                                collate_fn=PaddingCollator(tokenizer, recipe.pad_to_multiple_of)))
        outputs = predictions(accelerator, model, loader, lambda _, batch, out: {"logits": out.logits})["logits"]
        if spec.task == "regression":
            values = [f"{score:.3f}" for score in outputs[:, 0].tolist()]
        else:
            names = [model.config.id2label[i] for i in outputs.argmax(-1).tolist()]
            values = names if name in NAMED_CLASSES else [str(rows.features["label"].str2int(n)) for n in names]
        lines = ["index\tprediction", *(f"{index}\t{value}" for index, value in zip(rows["idx"], values))]
        (folder / file_name).write_text("\n".join(lines) + "\n")
        print(f"== {name}: {len(values)} predictions of {config} {split} in {folder / file_name}", flush=True)


def _failure(error: Exception) -> str:
    """The summary's line for `error`, its traceback printed where it is no refusal of the user's input."""
    if not isinstance(error, user_errors()):
        traceback.print_exc()
    return f"{type(error).__name__}: {error}"


def zip_submission(folder: Path) -> Path | None:
    """`folder`'s files zipped at the top level as GLUE's server takes them, once every test set has its file."""
    if not all((folder / file_name).is_file() for file_name in SUBMISSION_NAMES):
        return None
    archive = folder.with_suffix(".zip")
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
        for file_name in SUBMISSION_NAMES:
            bundle.write(folder / file_name, file_name)
    return archive


def glue_average(rows: dict[str, dict[str, Any]]) -> float | None:
    """GLUE's average: the mean over the tasks of each task's score, the mean of its figures (MNLI's matched and
    mismatched accuracy are its two); None where no task has a score, or where a task's score is undefined."""
    scores = [row["score"] for row in rows.values() if "score" in row]
    return sum(scores) / len(scores) if scores and None not in scores else None


def percent(value: float | None) -> str:
    """A figure x 100 as summary.md shows it; `undefined` for None (a correlation of constant predictions)."""
    return "undefined" if value is None else f"{100 * value:.1f}"


def render(summary: dict[str, Any]) -> str:
    """summary.md: a row per task, figures x 100 as GLUE shows them, then the average and the command."""
    lines = ["| task | GLUE figures | score | results |", "|---|---|---|---|"]
    for name, row in summary["tasks"].items():
        spec = TASKS[name]
        if "error" in row:
            error = row["error"].replace("\n", " ").replace("|", "\\|")  # one cell of the table
            lines.append(f"| {spec.title} | failed: {error} | | |")
            continue
        figures = row["figures"]
        shown = [f"{f.label} {percent(figures[f.name])}" for f in spec.figures]
        shown += [f"{f.label} (mismatched) {percent(figures[f.name + '_mm'])}" for f in spec.figures if spec.mismatched]
        lines.append(f"| {spec.title} | {', '.join(shown)} | {percent(row['score'])} | {', '.join(row['results'])} |")
    average, scored = summary["average"], summary["averaged_tasks"]
    over = f"over {len(scored)} of the {len(TASKS)} tasks ({', '.join(scored)})" if scored else "no task scored"
    failed = f"; failed: {', '.join(summary['failed'])}" if summary["failed"] else ""
    return "\n".join([
        f"# GLUE: {summary['model']}", "",
        f"Recipe {summary['recipe']}; each task scored on its validation split (GLUE's test sets are scored by its "
        f"server only); figures x 100.", "", *lines, "",
        f"GLUE average (the mean of the task scores, a task's score the mean of its figures): "
        f"{percent(average) if scored else '-'}, {over}{failed}.", "",
        *([submission_line(summary["submission"]), ""] if "submission" in summary else []),
        f"Command: `{summary['command']}`", ""])


def submission_line(submission: dict[str, Any]) -> str:
    """summary.md's line on the test sets' files."""
    files = submission["files"]
    said = f"Test predictions: {', '.join(files)} in submission/" if files else "Test predictions: none"
    said += "".join(f"; none of {name} ({why})" for name, why in submission["unpredicted"].items())
    missing = [f for f in SUBMISSION_NAMES if f not in files]
    return said + (f"; {submission['zip']} holds them for GLUE's server." if submission["zip"] else
                   f"; no submission.zip: GLUE's server takes all {len(SUBMISSION_NAMES)} files, and "
                   f"{', '.join(missing)} are missing.")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the tasks; returns the summary. Raises `GlueError` after writing it when a task failed."""
    args, keys = parse_args(argv)
    names = chosen_tasks(args.tasks)
    source = GlueSource.of(args)
    chosen = task_recipes(args, keys, names, source)
    unreadable = check_data(source, names)
    inputs = {key: value for key, value in (("--model", args.model), ("--data_dir", args.data_dir))
              if value is not None and Path(value).exists()}
    folder = run_folder.check_writer_output(args.output_dir, COMMAND, overwrite=args.overwrite_output_dir,
                                            inputs=inputs)
    with run_folder.output_in_place(folder, COMMAND):
        summary = run_glue(args, keys, chosen, folder, source, unreadable)
    unpredicted = summary.get("submission", {}).get("unpredicted", {})
    if summary["failed"] or unpredicted:
        problems = ([f"{len(summary['failed'])} of {len(names)} tasks failed ("
                     + "; ".join(f"{n}: {summary['tasks'][n]['error']}" for n in summary["failed"]) + ")"]
                    if summary["failed"] else [])
        problems += [f"no test predictions of {n} ({why})" for n, why in unpredicted.items()]
        raise GlueError(f"{'; '.join(problems)}; the others' figures are in {folder / 'summary.md'}")
    return summary


def check_data(source: GlueSource, names: list[str]) -> dict[str, str]:
    """Refuse before any work when no chosen task's data can be read (neither the Hub nor the datasets cache has its
    configuration, offline say; `--data_dir` lacks its folder or a split); name up front those that cannot, which
    fail in turn while the others run: {task: why}."""
    unreadable = source.unreadable(names)
    if source.folder is None:
        where = (f"neither the Hub nor the datasets cache ({datasets.config.HF_DATASETS_CACHE}) has {DATASET} "
                 f"{', '.join(unreadable)}")
        advice = ("offline, HF_HUB_OFFLINE=1, a run reads only a copy an online load left in the cache); run once "
                  "online, set HF_DATASETS_CACHE to where that copy is, or give GLUE as a folder with --data_dir")
    else:
        where = "; ".join(unreadable.values())
        advice = f"--data_dir: give a folder of {glue_files.EXPECTED}"
    if list(unreadable) == names:
        raise GlueError(f"{where}: nothing to run ({advice}")
    if unreadable:
        print(f"note: {where}; {'it fails' if len(unreadable) == 1 else 'they fail'} in turn, the others run",
              flush=True)
    return unreadable


def run_glue(args: argparse.Namespace, keys: list[str], chosen: dict[str, Recipe], folder: Path, source: GlueSource,
             unreadable: dict[str, str]) -> dict[str, Any]:
    """Every chosen task, then the summary, into `folder` (owned by `main`); a task of `unreadable` fails saying why."""
    rows: dict[str, dict[str, Any]] = {}
    unpredicted: dict[str, str] = {}  # a task that trained -> why its test sets have no files
    for name, recipe in chosen.items():
        print(f"== {name}: fine-tuning on {' '.join(source.argv(name)[1::2])}", flush=True)
        try:
            if name in unreadable:
                raise GlueError(unreadable[name])
            rows[name], model = run_task(name, finetune_argv(args, keys, name, source), recipe, source)
        except Exception as error:  # reported in the summary; the other tasks run on
            rows[name] = {"error": _failure(error)}
            print(f"== {name}: failed: {rows[name]['error']}", flush=True)
            continue
        print(f"== {name}: " + ", ".join(f"{k}={'undefined' if v is None else f'{v:.4f}'}"
                                         for k, v in rows[name]["figures"].items()), flush=True)
        if args.submission:
            try:
                predict_test_sets(name, model, recipe, folder / "submission", source)
            except Exception as error:  # its figures stand; the summary says why it has no files
                unpredicted[name] = _failure(error)
                print(f"== {name}: no test predictions: {unpredicted[name]}", flush=True)
    command = run_folder.command_of(COMMAND, args.argv)
    summary = {"command": command, "model": args.model, "recipe": args.recipe, "data": args.data_dir or DATASET,
               "tasks": rows,
               "average": glue_average(rows), "averaged_tasks": [n for n, row in rows.items() if "score" in row],
               "failed": [n for n, row in rows.items() if "error" in row]}
    if args.submission:
        archive = zip_submission(folder / "submission")
        summary["submission"] = {"files": sorted(p.name for p in (folder / "submission").glob("*.tsv")),
                                 "zip": archive and archive.name, "unpredicted": unpredicted}
    (folder / "summary.json").write_text(strict_json.dumps(summary, indent=1))
    (folder / "summary.md").write_text(render(summary))
    print("\n" + render(summary))
    return summary


if __name__ == "__main__":
    run_script(main)
