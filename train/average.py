"""Average the weights of checkpoints or model folders of one run into a loadable model folder (of one checkpoint:
its model folder).

    lineage average outputs/mt/checkpoints/step-300 outputs/mt/checkpoints/step-400 --output_dir outputs/mt-avg
    lineage average outputs/mt/model outputs/mt/checkpoints/step-300 --output_dir outputs/mt-avg

Each input is a checkpoint folder (`<output_dir>/checkpoints/step-N`) or a saved Lineage model folder; all must share
the model config and vocabulary (`train.run.averaging`). The output takes its class, code and tokenizer from the
first model folder among the inputs, else from the run's published `model/`. docs/evaluation.md ("Averaging
checkpoints").
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import yaml

from train.cli import CommandParser, run_script
from train.run.averaging import (
    AveragingError,
    Member,
    average_weights,
    check_same_run,
    checkpoint_member,
    is_checkpoint,
    load_averaged,
)
from train.run.checkpoints import config_identity, vocabulary_identity
from train.run.publish import pipeline_tag
from train.run.run_folder import check_writer_output, staged_output
from train.setup import models, run_tokenizer

COMMAND = "average"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="checkpoint folders (step-N) or model folders")
    parser.add_argument("--output_dir", required=True, help="folder to write (new, empty, or an earlier average)")
    parser.add_switch("--overwrite_output_dir", help="replace an earlier output of this command (nothing else)")
    args = parser.parse_args(argv)
    if len(args.inputs) < 2 and not is_checkpoint(Path(args.inputs[0])):  # one checkpoint: its model folder
        parser.error(f"INPUT: give two or more checkpoints or model folders to average, or one checkpoint to make a "
                     f"model folder of, got {args.inputs[0]!r}")
    folders = [Path(name).expanduser().resolve() for name in args.inputs]
    for i, folder in enumerate(folders):  # one folder twice would weigh it twice and be listed as two inputs
        if folder in folders[:i]:
            parser.error(f"INPUT: {args.inputs[folders.index(folder)]!r} and {args.inputs[i]!r} name the same folder; "
                         "give each checkpoint or model once")
    return args


def folder_member(path: Path, name: str) -> tuple[Member, models.ModelSource]:
    """A saved Lineage model folder as an input, with its source (the template of the output)."""
    source = models.resolve_model(str(path), argument="INPUT")
    if source.kind != "lineage":
        raise AveragingError(f"INPUT {name!r} is a transformers {source.reference_class}, not a Lineage model: "
                             "convert it first (lineage convert ... --to lineage)")
    tokenizer = run_tokenizer.own_tokenizer(path)
    vocabulary = vocabulary_identity(tokenizer) if tokenizer is not None else None
    member = Member(name, sorted(path.glob("*.safetensors")), config_identity(source.config), vocabulary)
    return member, source


def read_inputs(names: list[str]) -> tuple[list[Member], models.ModelSource]:
    """The members in the order given, and the model folder the output is built on (module docstring)."""
    members, template = [], None
    for name in names:
        path = Path(name)
        if not path.is_dir():
            raise AveragingError(f"INPUT {name!r} is no folder: give checkpoint folders (step-N) or model folders")
        if is_checkpoint(path):
            members.append(checkpoint_member(path, name))
            continue
        member, source = folder_member(path, name)
        members.append(member)
        template = template or source
    if template is None:
        published = Path(names[0]).parent.parent / "model"
        if not (published / "config.json").is_file():
            raise AveragingError(
                f"INPUT {names[0]!r}: its run folder holds no published model ({published}) to take the class, code "
                "and tokenizer from; add a model folder of the run to the inputs, or let the run finish")
        member, template = folder_member(published, str(published))
        check_same_run([*members, member])
    else:
        check_same_run(members)
    return members, template


def _whose(count: int) -> str:
    """The weights of `count` inputs, as the card and the log say them."""
    return ("those of one checkpoint of a Lineage run" if count == 1 else
            f"the mean of those of {count} checkpoints or model folders of one Lineage run, tensor by tensor")


def card(model, names: list[str], folder: Path) -> str:
    """The output's model card: Hub metadata, the inputs and how to load it."""
    name = type(model).__name__
    metadata = {"library_name": "transformers", "pipeline_tag": pipeline_tag(name),
                "tags": ["lineage", model.config.model_type, "custom_code", "checkpoint-averaging"]}
    inputs = "\n".join(f"- `{'/'.join(Path(name).parts[-2:])}`" for name in names)  # no path of this machine
    auto = type(model).auto_class_name()
    return (f"---\n{yaml.safe_dump(metadata, sort_keys=False)}---\n\n# {folder.name}\n\nA `{type(model).__name__}` "
            f"({model.config.model_type}) whose weights are {_whose(len(names))}, written by `lineage average`:"
            f"\n\n{inputs}\n\n## Use\n\n```python\n"
            f"from transformers import {auto}, AutoTokenizer\n\n"
            f'model = {auto}.from_pretrained("path/or/repo-id", trust_remote_code=True)\n'
            'tokenizer = AutoTokenizer.from_pretrained("path/or/repo-id")\n```\n')


def main(argv: Sequence[str] | None = None) -> Path:
    """Run the command; returns the written folder."""
    args = parse_args(argv)
    folder = check_writer_output(args.output_dir, COMMAND, overwrite=args.overwrite_output_dir,
                                 inputs={f"INPUT {name!r}": name for name in args.inputs})
    members, template = read_inputs(args.inputs)
    weights = average_weights(members)
    model = models.load_model(template, argument=f"INPUT {template.name!r}")
    load_averaged(model, weights, args.output_dir)
    tokenizer = run_tokenizer.own_tokenizer(template.folder)
    with staged_output(folder, COMMAND) as staging:
        model.save_pretrained(staging)
        if tokenizer is not None:
            tokenizer.save_pretrained(staging)
        (staging / "README.md").write_text(card(model, args.inputs, folder))
    print(f"{'averaged' if len(members) > 1 else 'saved'} {_whose(len(members))} ({', '.join(args.inputs)}) -> "
          f"{folder} ({type(model).__name__})")
    return folder


if __name__ == "__main__":
    run_script(main)
