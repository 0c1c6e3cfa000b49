"""The `lineage` console command (train/cli.py): help lists every command module of `train/`, a subcommand runs
that module's own `main(argv)`, unknown commands are named."""

import ast
import subprocess
import sys
import tomllib

import pytest
from conftest import REPO
from transformers import AutoTokenizer

from train import cli


def command_modules() -> list[str]:
    """The modules of train/ that define a top-level main(), read independently of cli.py."""
    names = []
    for path in sorted((REPO / "train").glob("*.py")):
        tree = ast.parse(path.read_text())
        if path.stem != "cli" and any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
            names.append(path.stem)
    return names


def test_help_lists_every_command(capsys):
    cli.main(["--help"])
    text = capsys.readouterr().out
    training, others = text.split("other commands:")
    modules = command_modules()
    assert {"pretrain_bert", "pretrain_gpt", "finetune", "train_translation", "train_tokenizer", "main_job",
            "export"} <= set(modules)
    for name in modules:
        if cli.is_training(name):
            assert f"\n  {name} " in training
        else:
            assert f"\n  {name.replace('_', '-')} " in others
    assert "lineage train <script>" in training


def test_console_script_is_declared_and_runs_as_a_module():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"lineage": "train.cli:main"}
    result = subprocess.run([sys.executable, "-m", "train.cli", "--help"], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and "lineage train <script>" in result.stdout and "export" in result.stdout


def test_subcommands_call_the_modules_own_main(monkeypatch):
    from train import export, finetune

    calls = []
    monkeypatch.setattr(export, "main", lambda argv: calls.append(("export", argv)))
    monkeypatch.setattr(finetune, "main", lambda argv: calls.append(("finetune", argv)))
    cli.main(["export", "--model", "m", "--out", "o"])
    cli.main(["train", "finetune", "--recipe", "r.yaml", "--max_steps", "2"])
    assert calls == [("export", ["--model", "m", "--out", "o"]), ("finetune", ["--recipe", "r.yaml", "--max_steps", "2"])]


def test_train_tokenizer_through_the_command(tmp_path, capsys):
    cli.main(["train", "train-tokenizer", "--kind", "bert", "--vocab_size", "300", "--max_texts", "50",
              "--output_dir", str(tmp_path)])
    assert "saved a bert tokenizer" in capsys.readouterr().out
    assert AutoTokenizer.from_pretrained(tmp_path).mask_token == "[MASK]"


def test_commands_return_nothing_so_the_console_script_exits_with_status_zero(monkeypatch):
    """setuptools' wrapper runs `sys.exit(main())`: a command's results returned there would exit with status 1."""
    from train import export

    monkeypatch.setattr(export, "main", lambda argv: {"model": {"file": "model.pt2"}})
    assert cli.main(["export", "--model", "m", "--out", "o"]) is None


def test_unknown_commands_are_named():
    with pytest.raises(SystemExit, match="unknown command 'serve'; commands: train, .*export"):
        cli.main(["serve"])
    with pytest.raises(SystemExit, match="unknown script 'pretrain_t5'; scripts: finetune, main_job, pretrain_bert"):
        cli.main(["train", "pretrain_t5"])
    with pytest.raises(SystemExit, match="lineage: unknown command 'finetune'"):
        cli.main(["finetune"])  # a training script is reached through `lineage train`
