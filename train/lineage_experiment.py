"""The lineage experiment: why attention, then the Transformer, replaced the thought vector — one command.

    python -m train.lineage_experiment [--output_dir DIR [--overwrite_output_dir]] [--arms a,b,...] [--quick]
                                       [--max_train_seconds N | --max_steps N]
                                       [--train_file F --validation_file F | --dataset NAME]

Trains every arm (`rnn-none`, `rnn-bahdanau`, `rnn-luong`, `transformer`, `transformer-relative`; recipes
`experiment-<arm>`) on the same data, tokenizer and budget of training time, then translates the validation set and
writes the report into `--output_dir` (`train.run.run_folder.output_in_place`). The budget is wall-clock time (read
the `steps` column), or `--max_steps`, which a second run repeats. docs/experiments.md, "The lineage experiment".
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from train.analysis import experiment
from train.cli import CommandParser, number, run_script
from train.data.collators import Seq2SeqCollator
from train.data.model_inputs import tokenize_dataset
from train.run import run_folder
from train.run.engine import Engine
from train.run.environment import versions
from train.run.recipes import Recipe, load_recipe
from train.run.run_folder import start_run
from train.setup.models import build_model, model_source
from train.setup.run_tokenizer import get_tokenizer
from train.setup.splits import load_splits, row_texts

COMMAND = "experiment"
ARMS = ("rnn-none", "rnn-bahdanau", "rnn-luong", "transformer", "transformer-relative")
DATA_KEYS = ("dataset", "train_file", "validation_file", "train_size", "eval_size", "tokenizer_vocab_size",
             "max_seq_length", "seed")
DEFAULT_BUDGET = 150.0
QUICK_BUDGET = 1.0
QUICK = {"train_size": 200, "eval_size": 24, "tokenizer_vocab_size": 300, "max_steps": 15, "eval_steps": 3,
         "logging_steps": 3, "num_beams": 2, "max_new_tokens": 24, "per_device_train_batch_size": 16}
QUICK_SIZES = {"rnn-tiny": {"hidden_size": 32, "embedding_size": 16},  # by preset: the tiny widths
               "transformer-tiny": {"hidden_size": 32, "intermediate_size": 64}}
COLUMNS = (("source", "text"), ("target", "text"))
OLD_FLAGS = {"--out": "--output_dir", "--budget-seconds": "--max_train_seconds", "--train-file": "--train_file",
             "--validation-file": "--validation_file"}  # old spelling -> the flag now


class ExperimentError(ValueError):
    """An argument the experiment cannot run with; the message names it."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description=__doc__.splitlines()[0], old_flags=OLD_FLAGS)
    parser.add_argument("--output_dir", default="outputs/lineage-experiment", help="report folder (new or empty)")
    parser.add_switch("--overwrite_output_dir", help="replace an earlier experiment's report folder (nothing else)")
    parser.add_argument("--max_train_seconds", type=number(float, 0, "a number of seconds", above=True), default=None,
                        help=f"training seconds per arm, the budget (default {DEFAULT_BUDGET:g}; {QUICK_BUDGET:g} "
                             "with --quick)")
    parser.add_argument("--max_steps", type=number(int, 1, "a number of steps"), default=None,
                        help="optimizer steps per arm instead of the time budget: the same command then gives the "
                             "same losses and BLEU")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, from {', '.join(ARMS)}")
    parser.add_argument("--train_file", help="source/target pairs: TSV or JSON Lines (with --validation_file)")
    parser.add_argument("--validation_file", help="the pairs to evaluate on (with --train_file)")
    parser.add_argument("--dataset", help="a Hub dataset (or embedded:translation) with source/target columns")
    parser.add_switch("--quick", help="tiny data and budget: a smoke run in seconds")
    args = parser.parse_args(argv)
    args.argv = None if argv is None else list(argv)  # the command line, for the report
    return args


def check_arguments(args: argparse.Namespace) -> tuple[list[str], float]:
    """The arms and the budget, or an `ExperimentError` naming the bad argument."""
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if not arms or unknown or len(set(arms)) != len(arms):
        raise ExperimentError(f"--arms {args.arms!r}: give distinct arms from {', '.join(ARMS)}"
                              + (f" (unknown: {', '.join(unknown)})" if unknown else ""))
    if args.max_steps is not None and args.max_train_seconds is not None:
        raise ExperimentError("give either --max_train_seconds (a budget of training time) or --max_steps, not both")
    budget = args.max_train_seconds if args.max_train_seconds is not None else (QUICK_BUDGET if args.quick
                                                                                 else DEFAULT_BUDGET)
    if args.max_steps is not None:
        budget = 0.0  # the recipes' `max_train_seconds: 0`: no time limit
    if (args.train_file is None) != (args.validation_file is None):
        raise ExperimentError("--train_file and --validation_file go together: BLEU is measured on the validation file")
    if args.dataset and args.train_file:
        raise ExperimentError("give either --dataset or --train_file/--validation_file, not both")
    for flag, file in (("--train_file", args.train_file), ("--validation_file", args.validation_file)):
        if file is not None and not Path(file).is_file():
            raise ExperimentError(f"{flag} {file!r} does not exist")
    return arms, budget


def arm_recipes(args: argparse.Namespace, arms: list[str], budget: float) -> dict[str, Recipe]:
    """Each arm's recipe with the experiment's data, tokenizer, budget and output folder; their data keys agree."""
    out = Path(args.output_dir)
    overrides: dict[str, Any] = {"max_train_seconds": budget, "tokenizer": str(out / "tokenizer"),
                                 "report_to": "none", "progress_bar": False, **(QUICK if args.quick else {}),
                                 **({"max_steps": args.max_steps} if args.max_steps else {})}
    if args.train_file:
        overrides.update(dataset="", train_file=args.train_file, validation_file=args.validation_file)
    elif args.dataset:
        overrides["dataset"] = args.dataset
    recipes = {arm: load_recipe(f"experiment-{arm}",
                                {**overrides, "output_dir": str(out / "runs" / arm)}) for arm in arms}
    for recipe in recipes.values():
        recipe.command = "train_translation"  # each arm is its run: its card shows the keys that run reads
    if args.quick:
        recipes = {arm: r.replace(model_overrides={**r.model_overrides, **QUICK_SIZES.get(r.model, {})})
                   for arm, r in recipes.items()}
    first = recipes[arms[0]]
    for arm, recipe in recipes.items():
        differing = [k for k in DATA_KEYS if getattr(recipe, k) != getattr(first, k)]
        if differing:
            raise ExperimentError(f"recipe experiment-{arm}.yaml differs from experiment-{arms[0]}.yaml in the shared "
                                  f"keys {', '.join(differing)}; every arm must see the same data")
    return recipes


def shared_data(recipe: Recipe, out: Path):
    """The training and validation pairs, and the BPE tokenizer trained once on the training pairs (kept in `out`)."""
    train_rows, eval_rows = load_splits(recipe, COLUMNS, "embedded:translation")
    if eval_rows is None or len(eval_rows) == 0:
        raise ExperimentError("the data has no validation split: give --validation_file (BLEU is measured on it)")
    shared = recipe.replace(tokenizer=None, output_dir=str(out), resume_from_checkpoint=None)
    source = model_source(shared, "lineage_experiment", ("seq2seq",), generates=True)
    with start_run(shared) as run:  # the report folder, claimed before the tokenizer is written into it
        tokenizer = get_tokenizer(shared, "seq2seq", lambda: row_texts(train_rows, ("source", "target")), source,
                                  run=run)
    run.release()
    return train_rows, eval_rows, tokenizer


def train_arm(recipe: Recipe, train_rows, eval_rows):
    """Train one arm to its budget; returns the trained model (eval mode), the tokenizer and the run summary."""
    source = model_source(recipe, "lineage_experiment", ("seq2seq",), generates=True)
    with start_run(recipe) as run:
        tokenizer = get_tokenizer(recipe, "seq2seq", list, source)  # the shared one, from recipe.tokenizer
        model = build_model(recipe, "AutoModelForSeq2SeqLM", tokenizer, "seq2seq", source,
                            label_smoothing=recipe.label_smoothing)
        lengths = {"max_source_length": recipe.max_seq_length, "max_target_length": recipe.max_seq_length}
        engine = Engine(run, model, tokenize_dataset(train_rows, tokenizer, "seq2seq", **lengths),
                        Seq2SeqCollator(tokenizer, recipe.pad_to_multiple_of), tokenizer=tokenizer,
                        eval_dataset=tokenize_dataset(eval_rows, tokenizer, "seq2seq", **lengths),
                        sparse_prediction=True)
        results = engine.train()
        results["eval_curve"] = [(r["seconds"], r["eval_loss"]) for r in engine.log.history if "eval_loss" in r]
        results["training_seconds"] = max((r["seconds"] for r in engine.log.history if "loss" in r), default=0.0)
        engine.finish(results, description="A lineage experiment arm (train.lineage_experiment).")
    return engine.accelerator.unwrap_model(engine.model).eval(), tokenizer, results


def measure_arm(arm: str, recipe: Recipe, train_rows, eval_rows, buckets, out: Path, command: str) -> dict[str, Any]:
    """Train one arm, translate the validation set, score it by length, draw its alignment; its row of results."""
    began = time.perf_counter()
    model, tokenizer, results = train_arm(recipe, train_rows, eval_rows)
    sources, references = list(eval_rows["source"]), list(eval_rows["target"])
    hypotheses = experiment.translate(model, tokenizer, sources, recipe.num_beams, recipe.max_new_tokens,
                                      recipe.per_device_eval_batch_size, recipe.length_penalty, recipe.beam_search,
                                      max_length=recipe.max_seq_length)  # each source cut as training cut it
    lengths = experiment.source_lengths(tokenizer, sources)
    found = experiment.alignment(model, tokenizer, *sentence(eval_rows, lengths, recipe.max_seq_length),
                                 max_length=recipe.max_seq_length)
    heatmap = experiment.draw_alignment(found, arm, out / f"alignment_{arm}.png", command).name if found else None
    return {"bleu": experiment.bleu(hypotheses, references),
            "bleu_by_length": experiment.bleu_by_bucket(hypotheses, references, lengths, buckets),
            "tokens_per_s": results["tokens_per_s"], "parameters": sum(p.numel() for p in model.parameters()),
            "training_seconds": results["training_seconds"], "wall_seconds": time.perf_counter() - began,
            "steps": results["steps"], "eval_curve": results["eval_curve"], "heatmap": heatmap,
            "alignment": None if found is None else {"rows": found[1], "columns": found[2],
                                                     "weights": found[0].round(4).tolist()},
            "samples": [f"{s} -> {h}" for s, h in list(zip(sources, hypotheses))[:3]], "recipe": recipe.to_dict()}


def sentence(eval_rows, lengths: list[int], max_length: int) -> tuple[str, str]:
    """The validation pair every alignment shows: the longest source (the first of equals) of those translated whole
    (of at most `max_length` tokens), where there is one."""
    row = eval_rows[max(range(len(lengths)), key=lambda i: (lengths[i] <= max_length, lengths[i], -i))]
    return row["source"], row["target"]


def machine() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPU cores, load average {load} (1, 5, 15 min)"


def main(argv: Sequence[str] | None = None) -> dict[str, Path]:
    """Run the experiment; returns the report's paths (`report`, `results`, `loss_vs_time`, `bleu_vs_length`)."""
    args = parse_args(argv)
    arms, budget = check_arguments(args)
    recipes = arm_recipes(args, arms, budget)
    folder = run_folder.check_writer_output(args.output_dir, COMMAND, overwrite=args.overwrite_output_dir)
    with run_folder.output_in_place(folder, COMMAND):
        return run_experiment(args, arms, budget, recipes)


def run_experiment(args: argparse.Namespace, arms: list[str], budget: float, recipes: dict[str, Recipe]):
    """The experiment into `args.output_dir` (owned by `main`); returns the report's paths."""
    out = Path(args.output_dir)
    first, began = recipes[arms[0]], time.perf_counter()
    train_rows, eval_rows, tokenizer = shared_data(first, out)
    # every arm records the sizes that loading the data applied (`load_split`), as the first arm's recipe does
    recipes = {arm: r.replace(train_size=first.train_size, eval_size=first.eval_size) for arm, r in recipes.items()}
    lengths = experiment.source_lengths(tokenizer, list(eval_rows["source"]))
    buckets, machine_at_start = experiment.length_buckets(lengths), machine()
    cut = experiment.sources_cut(lengths, first.max_seq_length)
    if cut:
        print(experiment.cut_note(first.validation_file or first.dataset, cut, len(lengths), first.max_seq_length,
                                  "max_seq_length, as training cut them"), flush=True)
    command = run_folder.command_of(COMMAND, args.argv)
    results = {}
    for arm in arms:
        print(f"== {arm}: " + (f"{args.max_steps} steps" if args.max_steps else f"{budget:g} s") + " of training",
              flush=True)
        results[arm] = measure_arm(arm, recipes[arm], train_rows, eval_rows, buckets, out, command)
    source, target = sentence(eval_rows, lengths, first.max_seq_length)
    meta = {"command": command, "versions": versions(),
            "data": first.train_file or first.dataset, "train_rows": len(train_rows), "eval_rows": len(eval_rows),
            "vocab_size": len(tokenizer), "budget_seconds": budget, "max_steps": args.max_steps,
            "num_beams": first.num_beams,
            "machine": f"at start {machine_at_start}; at end {machine()}",
            "total_seconds": time.perf_counter() - began, "sentence": {"source": source, "target": target},
            "max_source_length": first.max_seq_length, "sources_cut": cut}
    paths = experiment.write_report(out, results, meta)
    print(experiment.results_table(results))
    print(f"wrote {paths['report']} ({meta['total_seconds']:.0f} s in all)")
    return paths


if __name__ == "__main__":
    run_script(main)
