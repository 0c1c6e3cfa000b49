"""The `lineage` console command (train/cli.py): one explicit table of commands, each of which answers `--help`
with its own usage under its `lineage` name and runs its module's own `main(argv)`; unknown commands are named."""

import argparse
import ast
import gzip
import importlib
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import REPO
from transformers import AutoTokenizer

from train import cli
from train.run import run_folder


def modules_with_main() -> set[str]:
    """The modules of train/ that define a top-level main(), read independently of cli.py."""
    names = set()
    for path in (REPO / "train").glob("*.py"):
        tree = ast.parse(path.read_text())
        if path.stem != "cli" and any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
            names.add(path.stem)
    return names


def test_the_table_names_every_command_module_once():
    modules = [command.module for command in cli.COMMANDS.values()]
    assert sorted(modules) == sorted(modules_with_main())  # a new command module needs its row, a row its module
    assert {"main_job", "pretrain_bert", "pretrain_gpt", "finetune", "train_translation", "train_tokenizer",
            "export", "list_configs"} <= set(modules)


def test_help_lists_every_command(capsys):
    cli.main(["--help"])
    training, others = capsys.readouterr().out.split("other commands:")
    assert "lineage train <script>" in training
    for name, command in cli.COMMANDS.items():
        if name.startswith("train "):
            assert f"\n  {name.removeprefix('train ')} " in training and command.summary in training
        else:
            assert f"\n  {name} " in others and command.summary in others


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_command_answers_help_with_its_own_usage(name, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([*name.split(), "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: lineage {name} ")


def test_console_script_is_declared_and_runs_from_an_empty_folder(tmp_path):
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"lineage": "train.cli:main"}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    run = lambda *argv: subprocess.run([sys.executable, "-m", "train.cli", *argv], cwd=tmp_path, env=env,  # noqa: E731
                                       capture_output=True, text=True, timeout=120)
    result = run("--help")
    assert result.returncode == 0 and "lineage train <script>" in result.stdout and "export" in result.stdout
    fsdp = run("configs", "accelerate/fsdp")
    assert fsdp.returncode == 0 and Path(fsdp.stdout.strip()).read_text().count("distributed_type: FSDP") == 1
    assert list(tmp_path.iterdir()) == []  # nothing written to the working directory


def test_configs_lists_kinds_and_names_and_refuses_unknown_ones(capsys):
    cli.main(["configs"])
    listing = capsys.readouterr().out
    assert "models (" in listing and "bert-tiny" in listing and "recipes (" in listing and "fsdp_cpu" in listing
    cli.main(["configs", "recipes"])
    assert "gpt-pretrain-tiny" in capsys.readouterr().out.split()
    cli.main(["configs", "models/gpt-tiny.json"])
    assert '"model_type": "lineage-gpt"' in Path(capsys.readouterr().out.strip()).read_text()
    with pytest.raises(SystemExit):
        cli.main(["configs", "recipe/gpt-pretrain-tiny"])
    assert "unknown kind 'recipe'; kinds: models, recipes, accelerate" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["configs", "accelerate/tpu"])
    assert "no accelerate config 'tpu'; accelerate: cpu, deepspeed_zero2" in capsys.readouterr().err


def test_subcommands_call_the_modules_own_main(monkeypatch):
    from train import export, finetune

    calls = []
    monkeypatch.setattr(export, "main", lambda argv: calls.append(("export", argv)))
    monkeypatch.setattr(finetune, "main", lambda argv: calls.append(("finetune", argv)))
    cli.main(["export", "--model", "m", "--output_dir", "o"])
    cli.main(["train", "finetune", "--recipe", "r.yaml", "--max_steps", "2"])
    assert calls == [("export", ["--model", "m", "--output_dir", "o"]),
                     ("finetune", ["--recipe", "r.yaml", "--max_steps", "2"])]


def test_resolve_accepts_dashes_and_underscores():
    assert cli.resolve(["train", "main-job", "--quick"]) == ("main_job", ["--quick"], "lineage train main_job")
    assert cli.resolve(["train", "translation"]) == ("train_translation", [], "lineage train translation")
    assert cli.resolve(["attention_maps", "--text", "a"]) == ("attention_maps", ["--text", "a"],
                                                              "lineage attention-maps")


def test_train_tokenizer_through_the_command(tmp_path, capsys):
    cli.main(["train", "tokenizer", "--family", "bert", "--vocab_size", "300", "--max_texts", "50",
              "--output_dir", str(tmp_path)])
    assert "saved a bert tokenizer" in capsys.readouterr().out
    assert AutoTokenizer.from_pretrained(tmp_path).mask_token == "[MASK]"


def test_commands_return_nothing_so_the_console_script_exits_with_status_zero(monkeypatch):
    """setuptools' wrapper runs `sys.exit(main())`: a command's results returned there would exit with status 1."""
    from train import export

    monkeypatch.setattr(export, "main", lambda argv: {"model": {"file": "model.pt2"}})
    assert cli.main(["export", "--model", "m", "--output_dir", "o"]) is None


def test_unknown_commands_are_named():
    with pytest.raises(SystemExit, match="unknown command 'serve'; commands: train, attention-maps, .*export"):
        cli.main(["serve"])
    with pytest.raises(SystemExit, match="unknown script 'pretrain_t5'; scripts: main_job, pretrain_bert"):
        cli.main(["train", "pretrain_t5"])
    with pytest.raises(SystemExit, match="name a script: main_job, pretrain_bert"):
        cli.main(["train", "--max_steps", "2"])
    with pytest.raises(SystemExit, match="lineage: 'finetune' is a training script: lineage train finetune"):
        cli.main(["finetune"])
    with pytest.raises(SystemExit, match="'train_translation' is a training script: lineage train translation"):
        cli.main(["train_translation"])


@pytest.mark.parametrize("argv, message", [
    (["evaluate", "--model", "{tmp}", "--output_dir", "{tmp}/out"], "lineage evaluate: error: --model '{tmp}' is not"),
    (["evaluate", "--model", "me/absent-model", "--output_dir", "{tmp}/out"], "lineage evaluate: error: --model 'me/"),
    (["average", "nowhere", "{tmp}/a", "--output_dir", "{tmp}/out"], "lineage average: error: INPUT 'nowhere' is no"),
    (["train", "pretrain_gpt", "--recipe", "nope"], "lineage train pretrain_gpt: error: recipe 'nope' is neither"),
    (["train", "pretrain_gpt", "--recipe", "gpt-pretrain-tiny", "--dataset", "embedded:poetry", "--output_dir",
      "{tmp}/run"], "lineage train pretrain_gpt: error: unknown embedded corpus task 'poetry'"),
    (["corpus-benchmark", "--family", "gpt", "--size_mb", "1", "--stages", "warm", "--work", "{tmp}/out"],
     "lineage corpus-benchmark: error: --stages: unknown stage 'warm'"),
])
def test_the_refusals_of_evaluate_average_a_recipe_name_and_the_embedded_corpus_are_messages(argv, message, tmp_path,
                                                                                              monkeypatch):
    """These printed a traceback until their errors joined `cli.user_errors` (docs/using.md: a refused input is its
    message alone, exit status 1); corpus-benchmark's printed its message without the command's name."""
    monkeypatch.delenv("LINEAGE_TRACEBACK", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a").mkdir()
    with pytest.raises(SystemExit) as refused:
        cli.main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert str(refused.value).startswith(message.replace("{tmp}", str(tmp_path)))
    assert not (tmp_path / "out").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("extra, message", [
    (["--family", "roberta"], "--family: unknown tokenizer family 'roberta'; choose one of bert, gpt, seq2seq"),
    (["--family", "gpt", "--lowercase"], "--lowercase: byte-level BPE (gpt) does not normalize text"),
])
def test_the_tokenizer_commands_refusals_come_before_any_text_is_read(extra, message, tmp_path, monkeypatch):
    """These were tracebacks (a ValueError, or the tokenizers library's OverflowError), or with --model_max_length
    a saved tokenizer that could not truncate."""
    monkeypatch.delenv("LINEAGE_TRACEBACK", raising=False)
    argv = ["train", "tokenizer", "--family", "bert", "--vocab_size", "100", "--output_dir", str(tmp_path / "out"),
            "--dataset", str(tmp_path / "nowhere.txt")]
    with pytest.raises(SystemExit) as refused:
        cli.main([*argv, *extra])
    assert str(refused.value).startswith(f"lineage train tokenizer: error: {message}"), str(refused.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, flag, allowed", [
    (["evaluate", "--model", "m", "--output_dir", "{tmp}/out", "--num_beams", "0"], "--num_beams", ">= 1"),
    (["benchmark", "--model", "gpt-tiny", "--task", "causal-lm", "--steps", "0"], "--steps", ">= 1"),
    (["benchmark", "--model", "gpt-tiny", "--task", "causal-lm", "--peak_tflops", "nan"], "--peak_tflops", "> 0"),
    (["gpu-check", "--output_dir", "{tmp}/out", "--budget_seconds", "0"], "--budget_seconds", "> 0"),
    (["experiment", "--output_dir", "{tmp}/out", "--max_train_seconds", "0"], "--max_train_seconds", "> 0"),
    (["experiment", "--output_dir", "{tmp}/out", "--max_train_seconds", "inf"], "--max_train_seconds", "> 0"),
    (["attention-maps", "--model", "m", "--text", "a", "--output_dir", "{tmp}/out", "--num_beams", "0"],
     "--num_beams", ">= 1"),
    (["attention-maps", "--model", "m", "--text", "a", "--output_dir", "{tmp}/out", "--max_new_tokens", "-3"],
     "--max_new_tokens", ">= 1"),
    (["train", "tokenizer", "--family", "bert", "--vocab_size", "100", "--output_dir", "{tmp}/out", "--max_texts", "0"],
     "--max_texts", ">= 1"),
    (["train", "tokenizer", "--family", "bert", "--vocab_size", "100", "--output_dir", "{tmp}/out",
      "--min_frequency", "-1"], "--min_frequency", ">= 0"),
    (["train", "tokenizer", "--family", "bert", "--vocab_size", "100", "--output_dir", "{tmp}/out",
      "--model_max_length", "-4"], "--model_max_length", ">= 1"),
    (["corpus-benchmark", "--family", "gpt", "--work", "{tmp}/out", "--size_mb", "0"], "--size_mb", "> 0"),
    (["corpus-benchmark", "--family", "gpt", "--work", "{tmp}/out", "--size_mb", "1", "--num_proc", "0"],
     "--num_proc", ">= 1"),
])
def test_a_flags_value_out_of_its_range_is_a_usage_error_of_every_command(argv, flag, allowed, tmp_path, capsys):
    """docs/using.md: a value a flag cannot take is argparse's usage error (usage line, message naming the flag and
    its range, exit status 2) in every command, before any work; experiment, attention-maps, train tokenizer and
    corpus-benchmark refused these as inputs, with status 1."""
    with pytest.raises(SystemExit) as refused:
        cli.main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    error = capsys.readouterr().err
    assert refused.value.code == 2
    assert error.startswith("usage: lineage ") and f"error: argument {flag}: expected " in error
    assert f" {allowed}, got '{argv[-1]}'" in error
    assert not (tmp_path / "out").exists()


def test_python_m_names_itself_in_a_usage_error(tmp_path):
    """`python -m train.<module>` prints argparse's usage error under the name it was run by, as `lineage` does
    (before: `usage: train_tokenizer.py ...`)."""
    done = subprocess.run([sys.executable, "-m", "train.train_tokenizer", "--family", "bert", "--vocab_size", "100",
                           "--output_dir", str(tmp_path / "out"), "--max_texts", "0"],
                          capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2 and done.stderr.startswith("usage: python -m train.train_tokenizer ")
    assert "python -m train.train_tokenizer: error: argument --max_texts: expected " in done.stderr


def test_a_number_flag_takes_its_bound_and_refuses_what_lies_beyond_it():
    at_least, above = cli.number(int, 1, "a count"), cli.number(float, 0, "seconds", above=True)
    assert at_least("1") == 1 and type(at_least("1")) is int and above("1e-9") == 1e-9
    for parse, text in ((at_least, "0"), (at_least, "1.5"), (above, "0"), (above, "-inf"), (above, "nan")):
        with pytest.raises(argparse.ArgumentTypeError, match=f"got '{text}'"):
            parse(text)


def test_a_refused_input_is_its_message_not_a_traceback(tmp_path, monkeypatch):
    """`lineage <command>` prints a refusal of the input (here a folder of the user's files) as one message with exit
    status 1; LINEAGE_TRACEBACK=1 raises it with its traceback; a bug (any other error) keeps its traceback."""
    (tmp_path / "report.md").write_text("mine")
    monkeypatch.delenv("LINEAGE_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as refused:
        cli.main(["experiment", "--output_dir", str(tmp_path)])
    message = str(refused.value)
    assert message.startswith("lineage experiment: error: --output_dir") and "report.md" in message
    monkeypatch.setenv("LINEAGE_TRACEBACK", "1")
    with pytest.raises(run_folder.OutputDirError):
        cli.main(["experiment", "--output_dir", str(tmp_path)])
    monkeypatch.delenv("LINEAGE_TRACEBACK")
    monkeypatch.setattr(importlib.import_module("train.lineage_experiment"), "main", lambda argv: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        cli.main(["experiment"])
    assert (tmp_path / "report.md").read_text() == "mine"


@pytest.mark.parametrize("name, content, message", [
    ("a.txt.gz", gzip.compress("Ein Text.\nCafé au lait.\n".encode("latin-1")),
     r"a\.txt\.gz: line 2: not valid UTF-8 \(byte 0xe9"),
    ("a.jsonl", b'{"text": "A document."}\n{"text": "broken\n', r"a\.jsonl: line 2: not valid JSON"),
    ("a.tsv", b"source\ttarget\none\teins\ntwo\tzwei\textra\n", r"a\.tsv: line 3: 3 fields where the header"),
])
def test_a_streamed_files_bad_line_is_a_refusal_naming_it(tmp_path, monkeypatch, name, content, message):
    """A stream is read as the run trains, by datasets' readers, whose errors name no file: the command reads the
    streamed files again and refuses the first bad line as the in-memory checks do, not with a reader's traceback."""
    monkeypatch.delenv("LINEAGE_TRACEBACK", raising=False)
    (tmp_path / name).write_bytes(content)
    script = ["translation", "--recipe", "transformer-translation-tiny"] if name.endswith(".tsv") else [
        "pretrain_gpt", "--recipe", "gpt-pretrain-tiny"]
    with pytest.raises(SystemExit) as refused:
        cli.main(["train", *script, "--train_file", str(tmp_path / name), "--streaming", "true", "--max_steps", "2",
                  "--output_dir", str(tmp_path / "run")])
    assert re.search(rf"^lineage train {script[0]}: error: .*{message}", str(refused.value)), str(refused.value)


def run_module(module: str, *argv: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`python -m train.<module> argv` from `cwd`, as `accelerate launch -m` runs a script in each process."""
    environ = {k: v for k, v in os.environ.items() if k not in ("LINEAGE_TRACEBACK", "DS_ACCELERATOR")}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", f"train.{module}", *argv], cwd=cwd, env={**environ, **env},
                          capture_output=True, text=True, timeout=300)


def test_every_command_module_runs_its_main_through_run_script():
    """`python -m train.<module>` refuses as `lineage` does only through `cli.run_script`, so each module with a main
    ends with that call."""
    for name in modules_with_main():
        tree = ast.parse((REPO / "train" / f"{name}.py").read_text())
        entries = [ast.unparse(n) for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
        assert entries == ["if __name__ == '__main__':\n    run_script(main)"], name


def test_python_dash_m_prints_a_refused_input_as_its_message_alone(tmp_path):
    """Under `python -m` (and so under `accelerate launch -m` and `torchrun -m`) a refused input is its message alone,
    exit status 1, named by the module; LINEAGE_TRACEBACK=1 adds the traceback. They printed the traceback."""
    refused = run_module("pretrain_gpt", "--recipe", "nope", cwd=tmp_path)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith("python -m train.pretrain_gpt: error: recipe 'nope' is neither a file nor")
    traced = run_module("pretrain_gpt", "--recipe", "nope", cwd=tmp_path, LINEAGE_TRACEBACK="1")
    assert traced.returncode == 1 and "Traceback" in traced.stderr
    assert "RecipeNotFoundError: recipe 'nope'" in traced.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_command_that_saves_a_model_on_a_cpu_keeps_deepspeed_quiet(tmp_path):
    """transformers' `save_pretrained` asks DeepSpeed for its accelerator wherever DeepSpeed is installed; on a CPU it
    warned that it picked the CPU (seen in `lineage average`), until every command named the CPU for it."""
    pytest.importorskip("deepspeed", reason="the warning is DeepSpeed's (in the test extra)")
    from modeling import LineageGptConfig, LineageGptForCausalLM

    config = LineageGptConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                              intermediate_size=32, max_position_embeddings=16)
    for name in ("a", "b"):
        LineageGptForCausalLM(config).save_pretrained(tmp_path / name)
    result = run_module("average", "a", "b", "--output_dir", "avg", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "avg" / "model.safetensors").is_file()
    assert "accelerator" not in result.stderr.lower()
