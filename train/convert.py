"""Convert a model folder or Hub id between Lineage and its transformers reference class, with its tokenizer.

    python -m train.convert google-bert/bert-base-uncased bert-base-lineage/ --to lineage
    python -m train.convert outputs/main-job/gpt-pretrain/model gpt-as-openai-gpt/ --to transformers
    lineage convert Helsinki-NLP/opus-mt-en-de opus-en-de-lineage/ --to lineage --model_revision main

`SRC` is read as `--model` is everywhere (`train.setup.models`); the classes each way are those of
`modeling.conversion`. The tokenizer is copied unchanged. Both models run on `CHECK_TOKENS` tokens in fp32: the
largest output difference is printed and written into the card, and above 1e-4 nothing is written. A model the
reference cannot express is refused from its config.json, before any weight loads. docs/pretrained.md.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import modeling
from modeling.conversion import reference_config
from train.cli import CommandParser, run_script
from train.run.run_folder import check_writer_output, staged_output
from train.setup import models, run_tokenizer

TARGETS = ("lineage", "transformers")
OLD_FLAGS = {"--revision": "--model_revision"}  # old spelling -> the flag now


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description=__doc__.splitlines()[0], old_flags=OLD_FLAGS)
    parser.add_argument("src", metavar="SRC", help="model folder or Hub id (Lineage or a supported transformers class)")
    parser.add_argument("dst", metavar="DST", help="folder to write (new, empty, or an earlier convert output)")
    parser.add_argument("--to", required=True, choices=TARGETS, help="the implementation to convert to")
    parser.add_argument("--model_revision", default=None, help="Hub branch, tag or commit of SRC")
    parser.add_switch("--overwrite_output_dir", help="replace an earlier output of this command (nothing else)")
    return parser.parse_args(argv)


def convert(source: models.ModelSource, to: str):
    """(converted model, the model it came from, largest output difference), or `ModelSourceError` when `source`
    is already in the `to` implementation or is a preset."""
    if not source.pretrained:
        raise models.ModelSourceError(f"SRC {source.name!r} is a preset, which has no weights to convert")
    if to == "lineage":
        if source.kind != "reference":
            raise models.ModelSourceError(f"SRC {source.name!r} is already a Lineage model; use --to transformers")
        converted, difference = models.convert_checked(source, argument="SRC")
        return converted, source.reference_class, difference
    if source.kind != "lineage":
        raise models.ModelSourceError(f"SRC {source.name!r} is already a transformers {source.reference_class}; "
                                       "use --to lineage")
    check_convertible(source)
    model = models.load_model(source, argument="SRC")
    reference, difference = models.reference_of(model)
    if not difference <= models.CONVERSION_TOLERANCE:
        raise models.ConversionCheckError(
            f"SRC {source.name!r}: the {type(reference).__name__} differs from the Lineage model by {difference:.3g} "
            f"(limit {models.CONVERSION_TOLERANCE:g}); nothing was written")
    return reference, type(model).__name__, difference


def check_convertible(source: models.ModelSource) -> None:
    """Refuse, from the config alone, a Lineage model that no transformers class can hold (no reference class, or
    config fields the reference cannot express, each named with the value it needs)."""
    model_class = getattr(modeling, (source.config.architectures or [""])[0], None)
    if model_class is None:
        return  # `load_model` names the unknown architecture
    try:
        reference_config(model_class, source.config)
    except (TypeError, ValueError) as error:  # no reference class, or settings the reference lacks
        trained = ("" if isinstance(error, TypeError) else " Its weights were trained with these settings; a model "
                   "trained with the reference's values (recipe key model_overrides) converts.")
        raise models.ModelSourceError(
            f"SRC {source.name!r} has no transformers equivalent: {error}{trained} Nothing was loaded or written; "
            "the folder itself loads anywhere with trust_remote_code=True") from None


def card(source: models.ModelSource, model, origin: str, difference: float) -> str:
    where = (f"`{source.repo_id}` (revision {source.revision})" if source.repo_id
             else f"the local folder `{Path(source.name).name}`")  # a card to publish names no path of this machine
    header = f"---\nbase_model: {source.repo_id}\n---\n\n" if source.repo_id else ""
    remote = ", trust_remote_code=True" if type(model).__name__.startswith("Lineage") else ""
    return (f"{header}# {type(model).__name__}\n\nConverted from {where}, a `{origin}`, with `lineage convert` "
            f"(`modeling.conversion`).\n\nParity: on {models.CHECK_TOKENS} tokens in fp32 the largest difference "
            f"between the outputs of the two models was {difference:.3g} (limit {models.CONVERSION_TOLERANCE:g}).\n\n"
            "```python\nfrom transformers import AutoModel, AutoTokenizer\n\n"
            f'model = AutoModel.from_pretrained("path/or/repo-id"{remote})\n'
            'tokenizer = AutoTokenizer.from_pretrained("path/or/repo-id")\n```\n')


def main(argv: Sequence[str] | None = None) -> Path:
    """Run the command; returns the written folder."""
    args = parse_args(argv)
    local = Path(args.src).expanduser().exists()  # else a Hub id: nothing on this machine to keep apart
    check_writer_output(args.dst, "convert", "DST", overwrite=args.overwrite_output_dir,
                        inputs={"SRC": args.src} if local else None)
    dst = Path(args.dst)
    source = models.resolve_model(args.src, args.model_revision, argument="SRC", revision_argument="--model_revision")
    model, origin, difference = convert(source, args.to)
    with staged_output(dst, "convert") as staging:
        model.save_pretrained(staging)
        tokenizer = run_tokenizer.own_tokenizer(source.folder)
        if tokenizer is not None:
            tokenizer.save_pretrained(staging)
        (staging / "README.md").write_text(card(source, model, origin, difference))
    print(f"converted {args.src} ({origin}) -> {dst} ({type(model).__name__}): largest output difference "
          f"{difference:.3g} on {models.CHECK_TOKENS} tokens (fp32, limit {models.CONVERSION_TOLERANCE:g})"
          + ("" if tokenizer is not None else "; SRC has no tokenizer, none copied"))
    return dst


if __name__ == "__main__":
    run_script(main)
