"""The prose of the code stays short and true: docstrings are at most 12% of the lines of `modeling/` and `train/`, a
module docstring runs at most 12 lines (the family files and `layers.py`, which carry the paper notes, 25), and every
backticked `module.name` or `Class.name` in a docstring names something that exists."""

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("modeling", "train")
FILES = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))
SHARE, MODULE_LINES, LONG_MODULE_LINES = 0.12, 12, 25
LONG_MODULES = re.compile(r"modeling/((modeling|configuration)_lineage_\w+|layers)\.py$")
REFERENCE = re.compile(r"`+([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\([^`]*\))?`+")
FILE_SUFFIXES = {"py", "json", "yaml", "yml", "md", "html", "png", "txt", "bin", "safetensors", "csv", "jsonl", "toml",
                 "pt", "gz", "parquet"}
DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def docstrings(tree: ast.Module):
    """`(node, first line, last line, text)` of every module, class and function docstring in `tree`."""
    for node in ast.walk(tree):
        if isinstance(node, DOCUMENTED) and ast.get_docstring(node) is not None:
            expr = node.body[0]
            yield node, expr.lineno, expr.end_lineno, ast.get_docstring(node)


def docstring_share(sources: list[str]) -> float:
    lines = sum(source.count("\n") for source in sources)
    prose = sum(last - first + 1 for source in sources for _, first, last, _ in docstrings(ast.parse(source)))
    return prose / lines


def module_docstring_lines(source: str) -> int:
    return next((last - first + 1 for node, first, last, _ in docstrings(ast.parse(source))
                 if isinstance(node, ast.Module)), 0)


def _modules() -> dict[str, list[str]]:
    """Each module's last name (and dotted name) -> the dotted modules so named, and each class name -> its modules."""
    names: dict[str, list[str]] = {}
    for path in FILES:
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        names.setdefault(dotted.rsplit(".", 1)[-1], []).append(dotted)
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                names.setdefault(node.name, []).append(f"{dotted}:{node.name}")
    return names


def _has(obj, attributes: list[str]) -> bool:
    for name in attributes:
        if not hasattr(obj, name):
            return False
        obj = getattr(obj, name)
    return True


def resolves(reference: str, names: dict[str, list[str]]) -> bool | None:
    """Whether `reference` (`a.b.c`) exists: its longest dotted prefix that is one of our modules, else its first name
    as the last name of one of our modules or classes; None when it names none of ours (`torch.nn`, `self.x`, a file
    name, an installed library's `evaluate.load`)."""
    parts = reference.split(".")
    if parts[-1] in FILE_SUFFIXES:
        return None
    for cut in range(len(parts), 0, -1):
        head = ".".join(parts[:cut])
        if head in PACKAGES or head in names.get(parts[cut - 1], []):
            return _has(importlib.import_module(head), parts[cut:])
    owners = names.get(parts[0])
    if owners is None:
        return None
    classes = [owner for owner in owners if ":" in owner]
    if not classes and importlib.util.find_spec(parts[0]) is not None:
        return None  # an installed library of the same name
    found = []
    for owner in owners:
        module, _, cls = owner.partition(":")
        obj = importlib.import_module(module)
        found.append(_has(getattr(obj, cls) if cls else obj, parts[1:]))
    return any(found)


def unresolved(path: Path, names: dict[str, list[str]]) -> list[str]:
    return [f"{path}:{first}: `{reference}`"
            for _, first, _, text in docstrings(ast.parse(path.read_text()))
            for reference in REFERENCE.findall(text) if resolves(reference, names) is False]


@pytest.mark.parametrize("package", PACKAGES)
def test_docstrings_are_at_most_twelve_percent_of_the_lines(package):
    share = docstring_share([p.read_text() for p in FILES if p.relative_to(ROOT).parts[0] == package])
    assert share <= SHARE, f"docstrings are {share:.1%} of the lines of {package}/ (at most {SHARE:.0%})"


def test_module_docstrings_are_short():
    long = {str(p.relative_to(ROOT)): lines for p in FILES
            if (lines := module_docstring_lines(p.read_text()))
            > (LONG_MODULE_LINES if LONG_MODULES.search(p.as_posix()) else MODULE_LINES)}
    assert not long, f"module docstrings over {MODULE_LINES} lines ({LONG_MODULE_LINES} for the family files): {long}"


def test_every_backticked_name_in_a_docstring_exists():
    names = _modules()
    missing = [line for path in FILES for line in unresolved(path, names)]
    assert not missing, "docstrings name what does not exist:\n" + "\n".join(missing)


def test_the_checks_catch_what_they_are_for(tmp_path):
    names = _modules()
    assert resolves("run_folder.start_run", names) and resolves("Recipe.data_source", names)
    assert resolves("train.run.run_folder.Run.withdraw", names) and resolves("packing.PackedSequences", names)
    assert resolves("run_folder.no_such_function", names) is False
    assert resolves("Recipe.no_such_method", names) is False
    assert resolves("torch.nn.Linear", names) is None and resolves("config.json", names) is None
    planted = tmp_path / "planted.py"
    planted.write_text('"""See `batching.check_stream`.\n' + "more\n" * 12 + '"""\n\n\n'
                       'def f():\n    """`Run.record`"""\n')
    assert module_docstring_lines(planted.read_text()) == 14
    assert [line.split(": ")[-1] for line in unresolved(planted, names)] == ["`batching.check_stream`"]
    assert docstring_share([planted.read_text()]) == 15 / 18
