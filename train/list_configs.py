"""List the shipped model presets, recipes and accelerate configs, or print the path of one.

    lineage configs                          # every kind, its names and the folder they are in
    lineage configs recipes                  # the names of one kind (models, recipes, accelerate)
    lineage configs accelerate/fsdp          # the path of one file, for tools that want a path:
    accelerate launch --config_file "$(lineage configs accelerate/fsdp)" -m train.pretrain_gpt ...
    cp "$(lineage configs recipes/gpt-pretrain-tiny)" my-recipe.yaml    # a recipe to edit, then --recipe my-recipe.yaml

They are package data (`train.run.recipes.bundled`): the training scripts take a recipe or a preset by name from any
working directory, so a path is needed only by other programs (`accelerate launch`) or to copy a file and edit it.
"""

from __future__ import annotations

import argparse

from train.cli import run_script
from train.run.recipes import BUNDLED, CONFIGS, bundled


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", help=f"a kind ({', '.join(BUNDLED)}) or kind/name; none: every kind")
    args = parser.parse_args(argv)
    if args.what is None:
        for kind in BUNDLED:
            print(f"{kind} ({CONFIGS / kind}):\n  " + ", ".join(bundled(kind)))
        return
    kind, _, name = args.what.partition("/")
    if kind not in BUNDLED:
        parser.error(f"argument what: unknown kind {kind!r}; kinds: {', '.join(BUNDLED)}")
    found = bundled(kind)
    if not name:
        print("\n".join(found))
        return
    if name.removesuffix(BUNDLED[kind]) not in found:
        parser.error(f"argument what: no {kind} config {name!r}; {kind}: {', '.join(found)}")
    print(found[name.removesuffix(BUNDLED[kind])])


if __name__ == "__main__":
    run_script(main)
