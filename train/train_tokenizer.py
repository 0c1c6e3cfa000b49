"""Train a Lineage tokenizer and save it where ``AutoTokenizer.from_pretrained`` finds it.

    lineage train tokenizer --family bert --vocab_size 8000 --output_dir out/tok-bert
    python -m train.train_tokenizer --family gpt --vocab_size 8000 --dataset corpus.txt --output_dir out/tok-gpt
    python -m train.train_tokenizer --family seq2seq --vocab_size 1000 --dataset pairs.jsonl \\
        --text_column source --text_column target --output_dir out/tok-mt

``--dataset`` takes what ``train.data.files.load_text_dataset`` takes (default ``embedded``: text of every task of the
embedded corpus); every ``--text_column`` is read (a translation tokenizer learns one vocabulary from both sides).
docs/training.md ("Tokenizers").
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence

from train.cli import CommandParser, number, run_script
from train.data.corpus import tokenizer_training_texts
from train.data.files import load_text_dataset
from train.data.tokenization import FAMILIES, canonical_family, train_tokenizer
from train.run.run_folder import check_writer_output, staged_output

# old spelling -> the flag now
OLD_FLAGS = {"--kind": "--family", "--hub_config": "--dataset_config", "--no-lowercase": "--lowercase=false"}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description=__doc__.splitlines()[0], old_flags=OLD_FLAGS)
    parser.add_argument("--family", required=True, help=f"one of {', '.join(FAMILIES)} (or transformer / rnn)")
    parser.add_argument("--vocab_size", type=int, required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_switch("--overwrite_output_dir", help="replace an earlier output of this command (nothing else)")
    parser.add_argument("--dataset", default="embedded", help="file, folder, embedded[:task] or Hub name")
    parser.add_argument("--text_column", action="append", help="column(s) to read (default: text)")
    parser.add_argument("--split", default="train")
    parser.add_argument("--dataset_config", default=None, help="the configuration of a Hub dataset")
    parser.add_switch("--streaming", help="read the dataset lazily")
    parser.add_argument("--max_texts", type=number(int, 1, "a number of rows"), default=None,
                        help="stop after this many rows")
    parser.add_argument("--min_frequency", type=number(int, 0, "a number of occurrences"), default=2)
    parser.add_argument("--model_max_length", type=number(int, 1, "a number of tokens"), default=512)
    parser.add_switch("--lowercase", default=None, help="default: lowercase for bert only")
    parser.add_argument("--seed", type=int, default=0, help="seed of the embedded corpus")
    return parser.parse_args(argv)


class TokenizerArgumentError(ValueError):
    """A `lineage train tokenizer` argument it cannot use."""


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse, before any text is read, what cannot train a tokenizer."""
    try:
        family = canonical_family(args.family)
    except ValueError as error:
        raise TokenizerArgumentError(f"--family: {error}") from None
    if family == "gpt" and args.lowercase:
        raise TokenizerArgumentError("--lowercase: byte-level BPE (gpt) does not normalize text; lowercase the text "
                                     "before training, or leave --lowercase out")


def iter_texts(args: argparse.Namespace) -> Iterator[str]:
    if args.dataset == "embedded":
        yield from tokenizer_training_texts(seed=args.seed, size=args.max_texts)
        return
    columns = args.text_column or ["text"]
    dataset = load_text_dataset(args.dataset, args.split, columns=[(c, "text") for c in columns],
                                streaming=args.streaming, dataset_config=args.dataset_config, seed=args.seed)
    for count, row in enumerate(dataset):
        if args.max_texts is not None and count >= args.max_texts:
            return
        yield from (row[c] for c in columns if row[c])


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    check_arguments(args)
    folder = check_writer_output(args.output_dir, "train_tokenizer", overwrite=args.overwrite_output_dir)
    tokenizer = train_tokenizer(args.family, iter_texts(args), args.vocab_size, min_frequency=args.min_frequency,
                                model_max_length=args.model_max_length, lowercase=args.lowercase,
                                show_progress=False)
    with staged_output(folder, "train_tokenizer") as staging:
        tokenizer.save_pretrained(staging)
    beyond = (f" (more than --vocab_size {args.vocab_size}: a WordPiece or BPE vocabulary keeps every character of "
              f"the text and its special tokens)" if len(tokenizer) > args.vocab_size else "")
    print(f"saved a {args.family} tokenizer with {len(tokenizer)} tokens to {args.output_dir}{beyond}")


if __name__ == "__main__":
    run_script(main)
