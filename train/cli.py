"""The `lineage` console command: every `python -m train.<module>` under one name.

    lineage --help                                  # the commands, from the table COMMANDS
    lineage train pretrain_bert --recipe bert-pretrain-tiny --max_steps 100
    lineage export --model outputs/bert-finetune-nli-tiny/model --output_dir exported/

The commands are the keys of `COMMANDS` (`lineage train <script>` for the training scripts); each runs its module's
`main(argv)` as `python -m train.<module>` does, and `lineage --help` imports none of them. `OLD_COMMANDS` keeps
earlier names. Flags are spelled as recipe keys; `CommandParser` reads renamed flags' old spellings.
docs/using.md, "The `lineage` command".
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import NamedTuple

from train.run.environment import name_cpu_for_deepspeed


class Command(NamedTuple):
    module: str  # the module of the `train` package whose main(argv) runs the command
    summary: str  # its line in `lineage --help`


COMMANDS: dict[str, Command] = {
    "train main_job": Command("main_job", "the main job: pretrain, fine-tune and translate at small scale, on a CPU "
                                          "in minutes (--quick: about a minute)"),
    "train pretrain_bert": Command("pretrain_bert", "pretrain BERT with masked-LM + next-sentence prediction"),
    "train pretrain_gpt": Command("pretrain_gpt", "pretrain GPT as a causal language model, then sample from it"),
    "train finetune": Command("finetune", "fine-tune BERT or GPT on a downstream task from a saved pretrained model"),
    "train translation": Command("train_translation", "train a Transformer or RNN encoder-decoder translator"),
    "train tokenizer": Command("train_tokenizer", "train a WordPiece, byte-level BPE or seq2seq BPE tokenizer"),
    "attention-maps": Command("attention_maps", "attention maps of one input: PNG heatmaps, raw weights, a web page"),
    "prepare": Command("prepare", "tokenize a pretraining corpus once, with every core, into the store later runs "
                                  "reuse"),
    "benchmark": Command("benchmark", "time training steps and generation of a preset, alone or against transformers"),
    "corpus-benchmark": Command("corpus_benchmark", "time preparing, the first step and memory of pretraining on a "
                                                    "corpus of a given size (prepared, or streamed)"),
    "convert": Command("convert", "convert a model between Lineage and transformers (a folder or Hub id in, a folder "
                                  "out), with its tokenizer and the parity figure"),
    "configs": Command("list_configs", "list the shipped presets, recipes and accelerate configs, or print one's path"),
    "gpu-check": Command("gpu_check", "the GPU proof: GPU tests, benchmarks, every training command and a short "
                                      "pretraining, bounded, into one report (--dry_run true: on the CPU)"),
    "env": Command("env", "print the versions of Python, torch, transformers, accelerate, datasets and tokenizers, "
                          "whether each is a tested release, and the device"),
    "export": Command("export", "export a saved model with torch.export, as ExportedPrograms or as ONNX"),
    "python-docs": Command("python_docs", "write the Python reference manual's topics as a text corpus (the data of "
                                          "recipe relative-gpt-python-docs)"),
    "experiment": Command("lineage_experiment", "the lineage experiment: RNN without and with attention, "
                                                        "Transformer, one budget"),
    "average": Command("average", "average the weights of checkpoints or model folders of one run into a model "
                                  "folder"),
    "evaluate": Command("evaluate", "score a model: lm-evaluation-harness tasks, sacreBLEU and chrF, a data set, "
                                    "pseudo-perplexity; results, plots and (asked) the card"),
    "glue": Command("glue", "fine-tune and score a model on every GLUE task, with the GLUE average"),
}
TRAINING = "train "  # the prefix of the training scripts' commands
# an earlier name of a command -> its name now; the earlier one still runs it
OLD_COMMANDS = {"train train_translation": "train translation", "train train_tokenizer": "train tokenizer",
                "lineage-experiment": "experiment"}


def new_flags(argv: Sequence[str], old_flags: Mapping[str, str]) -> list[str]:
    """`argv` with each old flag of `old_flags` (old -> new; as `--old` or `--old=value`) spelled the new way; what
    follows `--` is left as it is."""
    renamed = list(argv)
    for i, arg in enumerate(renamed):
        if arg == "--":
            break
        name, equals, value = arg.partition("=")
        if name in old_flags:
            renamed[i] = old_flags[name] + equals + value
    return renamed


def truth(value: str) -> bool:
    """A switch's value as a recipe writes it: true or false (also yes / no, on / off, 1 / 0)."""
    answer = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
    if value.lower() not in answer:
        raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")
    return answer[value.lower()]


def number(kind: type[int] | type[float], low: float, what: str, *, above: bool = False) -> Callable[[str], float]:
    """A flag's `type=`: `what` (a noun, "a beam size") read as `kind`, at least `low` (greater than `low` with
    `above`, as seconds or megabytes are) and finite; any other value is a usage error naming the allowed range, as
    argparse's own type errors are (`argument --num_beams: expected a beam size >= 1, got '0'`, exit status 2)."""
    allowed = f"{what} {'>' if above else '>='} {low:g}"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < low or above and value == low:
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}")
        return value
    return parse


class CommandParser(argparse.ArgumentParser):
    """argparse's parser for a command: `old_flags` (old -> new, e.g. `--out` -> `--output_dir`) are read as the new
    ones, left out of the options of `--help` and named below them; `add_switch` adds an on/off flag."""

    def __init__(self, *args, old_flags: Mapping[str, str] | None = None, **kwargs):
        self.old_flags = dict(old_flags or {})
        if self.old_flags:
            old = ", ".join(f"{old} (now {new})" for old, new in self.old_flags.items())
            kwargs["epilog"] = " ".join(filter(None, [kwargs.get("epilog"), f"Old names, still read: {old}."]))
        super().__init__(*args, **kwargs)

    def add_switch(self, name: str, default: bool | None = False, help: str | None = None) -> argparse.Action:
        """A flag that is on when given alone or with true, off with false, as the recipes' booleans are set."""
        return self.add_argument(name, nargs="?", const=True, default=default, type=truth, metavar="true|false",
                                 help=help)

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None):
        args = sys.argv[1:] if args is None else args
        self._refuse_two_spellings(args)
        return super().parse_known_args(new_flags(args, self.old_flags), namespace)

    def _refuse_two_spellings(self, argv: Sequence[str]) -> None:
        """Refuse a renamed flag given in its old and its new spelling with different values (the last would win
        silently); the same value twice is accepted."""
        renamed = {new.partition("=")[0] for new in self.old_flags.values()}
        given: dict[str, list[tuple[str, str, object]]] = {}  # the flag now -> (spelling, words given, value) per use
        for i, arg in enumerate(argv):
            if arg == "--":
                break
            spelling, equals, value = arg.partition("=")
            flag, _, fixed = self.old_flags.get(spelling, spelling).partition("=")  # `--no-x` -> `--x=false`
            if flag not in renamed or flag not in self._option_string_actions:
                continue
            action = self._option_string_actions[flag]
            following = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("-") else None
            if fixed or equals:
                raw, words = fixed or value, arg
            elif action.nargs != 0 and following is not None:
                raw, words = following, f"{arg} {following}"
            else:
                raw, words = None, f"{arg} (alone: {str(action.const).lower()})"
            value = action.const if raw is None else _converted(action, raw)
            given.setdefault(flag, []).append((spelling, words, value))
        for flag, uses in given.items():
            for (spelling, words, value), (other, other_words, other_value) in itertools.combinations(uses, 2):
                if spelling != other and value != other_value:
                    self.error(f"{words} and {other_words} are two spellings of {flag} with different values "
                               f"(the last would win): give {flag} once")


def _converted(action: argparse.Action, raw: str) -> object:
    """`raw` as `action` reads it (its type), to compare two spellings' values; as given when it does not read."""
    try:
        return action.type(raw) if callable(action.type) else raw
    except (TypeError, ValueError, argparse.ArgumentTypeError):
        return raw


def usage() -> str:
    width = max(len(name.removeprefix(TRAINING)) for name in COMMANDS) + 2
    training = [f"  {name.removeprefix(TRAINING):<{width}}{c.summary}" for name, c in COMMANDS.items()
                if name.startswith(TRAINING)]
    others = [f"  {name:<{width}}{c.summary}" for name, c in COMMANDS.items() if not name.startswith(TRAINING)]
    old = ", ".join(f"{old} (now {new})" for old, new in OLD_COMMANDS.items())
    return "\n".join([
        "usage: lineage <command> [arguments]    (lineage <command> --help for its arguments)", "",
        "lineage train <script> [arguments]:", *training, "", "other commands:", *others, "",
        f"old names, still run: {old}", ""])


def _scripts() -> str:
    return ", ".join(name.removeprefix(TRAINING) for name in COMMANDS if name.startswith(TRAINING))


def resolve(argv: Sequence[str]) -> tuple[str, list[str], str]:
    """(module of `train`, its arguments, the command to show in its usage) for a `lineage` command line."""
    command, rest = argv[0], list(argv[1:])
    if command == TRAINING.strip():
        if not rest or rest[0].startswith("-"):
            raise SystemExit(f"lineage train: name a script: {_scripts()}")
        name = TRAINING + rest.pop(0).replace("-", "_")
        name = OLD_COMMANDS.get(name, name)
        if name not in COMMANDS:
            raise SystemExit(f"lineage train: unknown script {name.removeprefix(TRAINING)!r}; scripts: {_scripts()}")
        return COMMANDS[name].module, rest, f"lineage {name}"
    name = command.replace("_", "-")
    name = OLD_COMMANDS.get(name, name)
    if name not in COMMANDS:
        script = TRAINING + command.replace("-", "_")
        script = OLD_COMMANDS.get(script, script)
        if script in COMMANDS:
            raise SystemExit(f"lineage: {command!r} is a training script: lineage {script}")
        choices = ["train"] + [n for n in COMMANDS if not n.startswith(TRAINING)]
        raise SystemExit(f"lineage: unknown command {command!r}; commands: {', '.join(choices)} (see lineage --help)")
    return COMMANDS[name].module, rest, f"lineage {name}"


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command; returns nothing, so that the console script exits with status 0."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help") or argv in (["train"], ["train", "-h"], ["train", "--help"]):
        print(usage())
        return
    module, rest, shown = resolve(argv)
    with _named(shown):
        run_main(importlib.import_module(f"train.{module}").main, rest, shown)


def run_script(main: Callable[[Sequence[str] | None], object]) -> None:
    """`python -m train.<module>` (also under `accelerate launch` or `torchrun`): the module's `main` on the command
    line, its refusals and usage errors printed as `lineage` prints them, named `python -m train.<module>`."""
    spec = sys.modules["__main__"].__spec__
    shown = f"python -m {spec.name}" if spec is not None else sys.argv[0]
    with _named(shown):
        run_main(main, None, shown)


@contextmanager
def _named(shown: str) -> Iterator[None]:
    """The program named `shown` while a command runs: argparse names it in its usage lines
    (`train.run.run_folder.command_line` records it)."""
    program, sys.argv[0] = sys.argv[0], shown
    try:
        yield
    finally:
        sys.argv[0] = program


def run_main(main: Callable[[Sequence[str] | None], object], argv: Sequence[str] | None, shown: str) -> None:
    """Run a command's `main(argv)` as `shown`: a refusal of the input (`user_errors`, or the file and line a streamed
    file's reader failed on) exits with its message alone, status 1, unless LINEAGE_TRACEBACK is set; any other error
    keeps its traceback."""
    name_cpu_for_deepspeed()
    try:
        main(argv)
    except Exception as error:
        traced = os.environ.get("LINEAGE_TRACEBACK")
        error = (None if traced else _streamed_line(error)) or error
        if not isinstance(error, user_errors()) or traced:
            raise
        raise SystemExit(f"{shown}: error: {error}\n(a refusal of the input, before or instead of the work it names; "
                         f"LINEAGE_TRACEBACK=1 shows where it was raised)") from None


def _streamed_line(error: Exception) -> Exception | None:
    """The refusal naming the file and line a streamed file's reader failed on with `error` (`files.stream_refusal`);
    a command that has not imported the data module (every command that reads data does) opened no stream."""
    files = sys.modules.get("train.data.files")
    return files.stream_refusal(error) if files is not None else None


def user_errors() -> tuple[type[Exception], ...]:
    """The errors that refuse a user's input (a file, a recipe key, a folder, a checkpoint): the console command
    prints their message alone, with exit status 1, instead of a traceback."""
    from train.analysis.attention import AttentionInputError
    from train.analysis.evaluation_report import ReportError
    from train.analysis.harness import HarnessError
    from train.corpus_benchmark import CorpusBenchmarkError
    from train.data.batching import EmptyStreamError
    from train.data.corpus import UnknownCorpusTaskError
    from train.data.encoders import LabelAlignmentError, QAAnswerSpanError
    from train.data.errors import DataError, DataFileNotFoundError
    from train.data.token_store import DamagedStoreError
    from train.data.tokenization import (
        CacheFolderError,
        EmptyVocabularyError,
        MissingSpecialTokenError,
        TokenizerMismatchError,
        TokenizerPathError,
        VocabularySizeError,
    )
    from train.evaluate import EvaluateError
    from train.glue import GlueError
    from train.lineage_experiment import ExperimentError
    from train.run.averaging import AveragingError
    from train.run.checkpoints import CheckpointError
    from train.run.distributed import DistributedSetupError
    from train.run.recipes import RecipeError
    from train.run.run_folder import OutputDirError
    from train.train_tokenizer import TokenizerArgumentError

    return (DataError, DataFileNotFoundError, RecipeError, OutputDirError, CheckpointError, CacheFolderError,
            EmptyVocabularyError, TokenizerPathError, MissingSpecialTokenError, VocabularySizeError,
            TokenizerMismatchError, LabelAlignmentError, QAAnswerSpanError, DamagedStoreError, EmptyStreamError,
            UnknownCorpusTaskError, EvaluateError, HarnessError, ReportError, AveragingError, AttentionInputError,
            ExperimentError, DistributedSetupError, TokenizerArgumentError, GlueError, CorpusBenchmarkError)


if __name__ == "__main__":
    main()
