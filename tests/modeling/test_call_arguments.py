"""Calls in `modeling/` a reader can check, read from the sources with `ast` (no module is imported): no call passes
more than `MAX_POSITIONAL` positional arguments, and a head calls its base model (`self.<base_model_prefix>`) by
keyword only, as transformers does, so that a reordered forward parameter cannot silently mis-wire it. A starred
argument counts as one. `torch.autograd.Function.apply` takes its inputs positionally only, so its calls are exempt.
"""

import ast
from pathlib import Path

from conftest import REPO

MAX_POSITIONAL = 5


def long_calls(tree: ast.AST) -> list[str]:
    """Every call of `tree` with more than `MAX_POSITIONAL` positional arguments, as `line: callee (count)`."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or len(node.args) <= MAX_POSITIONAL:
            continue
        callee = ast.unparse(node.func)
        if not callee.endswith(".apply"):  # autograd.Function.apply: positional by design
            found.append(f"{node.lineno}: {callee} ({len(node.args)})")
    return found


def base_model_prefixes(trees: list[ast.AST]) -> set[str]:
    """The `base_model_prefix = "..."` names the family classes set."""
    return {node.value.value for tree in trees for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            and any(isinstance(t, ast.Name) and t.id == "base_model_prefix" for t in node.targets)}


def positional_base_calls(tree: ast.AST, prefixes: set[str]) -> list[str]:
    """Every `self.<prefix>(...)` call of `tree` that passes an argument by position, as `line: callee`."""
    return [f"{node.lineno}: {ast.unparse(node.func)}" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "self" and node.func.attr in prefixes]


def modeling_trees() -> dict[Path, ast.AST]:
    return {path: ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for path in sorted((REPO / "modeling").glob("*.py"))}


def test_no_call_in_modeling_passes_more_than_five_positional_arguments():
    found = {path.name: calls for path, tree in modeling_trees().items() if (calls := long_calls(tree))}
    assert not found, f"calls with more than {MAX_POSITIONAL} positional arguments (pass keywords): {found}"


def test_heads_call_their_base_model_by_keyword():
    trees = modeling_trees()
    prefixes = base_model_prefixes(list(trees.values()))
    assert {"bert", "transformer", "model"} <= prefixes  # the checker sees every family's base model
    found = {path.name: calls for path, tree in trees.items() if (calls := positional_base_calls(tree, prefixes))}
    assert not found, f"base models called by position: {found}"


def test_the_checks_catch_planted_calls():
    planted = ast.parse("f(a, b, c, d, e, g)\nf(a, b, c, d, e)\nF.apply(a, b, c, d, e, g)\nf(*xs, a, b, c, d, e)\n"
                        "self.bert(input_ids, mask)\nself.bert(input_ids=ids)\nother.bert(ids)\n")
    assert long_calls(planted) == ["1: f (6)", "4: f (6)"]
    assert positional_base_calls(planted, {"bert"}) == ["5: self.bert"]
