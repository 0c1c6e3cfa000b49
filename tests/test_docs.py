"""The documentation (README.md and docs/*.md) is checked like code.

- Every relative link resolves to a file of the repository, and a `#fragment` to a heading of the page it names,
  with GitHub's heading slugs; links to other sites are not followed (the tests are offline).
- Every command the pages name in code exists: `lineage <command>` / `lineage train <script>` through the console
  command's own resolver (`train.cli.resolve`), `python -m train.<module>` (also after `accelerate launch ... -m`)
  as a module of `train/` with a top-level `main`, and every `configs/`, `tests/`, `train/`, `modeling/` file named.
- docs/using.md's in-process tokenizer and LoRA examples run as written, on a tiny model saved where they look.
- The README's two commands are CI's: its install-and-test command is what `.ci/run` runs (`python -m pip` written
  as `pip`), and its install-and-run command installs the same way, without the test extra; CI also runs `ruff check .`.
"""

import ast
import re
from pathlib import Path

import pytest
from conftest import REPO

from train import cli

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# a command begins a code line or span, or follows && ; | or a shell prompt
LINEAGE_COMMAND = re.compile(r"(?:^|&&|;|\||\$)[ \t]*lineage(?:[ \t]+(train)\b)?(?:[ \t]+([A-Za-z][\w-]*))?")
MODULE_COMMAND = re.compile(r"(?<![\w.-])-m[ \t]+train\.([\w.]+)")
REPO_FILE = re.compile(r"(?<![\w./-])((?:configs|tests|train|modeling)/[\w./-]+\.(?:py|yaml|json))\b")


def split_page(text: str) -> tuple[list[str], list[str]]:
    """(prose lines without their inline code, code: every fenced block line and every inline code span)."""
    prose, code, fenced = [], [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif fenced:
            code.append(line)
        else:
            code.extend(span.strip("`") for span in INLINE_CODE.findall(line))
            prose.append(INLINE_CODE.sub("code", line))
    return prose, code


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link syntax reduced to its text, lower case, punctuation dropped, each space a
    hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a page; a repeated heading gets -1, -2, ... as on GitHub."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            base = slug(match.group(2))
            found.add(base if base not in counts else f"{base}-{counts[base]}")
            counts[base] = counts.get(base, 0) + 1
    return found


def broken_links(page: Path, root: Path) -> list[str]:
    """The relative links of `page` that do not resolve inside `root`, each with the reason."""
    prose, _ = split_page(page.read_text(encoding="utf-8"))
    broken = []
    for target in (match for line in prose for match in LINK.findall(line)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if path.startswith("/") or not resolved.is_relative_to(root.resolve()):
            broken.append(f"{target}: leaves the repository")
        elif not resolved.exists():
            broken.append(f"{target}: no such file")
        elif fragment and (resolved.suffix != ".md" or fragment not in anchors(resolved)):
            broken.append(f"{target}: no heading #{fragment} in {resolved.name}")
    return broken


def unknown_commands(code: list[str], root: Path) -> list[str]:
    """The `lineage ...` and `-m train.<module>` commands in `code` that do not exist."""
    unknown = []
    for line in code:
        for train, name in LINEAGE_COMMAND.findall(line):
            if not name:  # `lineage`, `lineage --help`, `lineage train`: the usage, always there
                continue
            words = ["train", name] if train else [name]
            try:
                cli.resolve(words)
            except SystemExit:
                unknown.append("lineage " + " ".join(words))
        for module in MODULE_COMMAND.findall(line):
            source = root / "train" / (module.replace(".", "/") + ".py")
            if not source.is_file() or not any(isinstance(node, ast.FunctionDef) and node.name == "main"
                                               for node in ast.parse(source.read_text(encoding="utf-8")).body):
                unknown.append(f"python -m train.{module}")
        unknown.extend(path for path in REPO_FILE.findall(line) if not (root / path).is_file())
    return unknown


def readme_commands() -> list[str]:
    """The README's install commands: code lines that begin by installing torch."""
    _, code = split_page((REPO / "README.md").read_text(encoding="utf-8"))
    return [line.strip() for line in code if line.strip().startswith("pip install torch")]


def ci_lines() -> list[str]:
    """The command lines of `.ci/run`, comments and shell settings left out."""
    lines = (line.strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith(("#", "set ", "cd "))]


LAYOUT_ENTRY = re.compile(r"[\w.]+(?:/[\w.]+)*(?:/|\.py)")


def layout_paths(page: Path) -> set[str]:
    """The folders and `.py` files that the first code block under a page's `## Layout` names, as paths: a line's
    entries are its first column (before a run of two spaces), separated by commas; an entry ending in `/` is a folder,
    and the entries indented below it lie inside it. A line whose first column is not entries (a description running
    on, `(...)`) names nothing."""
    lines = page.read_text(encoding="utf-8").split("\n## Layout\n", 1)[1].split("```", 2)[1].splitlines()[1:]
    found: set[str] = set()
    folders: list[tuple[int, str]] = []  # (indentation, path) of the folders enclosing the current line
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        entries = [entry.strip() for entry in re.split(r" {2,}", line.strip())[0].split(",") if entry.strip()]
        if not entries or not all(LAYOUT_ENTRY.fullmatch(entry) for entry in entries):
            continue
        while folders and folders[-1][0] >= indent:
            folders.pop()
        parent = folders[-1][1] if folders else ""
        for entry in entries:
            found.add(parent + entry)
        if entries[-1].endswith("/"):
            folders.append((indent, parent + entries[-1]))
    return found


def python_modules(root: Path) -> set[str]:
    """Every module of `modeling/` and `train/` but the packages' `__init__.py`, and every sub-package, as paths."""
    files = [*(root / "modeling").rglob("*.py"), *(root / "train").rglob("*.py")]
    return {path.relative_to(root).as_posix() for path in files if path.name != "__init__.py"} | {
        path.parent.relative_to(root).as_posix() + "/" for path in files if path.name == "__init__.py"}


def test_design_layout_names_every_module():
    """docs/design.md's layout names every module and sub-package of `modeling/` and `train/`, and nothing that is not
    there (`train/configs/`, package data, is a folder without modules)."""
    named = {path for path in layout_paths(REPO / "docs" / "design.md") if path.startswith(("modeling/", "train/"))}
    named -= {"modeling/__init__.py"}  # named for what it does (it registers the families), a package file
    assert sorted(python_modules(REPO) - named) == [], "modules the layout does not name"
    assert sorted(path for path in named if not (REPO / path).exists()) == [], "names in the layout that are not there"


def test_every_recipe_key_is_in_the_training_page():
    """docs/training.md's table of recipe keys names every field of `Recipe`, and no key that is not one (what a key
    takes, in parentheses, is not a key)."""
    from train.run.recipes import valid_keys

    table = (REPO / "docs" / "training.md").read_text(encoding="utf-8").split("\n## Recipes\n", 1)[1]
    table = [line for line in table.split("\n## ", 1)[0].splitlines() if line.startswith("| ")][1:]
    keys = [re.sub(r"\([^()]*\)", "", line).split("|")[2] for line in table]  # the keys column, asides dropped
    named = {span.strip("`") for cell in keys for span in re.findall(r"`\w+`", cell)}
    assert sorted(set(valid_keys()) - named) == [], "recipe keys the table does not name"
    assert sorted(named - set(valid_keys())) == [], "keys in the table that are not recipe keys"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page):
    assert broken_links(page, REPO) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_named_command_exists(page):
    _, code = split_page(page.read_text(encoding="utf-8"))
    assert unknown_commands(code, REPO) == []


def test_the_pages_name_commands_and_link_each_other():
    """The checks above see what the pages hold: the README links every page of docs/, and the pages name commands
    of all three kinds."""
    prose, code = split_page((REPO / "README.md").read_text(encoding="utf-8"))
    linked = {(REPO / target.partition("#")[0]).resolve() for line in prose for target in LINK.findall(line)}
    assert {page.resolve() for page in PAGES[1:]} <= linked
    all_code = [line for page in PAGES for line in split_page(page.read_text(encoding="utf-8"))[1]]
    assert {name for line in all_code for _, name in LINEAGE_COMMAND.findall(line)} >= {
        "pretrain_bert", "finetune", "export", "attention-maps", "benchmark"}
    assert {module for line in all_code for module in MODULE_COMMAND.findall(line)} >= {
        "main_job", "pretrain_gpt", "train_translation", "lineage_experiment"}


def test_readme_commands_are_the_ones_ci_runs():
    """CI's newest job runs the README's test command as written, in a fresh virtual environment (so pip resolves
    today's releases, as a new user's install does); the main job's command is the same install without the test
    extras. The floor job installs under the floor constraints."""
    install_and_run, install_and_test = readme_commands()
    lines = ci_lines()
    newest = [line for line in lines if line.startswith(install_and_test)]
    assert len(newest) == 1 and newest[0].removeprefix(install_and_test).strip() in ("", "|| status=$?")
    assert lines.index(newest[0]) > lines.index('. "$work/newest/bin/activate"')
    steps = install_and_test.split(" && ")
    assert steps[-1] == "python -m pytest -q"
    assert install_and_run.split(" && ") == [*steps[:-2], steps[-2].replace('".[test]"', "."),
                                             "python -m train.main_job"]
    assert any("-c .ci/constraints-floor.txt" in line and '-e ".[test]"' in line for line in lines)


def test_ci_runs_ruff():
    """The newest job runs `ruff check .` after its install (ruff comes with the test extra) and fails the run when it
    finds something."""
    lines = ci_lines()
    assert "ruff check . || status=$?" in lines
    assert lines.index(readme_commands()[1] + " || status=$?") < lines.index("ruff check . || status=$?") < \
        lines.index("deactivate")


def test_readme_is_a_front_door():
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


def python_block(page: Path, heading: str) -> str:
    """The first ```python block of `page` below the heading line `heading`."""
    below = page.read_text(encoding="utf-8").split(f"\n{heading}\n", 1)[1]
    return below.split("```python\n", 1)[1].split("\n```", 1)[0]


def test_using_page_tokenizer_and_lora_examples_run(tmp_path, monkeypatch):
    """docs/using.md's in-process examples run as written on a tiny GPT saved where the page looks for one: the four
    ways of loading a model folder's tokenizer give one tokenizer, and the LoRA example saves an adapter that reloads
    onto the base with the merged model's logits."""
    peft = pytest.importorskip("peft")
    import torch
    from conftest import model_folder

    from modeling import LineageGptForCausalLM

    monkeypatch.chdir(tmp_path)
    saved = model_folder(tmp_path / "outputs" / "gpt-pretrain-tiny", "gpt", LineageGptForCausalLM, 300)
    folder = saved.rename(saved.with_name("model"))
    page = REPO / "docs" / "using.md"

    namespace, tokenizers = {"folder": str(folder)}, []
    for statement in ast.parse(python_block(page, "## Tokenizers beside a model")).body:
        if isinstance(statement, ast.Expr):
            tokenizers.append(eval(compile(ast.Expression(statement.value), "using.md", "eval"), namespace))
        else:
            exec(compile(ast.Module([statement], []), "using.md", "exec"), namespace)
    assert len(tokenizers) == 4 and {type(tokenizer).__name__ for tokenizer in tokenizers} == {"TokenizersBackend"}
    assert len({tuple(tokenizer("Anna was born in Berlin.").input_ids) for tokenizer in tokenizers}) == 1

    namespace = {}
    exec(compile(python_block(page, "## LoRA (peft)"), "using.md", "exec"), namespace)
    merged = namespace["merged"].eval()
    assert type(merged) is LineageGptForCausalLM
    reloaded = peft.PeftModel.from_pretrained(LineageGptForCausalLM.from_pretrained(folder), "my-adapter").eval()
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, merged(ids).logits)


# the checkers themselves, on pages made here


def test_slugs_follow_github():
    assert slug("kill -9") == "kill--9"
    assert slug("Export (torch.export, ONNX)") == "export-torchexport-onnx"
    assert slug("The `lineage` command") == "the-lineage-command"
    assert slug("Thought vector vs. attention: a [link](x.md)") == "thought-vector-vs-attention-a-link"


def test_broken_links_are_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Real heading\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "README.md"
    page.write_text(
        "# Top\n\n"
        "[ok](docs/other.md#real-heading) [ok](docs/other.md#twice-1) [ok](#top) [web](https://example.org/x)\n"
        "[missing](docs/nope.md) [anchor](docs/other.md#unreal) [here](#nowhere) [out](../outside.md)\n"
        "`[in code](docs/nope.md)`\n\n"
        "```\n[in a block](docs/nope.md)\n# not a heading\n```\n"
        "[block heading](#not-a-heading)\n"
    )
    assert broken_links(page, tmp_path) == [
        "docs/nope.md: no such file",
        "docs/other.md#unreal: no heading #unreal in other.md",
        "#nowhere: no heading #nowhere in README.md",
        "../outside.md: leaves the repository",
        "#not-a-heading: no heading #not-a-heading in README.md",
    ]


def test_layout_paths_follow_indentation(tmp_path):
    page = tmp_path / "design.md"
    page.write_text(
        "# Design\n\n## Layout\n\n```\npyproject.toml    one distribution\nmodeling/         the models\n"
        "  layers.py       attention,\n                  feed-forward.py and norms\n  (small siblings)  checks\n"
        "  a.py, b.py,     two\n  c.py\ntrain/            the commands\n  cli.py\n  data/           data\n"
        "    files.py      reading\n  run/\n    engine.py\n  export.py\ntests/\n```\n\n```\nother.py\n```\n")
    assert layout_paths(page) == {
        "modeling/", "modeling/layers.py", "modeling/a.py", "modeling/b.py", "modeling/c.py", "train/", "train/cli.py",
        "train/data/", "train/data/files.py", "train/run/", "train/run/engine.py", "train/export.py", "tests/"}


def test_unknown_commands_are_found():
    _, code = split_page(
        "Run `lineage train nosuch --x 1` or `lineage frobnicate`, not `lineage train finetune`.\n\n"
        "```bash\naccelerate launch -m train.nosuch --recipe configs/recipes/none.yaml\n"
        "python -m train.run.engine\npython -m train.main_job --recipe train/configs/recipes/main-bert-nli.yaml\n"
        "lineage export --model m  # outputs/lineage-experiment is a folder, lineage-bert a model type\n```\n"
    )
    assert unknown_commands(code, REPO) == [
        "lineage train nosuch", "lineage frobnicate", "python -m train.nosuch", "configs/recipes/none.yaml",
        "python -m train.run.engine"]

