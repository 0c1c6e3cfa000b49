"""Score a model the standard way: harness tasks, sacreBLEU and chrF, a classifier's data set, pseudo-perplexity.

    lineage evaluate --model outputs/gpt/model --tasks hellaswag,arc_easy --limit 100 --output_dir evals/gpt-std
    lineage evaluate --model outputs/mt/model --dataset pairs.json --output_dir evals/mt --compare evals/mt-before
    lineage evaluate --model outputs/bert/model --text_file held-out.txt --output_dir evals/bert

`--model` is a folder or Hub id, loaded as a Hub user loads it. With `--tasks` the harness's own `hf` model runs
them (`train.analysis.harness`); without, a translation model translates `--dataset`, a classifier is scored on it
and a masked LM gets pseudo-perplexity on `--text_file` (`train.analysis.model_scores`). Everything is checked
before a model is loaded. docs/evaluation.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from modeling.beam_search import BEAM_SEARCHES
from train.analysis import evaluation_report, harness
from train.analysis.experiment import cut_note
from train.analysis.model_scores import pseudo_perplexity, score_translator
from train.cli import CommandParser, number, run_script
from train.run.environment import accelerator_on, device_refusal, versions
from train.run.publish import pipeline_tag, public_name
from train.run.run_folder import check_writer_output, command_of, staged_output
from train.setup.models import HUB_ID, load_backbone, missing_config_hint
from train.setup.splits import check_sequence_room

COMMAND = "evaluate"
# the end of an architecture's class name -> what `lineage evaluate` does with it
KINDS = {"ForCausalLM": "causal", "LMHeadModel": "causal", "ForConditionalGeneration": "seq2seq",
         "ForSeq2SeqLM": "seq2seq", "ForMaskedLM": "masked-lm", "ForPreTraining": "masked-lm",
         "ForSequenceClassification": "classifier", "ForTokenClassification": "classifier",
         "ForQuestionAnswering": "classifier"}
# the flags only one way of scoring reads (`scoring`) -> it: given to another, a flag would be ignored
SCORING_FLAGS = {**dict.fromkeys(("include_path", "limit", "num_fewshot"), "the harness (--tasks)"),
                 **dict.fromkeys(("num_beams", "length_penalty", "beam_search", "source_column", "target_column"),
                                  "translation"),
                 **dict.fromkeys(("task", "text_column", "text_pair_column", "label_column", "skip_unlabeled",
                                  "max_query_length", "doc_stride", "version_2_with_negative",
                                  "null_score_diff_threshold"), "classification"),
                 "text_file": "pseudo-perplexity"}
# of classification's flags, those question answering alone reads
QA_FLAGS = ("max_query_length", "doc_stride", "version_2_with_negative", "null_score_diff_threshold")
MAX_LENGTH = "--max_seq_length (default: the run's)"  # as the refusals of its value name it


class EvaluateError(ValueError):
    """A `lineage evaluate` argument that names nothing it can score."""


def _finite(what: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number ({what}), got {text!r}")
        return value
    return parse


def _limit(text: str) -> float:
    """lm_eval's `--limit`: examples per task (a whole number >= 1) or a fraction of them (0 < f < 1)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < 1 or (value >= 1 and value.is_integer())):
        raise argparse.ArgumentTypeError(f"expected a number of examples per task >= 1, or a fraction of them "
                                         f"between 0 and 1, got {text!r}")
    return int(value) if value >= 1 else value


def _batch_size(text: str) -> int | str:
    if text == "auto" or text.startswith("auto:") and text[5:].isdigit():
        return text
    return number(int, 1, "auto or a batch size")(text)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return command_parser().parse_args(argv)


def command_parser() -> CommandParser:
    parser = CommandParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model folder or Hub id")
    parser.add_argument("--model_revision", default=None, help="Hub branch, tag or commit of --model")
    parser.add_argument("--output_dir", required=True, help="folder for results.json and the plots (new or empty)")
    parser.add_argument("--tasks", default=None, help="lm-evaluation-harness tasks, groups, tags or YAML files, "
                                                      "comma-separated")
    parser.add_argument("--include_path", default=None, help="a folder of task YAMLs of your own")
    parser.add_argument("--limit", type=_limit, default=None, help="examples per task (or a fraction)")
    parser.add_argument("--num_fewshot", type=number(int, 0, "a number of examples"), default=None)
    parser.add_argument("--batch_size", type=_batch_size, default=None,
                        help="an integer, or auto (harness); default: the harness 1, else the run's "
                             "per_device_eval_batch_size (its recipe.yaml), else 32")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: a GPU if there is one)")
    parser.add_argument("--dataset", default=None, help="data to score a translation or classification model on: a "
                                                        "file, a Hub dataset or embedded:<task>")
    parser.add_argument("--dataset_config", default=None, help="the Hub dataset's configuration")
    parser.add_argument("--split", default="test", help="the split of --dataset (a local file is one split: give "
                                                        "train or nothing; a folder may name its files' splits)")
    parser.add_argument("--task", default=None, help="classification models: sequence-classification, nli, "
                                                     "regression, token-classification or question-answering "
                                                     "(default: the task the run fine-tuned it for, else its head's)")
    for column in ("text_column", "text_pair_column", "label_column"):
        parser.add_argument(f"--{column}", default=None, help="as finetune's recipe key (default: the run's, with "
                                                              "--dataset)")
    parser.add_switch("--skip_unlabeled", default=None, help="classification and regression: leave out rows labelled "
                                                             "-1 (SNLI, GLUE test splits) or without a score (default: "
                                                             "the run's, with --dataset)")
    for column in ("source_column", "target_column"):
        parser.add_argument(f"--{column}", default=None, help="as train_translation's recipe key (default: the "
                                                              "run's, with --dataset)")
    parser.add_argument("--eval_size", type=number(int, 1, "a number of rows"), default=None,
                        help="score the first N rows")
    parser.add_argument("--max_seq_length", type=number(int, 2, "a length"), default=None,
                        help="tokens per example (default: the run's, else the model's positions, at most "
                             "512); with --tasks, the harness's max_length (default: the model's positions)")
    parser.add_argument("--max_query_length", type=number(int, 1, "a number of tokens"), default=None,
                        help="question answering: the tokens of a question kept (default: the run's, else 64)")
    parser.add_argument("--doc_stride", type=number(int, 0, "a number of tokens"), default=None,
                        help="question answering: the context tokens a window repeats from the one before (default: "
                             "the run's, else a quarter of --max_seq_length)")
    parser.add_switch("--version_2_with_negative", default=None,
                      help="question answering: questions may have no answer (SQuAD 2.0, run_qa.py's flag), given "
                           "where [CLS] scores higher (default: as the data's answers say; without them, the run's, "
                           "saved in config.json, else as its validation data)")
    parser.add_argument("--null_score_diff_threshold", type=_finite("a difference of logits"), default=None,
                        help="question answering: no answer only where [CLS] outscores the best span by more than "
                             "this, in logits (run_qa.py's flag, BERT's tau; default: the run's, saved in "
                             "config.json, else 0)")
    parser.add_argument("--num_beams", type=number(int, 1, "a beam size"), default=4)
    parser.add_argument("--length_penalty", type=_finite("the length penalty's exponent"), default=1.0)
    parser.add_argument("--beam_search", choices=list(BEAM_SEARCHES), default="transformers",
                        help="gnmt: the Transformer paper's (GNMT's length penalty, at most source length + 50 tokens)")
    parser.add_argument("--max_new_tokens", type=number(int, 1, "a number of tokens"), default=None,
                        help="tokens a translation may have (default: 64, at most the decoder's positions - 1)")
    parser.add_argument("--text_file", default=None, help="masked LMs: the text to score (one sample per line)")
    parser.add_argument("--compare", default=None, help="an earlier lineage evaluate --output_dir: its figures are "
                                                        "drawn beside these")
    parser.add_switch("--predictions", help="with --dataset: also write each row's prediction (and reference) to "
                                            "predictions.jsonl, and the field's files: predictions.txt (translations), "
                                            "predictions.json (SQuAD), predictions.conll (tags); data without its "
                                            "label column: the predictions alone")
    parser.add_switch("--write_card", help="add the scores to the model folder's card (README.md)")
    parser.add_switch("--overwrite_output_dir", help="replace an earlier output of this command (nothing else)")
    return parser


def read_model_config(name: str, revision: str | None) -> dict[str, Any]:
    """`--model`'s config.json (a Hub id's from the Hugging Face cache or the Hub), refused naming `--model` when it
    is no model folder or repo."""
    path = Path(name)
    if path.exists():
        if not (path / "config.json").is_file():
            raise EvaluateError(f"--model {name!r} is not a saved model folder: it has no config.json"
                                f"{missing_config_hint(path)}")
        if not any(path.glob("*.safetensors")):
            raise EvaluateError(f"--model {name!r} holds no safetensors weights; give a folder save_pretrained wrote")
        config_file = path / "config.json"
    elif HUB_ID.fullmatch(name):
        from huggingface_hub import hf_hub_download

        try:
            config_file = Path(hf_hub_download(name, "config.json", revision=revision))
        except Exception as error:  # offline and not cached, no such repo, no access: the Hub's words say which
            raise EvaluateError(f"--model {name!r}: its config.json could not be read from the Hugging Face cache or "
                                f"the Hub ({type(error).__name__}: {error})") from None
    else:
        raise EvaluateError(f"--model {name!r} is neither a model folder nor a Hub repo id (org/name)")
    try:
        return json.loads(config_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise EvaluateError(f"--model {name!r}: {config_file} is not a JSON config ({error})") from None


def model_kind(config: dict[str, Any], name: str) -> tuple[str, str]:
    """(kind, architecture) of a config (`KINDS`)."""
    architecture = (config.get("architectures") or [""])[0]
    kind = next((k for suffix, k in KINDS.items() if architecture.endswith(suffix)), None)
    if kind is None:
        raise EvaluateError(f"--model {name!r} is a {architecture or 'model without architectures'}, which lineage "
                            f"evaluate does not score; it scores {', '.join(sorted(set(KINDS.values())))} models")
    return kind, architecture


def check_lengths(args: argparse.Namespace, config: dict[str, Any]) -> None:
    """`--max_seq_length` within the model's positions (its default: the run's, its recipe.yaml, as the run cut its
    rows; else the positions, at most 512; with `--tasks` none, the harness's own), `--max_new_tokens` within an
    encoder-decoder's positions after its start token (default: 64, at most that), and `--tasks` not empty."""
    positions = config.get("max_position_embeddings")
    if args.max_seq_length is None and args.tasks is None:
        args.max_seq_length = _run_recipe(args.model).get("max_seq_length") or min(positions or 512, 512)
    if positions and args.max_seq_length is not None and args.max_seq_length > positions:
        raise EvaluateError(f"{MAX_LENGTH} is {args.max_seq_length} but --model has {positions} positions: give at "
                            f"most {positions}")
    decoder = positions - 1 if positions and config.get("is_encoder_decoder") else None
    if args.max_new_tokens is None:
        args.max_new_tokens = min(64, decoder or 64)
    elif decoder and args.max_new_tokens > decoder:
        raise EvaluateError(f"--max_new_tokens is {args.max_new_tokens} but --model's decoder has {positions} "
                            f"positions, one of them for its start token: give at most {decoder}")
    if args.tasks is not None and not [t for t in args.tasks.split(",") if t.strip()]:
        raise EvaluateError(f"--tasks {args.tasks!r} names no task; give task names, comma-separated")


def check_arguments(args: argparse.Namespace, kind: str) -> Path:
    """Refuse, before a model or data is loaded, what cannot run for this kind of model; the output folder."""
    if args.device is not None and (refusal := device_refusal(args.device)):
        raise EvaluateError(f"--device {args.device!r}{refusal}")
    local = Path(args.model).exists()
    folder = check_writer_output(args.output_dir, COMMAND, overwrite=args.overwrite_output_dir,
                                 inputs={"--model": args.model} if local else None)
    if args.write_card and not local:
        raise EvaluateError(f"--write_card true writes into a local model folder; --model {args.model!r} is a Hub "
                            "id: download it, or push a card yourself")
    if args.write_card and not os.access(args.model, os.W_OK):
        raise EvaluateError(f"--write_card true writes the card into --model {args.model!r}, which is not writable "
                            "by this user: make it writable, or leave --write_card out (the scores are in "
                            "--output_dir)")
    if args.tasks is not None and kind not in ("causal", "seq2seq"):
        raise EvaluateError(f"--tasks runs lm-evaluation-harness on causal LMs and encoder-decoders; --model is a "
                            f"{kind} model: leave --tasks out to score it on --dataset or --text_file")
    if args.tasks is None and kind == "causal" and args.text_file is not None:
        raise EvaluateError(f"--text_file {args.text_file!r} is read for a masked LM's pseudo-perplexity; a causal "
                            "LM's perplexity on a text file is a harness task: write a task YAML that reads it "
                            "(dataset_path: text, output_type: loglikelihood_rolling, as docs/evaluation.md shows) "
                            "and give its file to --tasks instead")
    if args.tasks is None and kind == "causal":
        raise EvaluateError("--tasks is required for a causal LM: name lm-evaluation-harness tasks (e.g. "
                            "lineage_cloze,lineage_perplexity, shipped; hellaswag,arc_easy from the Hub)")
    scoring = "the harness (--tasks)" if args.tasks is not None else {
        "seq2seq": "translation", "classifier": "classification", "masked-lm": "pseudo-perplexity"}[kind]
    defaults = command_parser()
    ignored = [f"--{flag}" for flag, reader in SCORING_FLAGS.items()
               if reader != scoring and getattr(args, flag) != defaults.get_default(flag)]
    if ignored:
        readers = " and ".join(sorted({SCORING_FLAGS[flag[2:]] for flag in ignored}))
        raise EvaluateError(f"{', '.join(ignored)}: read by {readers} only, but --model (a {kind} model) is scored "
                            f"by {scoring} here: leave {'it' if len(ignored) == 1 else 'them'} out")
    if args.predictions and scoring not in ("translation", "classification"):
        raise EvaluateError(f"--predictions writes the predictions of a translation or classification model on "
                            f"--dataset; --model (a {kind} model) is scored by {scoring} here: leave it out")
    if kind == "masked-lm" and args.text_file is None:
        raise EvaluateError("--text_file is required for a masked LM: the text its pseudo-perplexity is taken on")
    if args.text_file is not None and not Path(args.text_file).is_file():
        raise EvaluateError(f"--text_file {args.text_file!r} is no file")
    return folder


def device_of(args: argparse.Namespace) -> str:
    import torch

    return args.device or ("cuda" if torch.cuda.is_available() else "cpu")


def evaluate_harness(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    """The harness on `--tasks` (tasks and their data first, then the model once)."""
    harness.require_lm_eval()
    arguments = harness.model_arguments(args.model, args.model_revision, kind == "seq2seq", args.max_seq_length)
    manager = harness.task_manager(args.include_path, arguments)
    tasks = harness.load_tasks([t.strip() for t in args.tasks.split(",") if t.strip()], manager)
    results = harness.run(tasks, arguments, manager, limit=args.limit, num_fewshot=args.num_fewshot,
                          batch_size=args.batch_size or 1, device=args.device)
    results["task_hashes"] = harness.task_hashes(results.pop("samples"))
    return {"scores": harness.scores(results), "harness": results}


def _rows(args: argparse.Namespace, source: str, columns, flags: str, note: bool = True) -> Any:
    """The rows to score: `--split` of `source`, cut to `--eval_size`; a column it lacks is refused naming `flags`,
    which name others. A Hub dataset cut so is streamed and only its first rows read into memory (a corpus's held-out
    `train[:N]` is never downloaded whole)."""
    import datasets

    from train.data.corpus import SPLITS
    from train.data.errors import UnknownColumnError
    from train.data.files import load_text_dataset, names_local_data
    from train.run.recipes import Recipe

    embedded = source.startswith("embedded:")
    if embedded and args.split not in SPLITS:
        raise EvaluateError(f"--split {args.split!r}: {source} has the splits {', '.join(SPLITS)}")
    if _one_split(source, columns) and args.split not in ("train", command_parser().get_default("split")):
        raise EvaluateError(f"--split {args.split!r}: {source} is local data of one split (a file, a folder of files, "
                            f"a translation pair's two files or a saved Dataset), read whole whatever the split: leave "
                            f"--split out, or give --split train --eval_size N to score its first N rows")
    drawn = {"size": args.eval_size, "seed": _run_recipe(args.model).get("seed", Recipe.seed)}  # as the run drew it
    streamed = args.eval_size is not None and not embedded and not names_local_data(source, columns)
    try:
        rows = load_text_dataset(source, args.split, columns=columns, dataset_config=args.dataset_config,
                                 streaming=streamed, **(drawn if embedded else {}))
    except UnknownColumnError as error:
        raise UnknownColumnError(f"{error}: name the right one with {flags}") from None
    if streamed:
        rows = datasets.Dataset.from_list(list(rows.take(args.eval_size)), features=rows.features)
    elif args.eval_size is not None and not embedded and args.eval_size < len(rows):
        rows = rows.select(range(args.eval_size))
    if not embedded:
        _say_fewer(args, source, len(rows))
    if note and not embedded:
        _note_training_rows(args, source, len(rows), columns)
    return rows


def _say_fewer(args: argparse.Namespace, source: str, count: int) -> None:
    """Say that `source` holds fewer rows than `--eval_size` (run_glue.py's min() caps them unsaid)."""
    if args.eval_size is not None and count < args.eval_size:
        print(f"--eval_size {args.eval_size}: {source} has only {count} rows, fewer than asked: scoring all {count}",
              flush=True)


def _one_split(source: str, columns=()) -> bool:
    """Whether `source` is local data of one split: a data file, a folder of them, a translation pair's two files for
    `columns` or a saved `Dataset` (not a saved `DatasetDict`, nor a Hub data set or the embedded corpus)."""
    from train.data.files import names_local_data, saved_splits

    return not source.startswith("embedded:") and names_local_data(source, columns) and not saved_splits(source)


def _trained_on(args: argparse.Namespace, source: str, recipe: dict[str, Any], columns) -> str | None:
    """The recipe key that names `source` as the data the run trained on (`train_file`: the same file, resolved as
    the run resolved it, or from here; `dataset`: the same Hub data set, configuration and its train split), or None."""
    from train.data.files import names_local_data, saved_splits

    train_file = recipe.get("train_file")
    if train_file:
        path = Path(source).expanduser()
        if not names_local_data(source, columns) or (saved_splits(source) and args.split != "train"):
            return None
        run = Path(args.model).parent / "run.json"  # the run folder's record holds its inputs resolved
        recorded = json.loads(run.read_text()).get("inputs", {}).get("train_file") if run.is_file() else None
        same = path.resolve() in {Path(train_file).expanduser().resolve(), *([Path(recorded)] if recorded else [])}
        return "train_file" if same else None
    same = (source == recipe.get("dataset") and args.dataset_config == recipe.get("dataset_config")
            and args.split == "train")
    return "dataset" if same else None


def _held_out(recipe: dict[str, Any], source: str, columns) -> int:
    """The first rows of the run's training data it held out to evaluate on: `eval_size` where the data had no
    `validation_split` and no `validation_file` was given (`train.setup.splits.load_splits`), else none."""
    from train.data.files import hub_splits, names_local_data, saved_splits

    if recipe.get("validation_file") or not recipe.get("eval_size"):
        return 0
    local = names_local_data(source, columns)
    splits = saved_splits(source) if local else hub_splits(source, recipe.get("dataset_config"))
    return 0 if splits is None or recipe.get("validation_split", "validation") in splits else recipe["eval_size"]


def _note_training_rows(args: argparse.Namespace, source: str, read: int, columns) -> None:
    """Say once when the rows read to score include rows the run trained on (its data: the first `held` rows held
    out, then the rows it trained on), and how to score the held-out rows alone: a notice, as training figures may be
    wanted."""
    recipe = _run_recipe(args.model)
    key = _trained_on(args, source, recipe, columns)
    held = _held_out(recipe, source, columns) if key else 0
    if key is None or read <= held:
        return
    trained = read - held if recipe.get("train_size") is None else min(read - held, recipe["train_size"])
    advice = (f"its first {held} rows were held out of training: --split train --eval_size {held} scores those alone"
              if held else "it held out none of them")
    print(f"Note: {source} is the data {args.model} was trained on ({key} in its recipe.yaml): {trained} of the "
          f"{read} rows read are rows it trained on, so these figures are training figures; {advice}", flush=True)


def read_from(args: argparse.Namespace, source: str, columns=()) -> dict[str, str]:
    """What results.json and the card record as read: `source` with the split `--split` chose of it, or, for local
    data files and a saved `Dataset`, which are one split whatever `--split` names, `source` alone (its path)."""
    return {"dataset": source, **({} if _one_split(source, columns) else {"split": args.split})}


def model_batch_size(args: argparse.Namespace) -> int:
    """`--batch_size` where Lineage batches the model itself: a number; not given, the run's evaluation batch size (so
    a loss that moves with the batching, question answering's, is the run's); else, or for the harness's `auto`, 32."""
    if args.batch_size is None:
        return _run_recipe(args.model).get("per_device_eval_batch_size", 32)
    return args.batch_size if isinstance(args.batch_size, int) else 32


def evaluate_translation(args: argparse.Namespace) -> dict[str, Any]:
    """A seq2seq model's translations of `--dataset` (default: the embedded corpus's test split)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from train.data.pair_files import pair_columns
    from train.train_translation import pairs

    source = args.dataset or "embedded:translation"
    columns = _pair(args)
    rows = pairs(_rows(args, source, pair_columns(*columns), "--source_column and --target_column (translation.de: "
                       "the entry de of a column translation)"), *columns)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model, revision=args.model_revision, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(args.model, revision=args.model_revision)
    batch = model_batch_size(args)
    scored = score_translator(model.to(device_of(args)), tokenizer, rows, num_beams=args.num_beams,
                              length_penalty=args.length_penalty, max_new_tokens=args.max_new_tokens,
                              batch_size=batch, max_source_length=args.max_seq_length, beam_search=args.beam_search)
    hypotheses = scored.pop("hypotheses")
    if scored["sources_cut"]:
        print(cut_note(source, scored["sources_cut"], scored["sentences"], args.max_seq_length,
                       "--max_seq_length; default: the run's"), flush=True)
    figures = {k: scored[k] for k in ("bleu", "chrf", "exact_match")}
    predicted = [{"row": i, "source": s, "prediction": h, "reference": r}
                 for i, (s, h, r) in enumerate(zip(rows["source"], hypotheses, rows["target"]))]
    return {"scores": {"translation": figures},
            "translation": {**scored, **read_from(args, source, pair_columns(*columns))},
            **({"predictions": predicted} if args.predictions else {})}


def _model_label_ids(rows, names: list[str], column: str, config, source: str):
    """`rows` with the class ids of `names` turned into the model's (`config.label2id`), by name."""
    import datasets

    label2id = {str(k): v for k, v in (config.label2id or {}).items()}
    generic = all(k.startswith("LABEL_") for k in label2id)
    mapping = {}
    for i, name in enumerate(names):
        if name in label2id:
            mapping[i] = label2id[name]
        elif generic and name.isdigit() and int(name) < config.num_labels:
            mapping[i] = int(name)
        else:
            hint = (": integer labels are matched to named classes by name, as their ids may follow another order; "
                    "write the labels as the class names" if name.isdigit() else "")
            raise EvaluateError(f"--dataset {source}: label {name!r} of column {column!r} is no class of the model "
                                f"(its classes: {', '.join(map(str, label2id))}){hint}")

    def convert(value):
        return [mapping.get(v, v) for v in value] if isinstance(value, list) else mapping.get(value, value)

    # The column takes the model's classes, which a test set may hold only some of (a set without 'neutral').
    classes = datasets.ClassLabel(names=[str(config.id2label[i]) for i in range(config.num_labels)])
    features = rows.features.copy()
    features[column] = (datasets.List(classes) if isinstance(features[column], (datasets.List, datasets.Sequence))
                        else classes)
    return rows.map(lambda row: {column: convert(row[column])}, features=features)


def _run_recipe(model: str) -> dict[str, Any]:
    """The recipe a Lineage run trained `model` with (its folder's recipe.yaml); empty for any other model."""
    recipe = Path(model) / "recipe.yaml"
    if not recipe.is_file():
        return {}
    import yaml

    return yaml.safe_load(recipe.read_text()) or {}


def _data_recipe(args: argparse.Namespace) -> dict[str, Any]:
    """The run's recipe, for a `--dataset` of the user's (the data it trained on named its columns and marked its
    unlabelled rows so); empty for the embedded corpus, which has the task's own columns and labels every row."""
    return _run_recipe(args.model) if args.dataset and not args.dataset.startswith("embedded:") else {}


def _columns(args: argparse.Namespace, keys: tuple[str, ...]) -> dict[str, str | None]:
    """Each column flag of `keys` as given, else the run's recipe key (`_data_recipe`)."""
    recipe = _data_recipe(args)
    return {key: getattr(args, key) or recipe.get(key) for key in keys}


def _pair(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """A translation pair's source and target columns (`_columns`)."""
    return tuple(_columns(args, ("source_column", "target_column")).values())


def _public_name(args: argparse.Namespace, report: dict[str, Any], source: str | None) -> str | None:
    """`source` as the card names it (`public_name`), a translation pair by the columns it was read with."""
    from train.data.pair_files import pair_columns

    return public_name(source, pair_columns(*_pair(args)) if "translation" in report else ())


def _trained_task(model: str, fitting: list[str]) -> str | None:
    """The task a Lineage run fine-tuned `model` for (`task` in its recipe), where its head serves it."""
    task = _run_recipe(model).get("task")
    return task if task in fitting else None


def _saved_qa(config: dict[str, Any]) -> dict[str, Any]:
    """The question-answering pipeline's defaults the run saved in the model's config (`task_specific_params`), which
    are lineage evaluate's too: a model from the Hub or copied alone carries them."""
    return ((config.get("task_specific_params") or {}).get("question-answering")) or {}


def _question_length(args: argparse.Namespace, config: dict[str, Any]) -> None:
    """`--max_query_length` and `--doc_stride` as given, else as the run cut its questions and strode (`_saved_qa`:
    `max_question_len`, else BERT's 64; `doc_stride`, else a quarter of a window), refused with `--max_seq_length`
    where the windows cannot step through a context, with advice within the model's positions."""
    from train.run.recipes import Recipe
    from train.setup.splits import question_room_problem

    saved = _saved_qa(config)
    if args.max_query_length is None:
        args.max_query_length = saved.get("max_question_len", Recipe.max_query_length)
    if args.doc_stride is None:
        args.doc_stride = saved.get("doc_stride")
    problem = question_room_problem(args.max_seq_length, args.max_query_length, config.get("max_position_embeddings"),
                                    args.doc_stride)
    if problem:
        flags = "--max_seq_length and --max_query_length" if args.doc_stride is None else (
            "--max_seq_length, --max_query_length and --doc_stride")
        raise EvaluateError(f"{flags} (default: the run's): {problem}")


def _answer_rule(args: argparse.Namespace, source: str, config: dict[str, Any]) -> str:
    """For questions without their answers: sets `--version_2_with_negative`, where not given, as the saved pipeline
    answers (`_saved_qa`: `handle_impossible_answer`), else, for a run that saved none, as it scored its validation data
    (its results.json: `no_answer_*` figures where that data had unanswerable questions), refused where it has no
    figures; what is said of the rule."""
    saved = _saved_qa(config).get("handle_impossible_answer")
    if args.version_2_with_negative is None and saved is not None:
        args.version_2_with_negative, why = saved, "the run's, saved in config.json"
    elif args.version_2_with_negative is None:
        results = Path(args.model) / "results.json"
        figures = json.loads(results.read_text(encoding="utf-8")) if results.is_file() else {}
        if "eval_exact_match" not in figures:
            raise EvaluateError(f"--dataset {source} has no column 'answers', and neither --model's config.json "
                                f"(task_specific_params: handle_impossible_answer) nor its run's validation figures "
                                f"(results.json) say whether its questions may have no answer: give "
                                f"--version_2_with_negative true (SQuAD 2.0: no answer where [CLS] scores higher) or "
                                f"false (every question answered)")
        args.version_2_with_negative = any(key.startswith("eval_no_answer_") for key in figures)
        why = "as on the run's validation data"
    else:
        why = "--version_2_with_negative"
    _no_answer_threshold(args, config, "--version_2_with_negative false answers every question" if why.startswith(
        "--") else f"the rule ({why}) answers every question")
    by = f" by more than {args.null_score_diff_threshold}" if args.null_score_diff_threshold else ""
    return (f"; no answer where [CLS] scores higher{by} ({why})" if args.version_2_with_negative
            else f"; every question answered ({why})")


def _no_answer_threshold(args: argparse.Namespace, config: dict[str, Any], why: str) -> None:
    """`--null_score_diff_threshold` as given, else the run's (`_saved_qa`), else 0; refused as given where
    `--version_2_with_negative` (set) gives no question the empty answer, `why`."""
    if args.null_score_diff_threshold is not None and not args.version_2_with_negative:
        hint = "" if why.startswith("--") else " (or give --version_2_with_negative true with it)"
        raise EvaluateError(f"--null_score_diff_threshold {args.null_score_diff_threshold} shifts the no-answer "
                            f"rule, but {why}: leave it out{hint}")
    if args.null_score_diff_threshold is None:
        args.null_score_diff_threshold = _saved_qa(config).get("null_score_diff_threshold", 0.0)


def _run_padding(args: argparse.Namespace, positions: int | None) -> int | None:
    """The run's `pad_to_multiple_of` (its recipe.yaml; None: none), with which batches are padded as the run padded
    them, refused where a batch of `--max_seq_length`-token rows would be padded beyond the model's `positions`."""
    from train.data.collators import padded_length

    multiple = _run_recipe(args.model).get("pad_to_multiple_of")
    padded = padded_length(args.max_seq_length, multiple)
    if positions and padded > positions:
        raise EvaluateError(f"{MAX_LENGTH} is {args.max_seq_length}: a batch of "
                            f"{args.max_seq_length}-token rows would be padded to {padded} (the run's "
                            f"pad_to_multiple_of {multiple}, its recipe.yaml), beyond --model's {positions} positions; "
                            f"give --max_seq_length at most {positions // multiple * multiple}")
    return multiple


def _unlabelled_refusal(source: str, reference: str, found: list[str], qa: bool) -> str:
    """The refusal of data without the column scored against, `reference` (its other columns `found`): no flag names
    an answers column, so for questions only `--predictions` helps."""
    lacks = f"--dataset {source} has no column {reference!r} (its columns: {', '.join(found)})"
    if qa:
        return (f"{lacks}, so it has no answers to score: give --predictions true to write each question's answer "
                f"alone")
    return (f"{lacks}: name the labels' column with --label_column, or, for data without labels, which has nothing to "
            f"score, give --predictions true to write each row's prediction alone")


def classifier_data(args: argparse.Namespace, architecture: str, family: str, config: dict[str, Any]):
    """(task, encode task, Auto class, columns, rows with the labels as class names or checked scores, the class
    names (None for scores), source, whether it is labelled) of `--dataset`; `args` completed with the run's question
    length, no-answer rule and padding. With `--predictions`, data without its label column gets a stand-in:
    predictions alone."""
    from train import finetune
    from train.data.errors import UnknownColumnError
    from train.data.labels import class_labels, score_labels

    outputs = len(config.get("id2label") or {})
    fitting = [name for name, task in finetune.TASKS.items()  # the head's own task first (finetune.TASKS' order)
               if architecture.endswith(task.auto_class.removeprefix("AutoModel"))
               and (outputs == 1 or not task.scores)]  # scores need a head of one output
    regression = config.get("problem_type") == "regression" and "regression" in fitting  # as finetune saves it
    task = args.task or _trained_task(args.model, fitting) or ("regression" if regression else fitting[0])
    if task not in finetune.TASKS:
        raise EvaluateError(f"--task must be one of {', '.join(finetune.TASKS)}, got {task!r}")
    if task not in fitting:
        head = finetune.TASKS[task].auto_class.removeprefix("AutoModelFor")
        need, has = ((f"a {head} head of one output (num_labels 1)", f" of {outputs} outputs")
                     if finetune.TASKS[task].scores and architecture.endswith(head) else (f"a {head} head", ""))
        raise EvaluateError(f"--task {task!r} needs {need}; --model is a {architecture}{has}: give --task "
                            f"{' or '.join(fitting)}")
    default_data, encode_task, auto_class = (finetune.TASKS[task].default_data, finetune.TASKS[task].encoding,
                                             finetune.TASKS[task].auto_class)
    if family == "gpt" and encode_task != "classification":
        served = ", ".join(name for name, t in finetune.TASKS.items() if t.encoding == "classification")
        raise EvaluateError(f"--task {task!r} needs a BERT model; a GPT model serves {served}")
    ignored = [f"--{flag}" for flag in QA_FLAGS if getattr(args, flag) is not None and encode_task != "qa"]
    if ignored:
        raise EvaluateError(f"{', '.join(ignored)}: read by question answering only, but --task is {task!r} here: "
                            f"leave {'it' if len(ignored) == 1 else 'them'} out")
    if encode_task == "qa":
        _question_length(args, config)
    args.pad_to_multiple_of = _run_padding(args, config.get("max_position_embeddings"))
    text, pair, label = finetune.task_columns(SimpleNamespace(**_columns(args, (
        "text_column", "text_pair_column", "label_column"))), task)
    columns = finetune.read_columns(finetune.TASKS[task], text, pair, label)
    source = args.dataset or default_data
    if source is None:
        raise EvaluateError(f"--task {task!r} has no embedded data: give --dataset (a file of yours, or a Hub dataset "
                            f"with --dataset_config)")
    flags = "--text_column, --text_pair_column and --label_column"
    reference = "answers" if encode_task == "qa" else label  # the column the predictions are scored against
    try:
        rows = _rows(args, source, [c for c in columns if c[0] != reference] if args.predictions else columns, flags)
    except UnknownColumnError:
        if args.predictions or not reference:
            raise
        found = _rows(args, source, [c for c in columns if c[0] != reference], flags, note=False).column_names
        raise EvaluateError(_unlabelled_refusal(source, reference, found, encode_task == "qa")) from None
    if args.predictions and reference and reference not in rows.column_names:  # predictions alone: a stand-in
        rule = _answer_rule(args, source, config) if encode_task == "qa" else ""
        stand_in = ((lambda row: [0] * len(row[text])) if encode_task == "token_classification"
                    else (lambda row: {"text": [], "answer_start": []}) if encode_task == "qa"
                    else (lambda row: 0.0) if finetune.TASKS[task].scores else (lambda row: 0))
        rows = rows.map(lambda row: {reference: stand_in(row)}, keep_in_memory=True)
        print(f"{source}: no column {reference!r}: each row's prediction alone, no figure{rule}", flush=True)
        return task, encode_task, auto_class, (text, pair, label), rows, None, source, False
    if args.predictions and reference:
        rows = _rows(args, source, columns, flags, note=False)  # read again with its labels checked
    if encode_task == "qa":
        told = args.version_2_with_negative is not None
        if not told:
            args.version_2_with_negative = not all(answer["text"] for answer in rows["answers"])
        _no_answer_threshold(args, config, "--version_2_with_negative false answers every question" if told else
                             f"every question of --dataset {source} has an answer, so each is answered")
    if args.skip_unlabeled is None:
        args.skip_unlabeled = bool(_data_recipe(args).get("skip_unlabeled"))
    names = None
    if label and finetune.TASKS[task].scores:
        rows, _ = score_labels(rows, None, label, (source, source), skip_unlabeled=args.skip_unlabeled)
    elif label:
        names, rows, _ = class_labels(rows, None, label, (source, source), skip_unlabeled=args.skip_unlabeled,
                                      allow_single_class=True, training=False)
    return task, encode_task, auto_class, (text, pair, label), rows, names, source, True


def evaluate_classifier(args: argparse.Namespace, architecture: str, family: str,
                        config: dict[str, Any]) -> dict[str, Any]:
    """A classification, NLI, regression, token-classification or QA model on `--dataset`, with finetune's
    metrics."""
    import transformers
    from torch.utils.data import DataLoader

    from train import finetune
    from train.data.collators import PaddingCollator
    from train.run.evaluation import evaluate as evaluation_pass

    task, encode_task, auto_class, (text, pair, label), rows, names, source, labelled = classifier_data(
        args, architecture, family, config)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model, revision=args.model_revision)
    check_sequence_room(args, tokenizer, 2 if pair else 1, f"{task} with a {family} template", argument=MAX_LENGTH)
    model = getattr(transformers, auto_class).from_pretrained(args.model, revision=args.model_revision,
                                                             trust_remote_code=True)
    if names is not None:
        rows = _model_label_ids(rows, names, label, model.config, source)
    data, cut = finetune.encoded(args, tokenizer, task, rows, text, pair, label, source, scored=True)
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    predict, scores = finetune.scoring(finetune.TASKS[task], names)
    answered = None
    if encode_task == "qa":
        data, scores, answered = finetune.answer_metrics(data, rows, args.version_2_with_negative,
                                                         args.null_score_diff_threshold)
    found: dict[str, Any] = {}

    def metrics(predictions: dict[str, Any], eval_loss: float) -> dict[str, float]:
        found.update(predictions)
        return scores(predictions, eval_loss) if labelled else {}
    batch = model_batch_size(args)
    accelerator = accelerator_on(device_of(args))
    loader = DataLoader(data, batch_size=batch, collate_fn=PaddingCollator(tokenizer, args.pad_to_multiple_of))
    model, loader = accelerator.prepare(model, loader)
    figures = evaluation_pass(accelerator, model, loader, predict, metrics)
    predicted = (evaluation_report.row_predictions(found, answered, rows, names, text, labelled) if args.predictions
                 else None)
    return {"scores": {task: {k.removeprefix("eval_"): v for k, v in figures.items()}} if labelled else {},
            "data": {**read_from(args, source), "rows": len(rows),
                     **({"questions_cut": cut} if cut is not None else {}), "task": task,
                     **({"null_score_diff_threshold": args.null_score_diff_threshold}
                        if encode_task == "qa" and args.version_2_with_negative else {}),
                     **({} if labelled else {"labelled": False})},
            **({"predictions": predicted} if predicted is not None else {})}


def evaluate_masked_lm(args: argparse.Namespace) -> dict[str, Any]:
    """A masked LM's pseudo-perplexity on `--text_file`."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from train.data.files import load_text_dataset

    texts = [t for t in load_text_dataset(args.text_file, columns=("text",), text_sample_by="line")["text"]
             if t.strip()]
    texts = texts[:args.eval_size] if args.eval_size else texts
    _say_fewer(args, args.text_file, len(texts))
    model = load_backbone(AutoModelForMaskedLM, args.model,
                          {"revision": args.model_revision, "trust_remote_code": True})
    tokenizer = AutoTokenizer.from_pretrained(args.model, revision=args.model_revision)
    batch = model_batch_size(args)
    figures = pseudo_perplexity(model.to(device_of(args)), tokenizer, texts, max_length=args.max_seq_length,
                                batch_size=batch)
    return {"scores": {"pseudo_perplexity": figures}, "data": {"text_file": args.text_file, "texts": len(texts)}}


def score(args: argparse.Namespace, kind: str, architecture: str, family: str,
          config: dict[str, Any]) -> dict[str, Any]:
    """What the kind of model is scored on (module docstring)."""
    if args.tasks is not None:
        return evaluate_harness(args, kind)
    if kind == "seq2seq":
        return evaluate_translation(args)
    if kind == "classifier":
        return evaluate_classifier(args, architecture, family, config)
    return evaluate_masked_lm(args)


def write_outputs(folder: Path, report: dict[str, Any], baseline: dict[str, Any] | None,
                  predictions: list[dict[str, Any]] | None) -> None:
    """results.json, the plots and the `predictions` files, staged beside `folder` and moved into place."""
    with staged_output(folder, COMMAND) as staging:
        evaluation_report.write_results(staging / "results.json", report)
        if predictions is not None:
            evaluation_report.write_predictions(staging, predictions)
        if report["scores"]:  # none: predictions of unlabelled data alone
            evaluation_report.plot_scores(report["scores"], report["model"], staging / "scores.png", baseline,
                                          report["command"])
        if "translation" in report:
            evaluation_report.plot_bleu_by_length(report["translation"]["bleu_by_length"], report["model"],
                                                  staging / "bleu_by_length.png", baseline, report["command"])


def card_dataset(args: argparse.Namespace, report: dict[str, Any]) -> dict[str, str] | None:
    """The data set of a card's model-index entry as the Hub names one (name, type, config, split: none for a local
    file, `read_from`); None for the harness, whose tasks are their own data."""
    scored = report.get("translation") or report.get("data")
    if scored is None or "dataset" not in scored:
        return None
    name = _public_name(args, report, scored["dataset"])
    return {"name": name, "type": name, **({"config": args.dataset_config} if args.dataset_config else {}),
            **({"split": scored["split"]} if "split" in scored else {})}


def card_settings(args: argparse.Namespace, report: dict[str, Any]) -> dict[str, Any]:
    harness_version = report.get("harness", {}).get("lm_eval_version")
    return {"harness": f"lm-evaluation-harness {harness_version}" if harness_version else None,
            "n-shot": args.num_fewshot, "limit": args.limit, "dataset": _public_name(args, report, args.dataset),
            "config": args.dataset_config, "split": (card_dataset(args, report) or {}).get("split"),
            "text file": Path(args.text_file).name if args.text_file else None,  # no path of this machine
            "date": report["date"][:10]}


def main(argv: Sequence[str] | None = None) -> Path:
    """Run the command; returns the output folder."""
    args = parse_args(argv)
    config = read_model_config(args.model, args.model_revision)
    kind, architecture = model_kind(config, args.model)
    check_lengths(args, config)
    folder = check_arguments(args, kind)
    baseline = evaluation_report.read_baseline(args.compare) if args.compare else None
    family = "gpt" if "Gpt" in architecture or config.get("model_type") in ("gpt2", "openai-gpt") else "bert"
    report = {"model": args.model, "model_revision": args.model_revision, "architecture": architecture,
              "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
              **score(args, kind, architecture, family, config),
              "versions": versions(), "command": command_of(COMMAND, argv)}
    predictions = report.pop("predictions", None)
    if args.write_card and not report["scores"]:
        raise EvaluateError(f"--write_card true: --dataset {args.dataset} has no labels, so nothing is scored (the "
                            f"predictions alone): leave --write_card out")
    write_outputs(folder, report, baseline, predictions)
    if args.write_card:
        card = evaluation_report.write_card(Path(args.model), report["scores"], pipeline_tag(architecture),
                                            card_settings(args, report), card_dataset(args, report))
        print(f"model card: {card}")
    for task, figures in report["scores"].items():
        print(f"{task}: " + ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                                      for k, v in figures.items()))
    print(f"results: {folder / 'results.json'}" + (f"; predictions: {folder / 'predictions.jsonl'}"
                                                     if predictions is not None else ""))
    return folder


if __name__ == "__main__":
    run_script(main)
