"""One vocabulary on every command: flags spelled as the recipe keys are (underscores), the recipe's word for the same
thing (`--output_dir`, `--model_revision`, ...), `lineage train translation` / `tokenizer`; every old spelling still
parses to the same arguments and every old command name still runs, and `--help` shows only the new ones as options."""

import importlib
import re

import pytest
from transformers import AutoTokenizer

from train import attention_maps, benchmark, cli, convert, corpus_benchmark, export, lineage_experiment, train_tokenizer

# command -> (its module, its parser, arguments in the old spelling, the same arguments in the new one)
SPELLINGS = {
    "attention-maps": (attention_maps, attention_maps.parse_args,
                       ["--model", "m", "--revision", "v1", "--text", "a", "--text-pair", "b", "--num-beams", "2",
                        "--max-new-tokens", "5", "--out", "maps", "--overwrite"],
                       ["--model", "m", "--model_revision", "v1", "--text", "a", "--text_pair", "b", "--num_beams", "2",
                        "--max_new_tokens", "5", "--output_dir", "maps", "--overwrite_output_dir"]),
    "benchmark": (benchmark, lambda argv: benchmark.make_parser().parse_args(argv),
                  ["--model", "gpt-tiny", "--revision", "v1", "--task", "mlm", "--sparse-prediction", "--unpad-inputs",
                   "--batch-size", "2", "--seq-len", "8", "--new-tokens", "3", "--peak-tflops", "900", "--dtype",
                   "fp32"],
                  ["--model", "gpt-tiny", "--model_revision", "v1", "--task", "mlm", "--sparse_prediction",
                   "--unpad_inputs", "--batch_size", "2", "--seq_length", "8", "--max_new_tokens", "3",
                   "--peak_tflops", "900", "--mixed_precision", "no"]),
    "convert": (convert, convert.parse_args, ["src", "dst", "--to", "lineage", "--revision=v1"],
                ["src", "dst", "--to", "lineage", "--model_revision=v1"]),
    "corpus-benchmark": (corpus_benchmark, lambda argv: corpus_benchmark.make_parser().parse_args(argv),
                         ["--family", "gpt", "--size-mb", "3", "--unique-mb", "1"],
                         ["--family", "gpt", "--size_mb", "3", "--unique_mb", "1"]),
    "export": (export, export.parse_args, ["--model", "m", "--out=exported", "--revision", "v1"],
               ["--model", "m", "--output_dir=exported", "--model_revision", "v1"]),
    "lineage-experiment": (lineage_experiment, lineage_experiment.parse_args,
                           ["--out", "r", "--budget-seconds", "3", "--train-file", "t.tsv",
                            "--validation-file", "v.tsv"],
                           ["--output_dir", "r", "--max_train_seconds", "3", "--train_file", "t.tsv",
                            "--validation_file", "v.tsv"]),
    "train tokenizer": (train_tokenizer, train_tokenizer.parse_args,
                        ["--kind", "bert", "--vocab_size", "300", "--output_dir", "o", "--hub_config", "en",
                         "--no-lowercase"],
                        ["--family", "bert", "--vocab_size", "300", "--output_dir", "o", "--dataset_config", "en",
                         "--lowercase", "false"]),
}


def flags(argv: list[str]) -> set[str]:
    return {arg.partition("=")[0] for arg in argv if arg.startswith("--")}


def parsed(parse, argv: list[str]) -> dict:
    """The arguments `parse` reads from `argv`, without the command line itself (the experiment keeps it as given)."""
    return {k: v for k, v in vars(parse(argv)).items() if k != "argv"}


@pytest.mark.parametrize("name", list(SPELLINGS))
def test_old_spellings_parse_to_the_same_arguments_as_the_new(name):
    module, parse, old, new = SPELLINGS[name]
    assert flags(old) - flags(new) == set(module.OLD_FLAGS)  # every old spelling of the command is tried here
    assert parsed(parse, old) == parsed(parse, new)
    renamed = [arg for i, arg in enumerate(old) if arg.partition("=")[0] in module.OLD_FLAGS or (
        i > 0 and old[i - 1] in module.OLD_FLAGS and not arg.startswith("-"))]  # the old flags and their values
    assert parsed(parse, [*new, *renamed]) == parsed(parse, new)  # both spellings with the same values: accepted
    assert vars(parse(new)).keys() >= {flag[2:].partition("=")[0] for flag in module.OLD_FLAGS.values()}


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_help_shows_every_flag_with_underscores_and_the_old_names_as_old(name, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # one line per paragraph: no flag broken at a dash
    with pytest.raises(SystemExit):
        cli.main([*name.split(), "--help"])
    options, _, old = capsys.readouterr().out.partition("Old names, still read:")
    assert [flag for flag in re.findall(r"--[a-z][\w-]*", options) if "-" in flag[2:]] == []
    renamed = getattr(importlib.import_module(f"train.{cli.COMMANDS[name].module}"), "OLD_FLAGS", {})
    for old_flag, new_flag in renamed.items():
        assert re.search(rf"{new_flag.partition('=')[0]}\b", options) and f"{old_flag} (now {new_flag})" in old


@pytest.mark.parametrize("parse, switch, rest", [
    (attention_maps.parse_args, "--overwrite_output_dir", ["--model", "m", "--text", "a", "--output_dir", "o"]),
    (lambda argv: benchmark.make_parser().parse_args(argv), "--compile", ["--model", "gpt-tiny", "--task", "mlm"]),
    (train_tokenizer.parse_args, "--streaming", ["--family", "gpt", "--vocab_size", "300", "--output_dir", "o"]),
    (lineage_experiment.parse_args, "--quick", ["--arms", "transformer"]),
])
def test_a_switch_is_on_alone_or_with_true_and_off_with_false_as_in_a_recipe(parse, switch, rest, capsys):
    name = switch[2:]
    assert getattr(parse(rest), name) is False
    assert getattr(parse([*rest, switch]), name) is True
    assert getattr(parse([switch, "true", *rest]), name) is True
    assert getattr(parse([switch, *rest]), name) is True  # the next flag is not its value
    assert getattr(parse([*rest, f"{switch}=false"]), name) is False
    with pytest.raises(SystemExit):
        parse([*rest, switch, "maybe"])
    assert "expected true or false, got 'maybe'" in capsys.readouterr().err


def test_lowercase_is_a_switch_with_no_default():
    base = ["--family", "bert", "--vocab_size", "300", "--output_dir", "o"]
    assert [train_tokenizer.parse_args(base + extra).lowercase for extra in ([], ["--lowercase"], ["--no-lowercase"])] \
        == [None, True, False]


def test_lineage_help_lists_the_scripts_without_the_stutter(capsys):
    cli.main(["--help"])
    training, others = capsys.readouterr().out.split("other commands:")
    assert "\n  translation " in training and "\n  tokenizer " in training
    assert "train_translation" not in training and "train_tokenizer" not in training
    assert others.strip().splitlines()[-1] == ("old names, still run: train train_translation (now train translation), "
                                               "train train_tokenizer (now train tokenizer), "
                                               "lineage-experiment (now experiment)")
    assert "\n  experiment " in others and "\n  lineage-experiment " not in others


@pytest.mark.parametrize("old, new", [("train_translation", "translation"), ("train-translation", "translation"),
                                      ("train_tokenizer", "tokenizer"), ("train-tokenizer", "tokenizer")])
def test_old_script_names_resolve_to_the_same_module_under_the_new_name(old, new):
    module = cli.COMMANDS[f"train {new}"].module
    assert cli.resolve(["train", old, "--x"]) == cli.resolve(["train", new, "--x"]) == (
        module, ["--x"], f"lineage train {new}")
    assert callable(importlib.import_module(f"train.{module}").main)  # python -m train.<module> as before


@pytest.mark.parametrize("old", ["lineage-experiment", "lineage_experiment"])
def test_the_experiment_runs_under_its_old_name_too(old):
    assert cli.resolve([old, "--x"]) == cli.resolve(["experiment", "--x"]) == (
        "lineage_experiment", ["--x"], "lineage experiment")


def test_the_old_command_with_old_flags_still_runs(tmp_path, capsys):
    cli.main(["train", "train_tokenizer", "--kind", "bert", "--vocab_size", "300", "--max_texts", "50",
              "--output_dir", str(tmp_path)])
    assert "saved a bert tokenizer" in capsys.readouterr().out
    assert AutoTokenizer.from_pretrained(tmp_path).mask_token == "[MASK]"


def test_new_flags_renames_flags_only():
    old = {"--out": "--output_dir"}
    assert cli.new_flags(["--out", "o", "--out=p", "--text", "x--out", "--outer", "--", "--out"], old) == [
        "--output_dir", "o", "--output_dir=p", "--text", "x--out", "--outer", "--", "--out"]
