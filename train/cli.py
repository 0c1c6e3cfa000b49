"""The `lineage` console command: every `python -m train.<command>` under one name.

    lineage --help                                  # the commands found in the train package
    lineage train pretrain_bert --recipe bert-pretrain-tiny --max_steps 100
    lineage train finetune --recipe ... --model outputs/bert-pretrain-tiny/model
    lineage export --model outputs/bert-finetune-nli-tiny/model --out exported/
    lineage attention-maps --model ... --text "the cat sat" --out maps/

The commands are discovered, not listed: each module `train/<name>.py` that defines `main` (read from its source,
without importing it) is one. Those that train something (`main_job`, `finetune`, `pretrain_*`, `train_*`) are
`lineage train <name>`; the others are `lineage <name>` with dashes (`attention_maps` -> `attention-maps`). Every
command runs the module's own `main(argv)` with the rest of the command line, exactly as `python -m` does.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def is_training(name: str) -> bool:
    return name in ("main_job", "finetune") or name.startswith(("pretrain_", "train_"))


def commands() -> dict[str, str]:
    """Module name -> the first line of its docstring, for every module of `train/` with a top-level `main`."""
    found = {}
    for path in sorted(PACKAGE_DIR.glob("*.py")):
        if path.stem.startswith("_") or path.stem == "cli":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body):
            found[path.stem] = ((ast.get_docstring(tree) or "").strip().splitlines() or [""])[0]
    return found


def usage() -> str:
    found = commands()
    training = [f"  {name:<22}{doc}" for name, doc in found.items() if is_training(name)]
    others = [f"  {name.replace('_', '-'):<22}{doc}" for name, doc in found.items() if not is_training(name)]
    return "\n".join([
        "usage: lineage <command> [arguments]    (lineage <command> --help for its arguments)", "",
        "lineage train <script> [arguments]:", *training, "", "other commands:", *others, ""])


def resolve(argv: Sequence[str]) -> tuple[str, list[str], str]:
    """(module name, its arguments, the name to show in its usage) for a `lineage` command line."""
    found = commands()
    command, rest = argv[0], list(argv[1:])
    if command == "train":
        if not rest or rest[0].startswith("-"):
            raise SystemExit("lineage train: name a script: " + ", ".join(n for n in found if is_training(n)))
        name = rest.pop(0).replace("-", "_")
        if name not in found or not is_training(name):
            raise SystemExit(f"lineage train: unknown script {name!r}; scripts: "
                             + ", ".join(n for n in found if is_training(n)))
        return name, rest, f"lineage train {name}"
    name = command.replace("-", "_")
    if name not in found or is_training(name):
        choices = ["train"] + [n.replace("_", "-") for n in found if not is_training(n)]
        raise SystemExit(f"lineage: unknown command {command!r}; commands: {', '.join(choices)} (see lineage --help)")
    return name, rest, f"lineage {command}"


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command; returns nothing, so that the console script exits with status 0 (a command's own results
    are written by the command)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help") or argv in (["train"], ["train", "-h"], ["train", "--help"]):
        print(usage())
        return
    name, rest, shown = resolve(argv)
    module = importlib.import_module(f"train.{name}")
    program, sys.argv[0] = sys.argv[0], shown  # argparse names the command in its usage lines
    try:
        module.main(rest)
    finally:
        sys.argv[0] = program


if __name__ == "__main__":
    main()
