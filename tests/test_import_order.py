"""The layers of the code import downward only, read from the sources with `ast` (no module is imported).

From the top: the commands (`train/*.py`), `train/analysis`, `train/setup`, `train/run` with `train/metrics` (the
offline metric modules, which import nothing of `train`; the commands and the experiment's analysis load them and hand
the engine a `metrics_fn`), `train/data`, and `modeling`, which imports nothing of `train`. A module may import its
own layer and the layers below it; every import statement counts, at module level or inside a function. The layers
and why: [design](../docs/design.md#layers).
"""

import ast
from pathlib import Path

from conftest import REPO

# (layer, rank): a module may import a module of the same or a lower rank
LAYERS = {"modeling": 0, "train/data": 1, "train/run": 2, "train/metrics": 2, "train/setup": 3,
          "train/analysis": 4, "commands": 5}


def layer_of(module: str, root: Path) -> str | None:
    """The layer of a dotted module name of this repository; None for a module of another distribution."""
    parts = module.split(".")
    if parts[0] == "modeling":
        return "modeling"
    if parts[0] != "train":
        return None
    if len(parts) == 1 or (root / "train" / f"{parts[1]}.py").is_file():
        return "commands"  # `train` itself and the modules directly under it
    return f"train/{parts[1]}"  # a sub-package: a layer, or a package no layer names (reported as such)


def imported_modules(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The dotted names an import statement of a module of `package` reaches: `from x import y` may import the
    module `x.y`, so each name is counted as one."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(anchor + ([node.module] if node.module else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]


def upward_imports(root: Path) -> list[str]:
    """Every import of a module of `modeling/` or `train/` that reaches a higher layer, or a sub-package of `train/`
    that no layer names, as `file:line: ...`."""
    found = []
    sources = sorted([*(root / "modeling").glob("*.py"), *(root / "train").rglob("*.py")])
    for source in sources:
        relative = source.relative_to(root).with_suffix("")
        module = ".".join(relative.parts)
        package = (module if relative.name == "__init__" else module.rpartition(".")[0]).removesuffix(".__init__")
        own = layer_of(module.removesuffix(".__init__"), root)
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"), filename=str(source))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            where = f"{source.relative_to(root).as_posix()}:{node.lineno}"
            reached = {layer_of(target, root): target for target in imported_modules(node, package)}
            for other, target in reached.items():  # each layer once, by the most specific name
                if other is None or other == own:
                    continue
                if own not in LAYERS or other not in LAYERS:
                    unplaced = own if own not in LAYERS else other
                    found.append(f"{where}: {unplaced} is in no layer ({target}); place it in LAYERS")
                elif LAYERS[other] > LAYERS[own]:
                    found.append(f"{where}: {own} imports {other} ({target}), a layer above it")
    return found


def test_layers_import_downward_only():
    assert upward_imports(REPO) == []


def test_every_sub_package_of_train_is_a_layer():
    packages = {f"train/{path.parent.name}" for path in (REPO / "train").glob("*/__init__.py")}
    assert packages == {name for name in LAYERS if name.startswith("train/")}


def test_train_core_is_gone():
    """train/core was split into the layers; nothing may bring it back."""
    assert not (REPO / "train" / "core").exists()


def test_upward_imports_are_found(tmp_path):
    """The checker on a tree made here: downward, same-layer, relative and standard-library imports pass; an upward
    import at module level or in a function, and a sub-package in no layer, are each reported with file and line."""
    files = {
        "modeling/__init__.py": "",
        "modeling/layers.py": "import torch\nfrom .checks import x\n\n\ndef f():\n    from train.data import files\n",
        "train/__init__.py": "",
        "train/finetune.py": "from train.analysis import attention\nfrom train import cli\n",
        "train/cli.py": "import sys\n",
        "train/data/__init__.py": "",
        "train/data/files.py": "from modeling.checks import x\nfrom . import batching\nfrom train.run import engine\n",
        "train/run/__init__.py": "",
        "train/run/engine.py": "from train.metrics import load_metric\nfrom ..setup import models\n",
        "train/extras/__init__.py": "",
        "train/extras/thing.py": "",
        "train/setup/__init__.py": "from train.extras import thing\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert upward_imports(tmp_path) == [
        "modeling/layers.py:6: modeling imports train/data (train.data.files), a layer above it",
        "train/data/files.py:3: train/data imports train/run (train.run.engine), a layer above it",
        "train/run/engine.py:2: train/run imports train/setup (train.setup.models), a layer above it",
        "train/setup/__init__.py:1: train/extras is in no layer (train.extras.thing); place it in LAYERS",
    ]
