"""What `lineage evaluate` writes: `results.json`, the plots beside it, each row's prediction (`write_predictions`)
and (asked for) the model card's evaluation.

- `plot_scores`: one small panel per task and metric, this model's bar beside the `--compare` baseline's (an earlier
  `lineage evaluate` output), as the harness leaderboards draw them;
- `plot_bleu_by_length`: a translator's BLEU per source-length bucket (`train.analysis.experiment`), and the baseline's;
- `write_card`: the folder's `README.md` gets a `model-index` entry per task (one of the same task and data set, the
  run's own too, replaced) and an evaluation table between two markers (replaced on the next run); nothing else
  of the folder changes, and a run's manifest (`run.json` beside a run's `model/`) records the new card.

docs/evaluation.md ("What it writes").
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import yaml

from train.analysis.experiment import plot_bleu_vs_length
from train.run import strict_json
from train.run.figures import pyplot, save_figure
from train.run.publish import figure, index_metrics, read_card_metadata
from train.run.run_folder import RECORD, record_files

BEGIN, END = "<!-- lineage evaluate -->", "<!-- /lineage evaluate -->"


class ReportError(ValueError):
    """A `--compare` folder that holds no `lineage evaluate` results."""


def read_baseline(folder: str) -> dict[str, Any]:
    """The results of an earlier `lineage evaluate` output folder, refused naming `--compare` otherwise."""
    path = Path(folder) / "results.json"
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError):
        results = None
    if not isinstance(results, dict) or "scores" not in results:
        raise ReportError(f"--compare {folder!r} holds no results of lineage evaluate ({path} is missing or "
                          "unreadable): give the --output_dir of an earlier lineage evaluate")
    return results


def label(model: str) -> str:
    """A model's name on a plot: a run's `<output_dir>/model` by its run folder, any other by its last part."""
    path = Path(model)
    return path.parent.name if path.name == "model" and path.parent.name else path.name or model


def plot_scores(scores: dict[str, dict[str, float]], name: str, path: Path, baseline: dict[str, Any] | None = None,
                source: str | None = None) -> Path:
    """A bar per (task, metric) of this model and, where it has the figure, the baseline; NaN is labelled undefined."""
    panels = [(task, metric) for task, figures in scores.items() for metric in figures]
    other = (baseline or {}).get("scores", {})
    columns = min(len(panels), 3)
    rows = -(-len(panels) // columns)
    fig, axes = pyplot().subplots(rows, columns, figsize=(3.4 * columns, 2.8 * rows), squeeze=False)
    for ax, (task, metric) in zip(axes.flat, panels):
        labels, values = [name], [scores[task][metric]]
        if metric in other.get(task, {}):
            labels.append(baseline["model"])
            values.append(other[task][metric])
        values = [math.nan if value is None else value for value in values]
        ax.bar(range(len(values)), values, color=["tab:blue", "tab:gray"][:len(values)])
        ax.set_xticks(range(len(values)), [label(name) for name in labels], fontsize=7)
        ax.set_title(f"{task}\n{metric}", fontsize=8)
        for x, value in enumerate(values):
            defined = math.isfinite(value)
            ax.annotate(f"{value:.4g}" if defined else "undefined", (x, value if defined else 0), ha="center",
                        va="bottom", fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    return save_figure(fig, path, source)


def plot_bleu_by_length(rows: list[dict], name: str, path: Path, baseline: dict[str, Any] | None = None,
                        source: str | None = None) -> Path:
    """BLEU per source-length bucket, the baseline's beside it where it was scored on the same buckets."""
    arms = {label(name): {"bleu_by_length": rows}}
    theirs = ((baseline or {}).get("translation") or {}).get("bleu_by_length")
    if theirs and [r["bucket"] for r in theirs] == [r["bucket"] for r in rows]:
        arms[label(baseline["model"])] = {"bleu_by_length": theirs}
    return plot_bleu_vs_length(arms, path, source)


def write_results(path: Path, results: dict[str, Any]) -> Path:
    path.write_text(strict_json.dumps(results, indent=1, default=str, ensure_ascii=False))
    return path


def _index_entry(task: str, figures: dict[str, float], task_type: str,
                 dataset: dict[str, str] | None) -> dict[str, Any]:
    return {"task": {"type": task_type}, "dataset": dataset or {"name": task, "type": task},
            "metrics": index_metrics(figures)}


def card_metadata(metadata: dict[str, Any], scores: dict[str, dict[str, float]], model_name: str, task_type: str,
                  dataset: dict[str, str] | None = None) -> dict[str, Any]:
    """`metadata` with a `model-index` entry per scored task, on `dataset` (its name, type, config and split; None:
    the task's own, a harness task); an entry of the same task type and dataset is replaced, by nothing where no
    figure of the task is defined (the Hub needs a value for each metric: `index_metrics`)."""
    index = metadata.get("model-index") or [{"name": model_name, "results": []}]
    entries = [_index_entry(task, figures, task_type, dataset) for task, figures in scores.items()]
    replaced = [(e["task"], e["dataset"]) for e in entries]
    kept = [r for r in index[0].get("results", []) if (r.get("task"), r.get("dataset")) not in replaced]
    results = kept + [e for e in entries if e["metrics"]]
    index = [*([{**index[0], "results": results}] if results else []), *index[1:]]
    return {**metadata, "model-index": index} if index else {k: v for k, v in metadata.items() if k != "model-index"}


def evaluation_section(scores: dict[str, dict[str, float]], settings: dict[str, Any]) -> str:
    rows = "\n".join(f"| {task} | {metric} | {figure(value)} |" if isinstance(value, float) else
                     f"| {task} | {metric} | {value} |" for task, figures in scores.items()  # a count as it is
                     for metric, value in figures.items())
    said = ", ".join(f"{k} {v}" for k, v in settings.items() if v is not None)
    return (f"{BEGIN}\n## Evaluation\n\nScored with `lineage evaluate` ({said}).\n\n| task | metric | value |\n"
            f"|---|---|---|\n{rows}\n{END}\n")


def write_card(folder: Path, scores: dict[str, dict[str, float]], task_type: str, settings: dict[str, Any],
               dataset: dict[str, str] | None = None) -> Path:
    """Update `folder/README.md` (module docstring), written through a temporary file and a rename."""
    card = folder / "README.md"
    text = card.read_text() if card.is_file() else ""
    metadata = read_card_metadata(card) if text.startswith("---\n") else {}
    body = text.split("---\n", 2)[2] if text.startswith("---\n") else text
    section = evaluation_section(scores, settings)
    if BEGIN in body and END in body:
        body = body[:body.index(BEGIN)] + section + body[body.index(END) + len(END) + 1:]
    else:
        body = body.rstrip("\n") + ("\n\n" if body.strip() else "") + section
    metadata = card_metadata(metadata, scores, folder.name, task_type, dataset)
    tmp = folder / ".README.md.tmp"
    tmp.write_text("---\n" + yaml.safe_dump(metadata, sort_keys=False) + "---\n\n" + body.lstrip("\n"))
    os.replace(tmp, card)
    record = folder.parent / RECORD
    if folder.name == "model" and record.is_file() and "model/README.md" in json.loads(record.read_text()).get("wrote",
                                                                                                               {}):
        record_files(folder.parent, "model")  # the run's card, rewritten
    return card


def row_predictions(found: dict[str, Any], answered, rows, names: list[str], text: str,
                    labelled: bool) -> list[dict[str, Any]]:
    """Each row's prediction and (`labelled`) reference: a class name, a score, a tag per word (each word's first
    sub-token's, the words the window held, with those words: `text` names their column), an answer text (QA's
    `answered`: "" for no answer; SQuAD's `id` too)."""
    if answered is not None:
        predicted, references = answered(found), [answer["text"] for answer in rows["answers"]]
    elif found["predictions"].is_floating_point():  # regression's scores
        predicted, references = found["predictions"].tolist(), found["labels"].tolist()
    else:
        keep = found["labels"] != -100
        predicted, references = ([[names[i] for i in values[k].tolist()] for values, k in zip(found[key], keep)]
                                 if keep.ndim == 2 else [names[i] for i in found[key].tolist()]
                                 for key in ("predictions", "labels"))
    ids = rows["id"] if answered is not None and "id" in rows.column_names else None
    words = rows[text] if predicted and isinstance(predicted[0], list) else None
    return [{"row": i, **({"id": ids[i]} if ids else {}), **({"words": words[i][:len(p)]} if words else {}),
             "prediction": p, **({"reference": r} if labelled else {})}
            for i, (p, r) in enumerate(zip(predicted, references))]


def write_predictions(folder: Path, predictions: list[dict[str, Any]]) -> None:
    """predictions.jsonl, a row each; a translation's predictions.txt (sacreBLEU's hypotheses), a translation per
    line; SQuAD's predictions.json (its evaluation scripts' input), each question's id -> answer; a tagger's
    predictions.conll (conlleval's input), `word reference prediction` a line (unlabelled: `word prediction`), a blank
    line after each sentence."""
    with open(folder / "predictions.jsonl", "w", encoding="utf-8") as out:
        out.writelines(strict_json.dumps(row, ensure_ascii=False) + "\n" for row in predictions)
    if predictions and "source" in predictions[0]:
        text = "".join(" ".join(row["prediction"].splitlines()) + "\n" for row in predictions)
        (folder / "predictions.txt").write_text(text, encoding="utf-8")
    if predictions and "words" in predictions[0]:
        text = "".join("".join(" ".join(["_".join(tags[0].split()) or "_", *tags[1:]]) + "\n" for tags in zip(
            row["words"], *([row["reference"]] if "reference" in row else []), row["prediction"])) + "\n"
            for row in predictions)
        (folder / "predictions.conll").write_text(text, encoding="utf-8")
    if predictions and "id" in predictions[0]:
        answers = {row["id"]: row["prediction"] for row in predictions}
        (folder / "predictions.json").write_text(json.dumps(answers, ensure_ascii=False), encoding="utf-8")


__all__ = ["BEGIN", "END", "ReportError", "card_metadata", "evaluation_section", "label", "plot_bleu_by_length",
           "plot_scores", "read_baseline", "row_predictions", "write_card", "write_predictions", "write_results"]
