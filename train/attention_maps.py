"""Attention maps of one input from any Lineage model: PNG heatmaps, the raw weights and an interactive page.

    python -m train.attention_maps --model outputs/bert-pretrain-tiny/model --text "the cat sat" --output_dir maps/bert
    python -m train.attention_maps --model outputs/bert-nli/model --text "a man sleeps" --text_pair "he is awake" \\
        --layers 0,1 --heads 0,2 --output_dir maps/nli
    python -m train.attention_maps --model my-marian-as-lineage --text "..." --target "..." --output_dir maps/forced

`--model` is a saved Lineage folder, a Hub id or a supported transformers reference model (converted on load). A
sequence-to-sequence model reads `--text` as the source and forces `--target`, or its own output, through the
decoder. The files written (`train.analysis.attention_plots`) go through a temporary folder, so a failed run leaves
`--output_dir` as it was. docs/using.md, "Attention maps".
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from train.analysis.attention import (
    AttentionInputError,
    collect,
    encode_text,
    is_seq2seq,
    labels,
    load_attention_model,
    load_attention_tokenizer,
    select,
    target_ids,
    tokens,
)
from train.analysis.attention_plots import write_all
from train.cli import CommandParser, number, run_script
from train.run.environment import versions
from train.run.run_folder import check_writer_output, command_of, staged_output

COMMAND = "attention-maps"
OLD_FLAGS = {"--revision": "--model_revision", "--text-pair": "--text_pair", "--num-beams": "--num_beams",
             "--max-new-tokens": "--max_new_tokens", "--out": "--output_dir",
             "--overwrite": "--overwrite_output_dir"}  # old spelling -> the flag now


def index_list(value: str) -> list[int]:
    """`"0,2"` -> [0, 2]: distinct non-negative integers separated by commas."""
    try:
        indices = [int(part) for part in value.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected indices separated by commas such as 0,2, got {value!r}") from None
    if any(i < 0 for i in indices):
        raise argparse.ArgumentTypeError(f"indices count from 0, got {value!r}")
    if len(set(indices)) < len(indices):  # a layer twice would be drawn into one file twice, and counted twice
        raise argparse.ArgumentTypeError(f"expected each index once, got {value!r}")
    return indices


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description=__doc__.splitlines()[0], old_flags=OLD_FLAGS)
    parser.add_argument("--model", required=True, help="saved model folder or Hub id (with its tokenizer)")
    parser.add_argument("--model_revision", default=None, help="Hub branch, tag or commit of --model")
    parser.add_argument("--text", required=True, help="the input (the source of a sequence-to-sequence model)")
    parser.add_argument("--text_pair", default=None, help="second segment (BERT / GPT sentence pairs)")
    parser.add_argument("--target", default=None, help="seq2seq: target text to force (default: generated)")
    parser.add_argument("--layers", type=index_list, default=None, help="layer indices, e.g. 0,2 (default: all)")
    parser.add_argument("--heads", type=index_list, default=None, help="head indices, e.g. 1,3 (default: all)")
    parser.add_argument("--num_beams", type=number(int, 1, "a beam size"), default=1,
                        help="seq2seq generation without --target")
    parser.add_argument("--max_new_tokens", type=number(int, 1, "a number of tokens"), default=None,
                        help="seq2seq generation without --target")
    parser.add_argument("--output_dir", required=True, help="folder to write (new or empty)")
    parser.add_switch("--overwrite_output_dir", help="replace an earlier output of attention-maps")
    return parser.parse_args(argv)


def check_arguments(args: argparse.Namespace) -> None:
    """What can be refused before any model is loaded."""
    for flag, value in (("--text", args.text), ("--text_pair", args.text_pair), ("--target", args.target)):
        if value is not None and not value.strip():
            raise AttentionInputError(f"{flag} is empty; give some text")
    check_writer_output(args.output_dir, COMMAND, overwrite=args.overwrite_output_dir)


def check_task(model, args: argparse.Namespace) -> None:
    seq2seq = is_seq2seq(model)
    if seq2seq and args.text_pair is not None:
        raise AttentionInputError("--text_pair is for BERT / GPT sentence pairs; a sequence-to-sequence model "
                                  "reads --text as its source and --target as its target")
    if not seq2seq and (args.target is not None or args.num_beams != 1 or args.max_new_tokens is not None):
        raise AttentionInputError(f"--target, --num_beams and --max_new_tokens are for sequence-to-sequence models; "
                                  f"{type(model).__name__} reads --text (and --text_pair) only")


def main(argv: Sequence[str] | None = None) -> dict[str, list[Path]]:
    """Run the command; returns the written files by kind (`png`, `npy`, `json`, `html`), at their final paths."""
    args = parse_args(argv)
    check_arguments(args)
    model = load_attention_model(args.model, args.model_revision)
    tokenizer = load_attention_tokenizer(args.model, args.model_revision)
    check_task(model, args)
    inputs = encode_text(model, tokenizer, args.text, args.text_pair)
    decoder_ids, generated = None, False
    if is_seq2seq(model):
        decoder_ids, generated = target_ids(model, tokenizer, inputs, args.target, args.num_beams, args.max_new_tokens)
    maps = select(collect(model, inputs, decoder_ids), args.layers, args.heads)
    command = command_of(COMMAND, argv)
    description = {"command": command, "versions": versions(), "model": args.model,
                   "architecture": type(model).__name__, "text": args.text, "text_pair": args.text_pair,
                   "target": args.target, "target_generated": generated,
                   "always_labelled": [t for t in tokenizer.all_special_tokens if t != tokenizer.unk_token]}
    out = Path(args.output_dir)
    with staged_output(out.resolve(), COMMAND) as staging:
        written = write_all(maps, tokens(tokenizer, inputs, decoder_ids), labels(tokenizer, inputs, decoder_ids),
                            description, staging)
    files: dict[str, list[Path]] = {}
    for path in written:
        files.setdefault(path.suffix.lstrip("."), []).append(out / path.name)
    print(f"wrote {len(written)} files to {out}: " + ", ".join(f"{len(v)} {k}" for k, v in files.items()))
    return files


if __name__ == "__main__":
    run_script(main)
