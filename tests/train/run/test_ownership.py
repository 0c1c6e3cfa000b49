"""Every command that writes owns only what it wrote (issue 39): run into a folder (or onto a file) of the user's, it
is refused before any work, naming what is in the way, and every byte stays; run into its own earlier output, it is
refused without its overwrite flag and replaces that output with it, leaving no hidden folder behind; an overwrite
that stops or is killed puts the earlier output back. Files and folders take the user's umask.

One table (`COMMANDS`) holds every command that takes an output folder or file; the main job's stages and the
corpus benchmark's timed subprocesses are stubbed (their folder rule is the command's own, around them), everything
else runs at its smallest settings.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import preset

import modeling
from train import (
    attention_maps,
    average,
    benchmark,
    convert,
    corpus_benchmark,
    evaluate,
    export,
    finetune,
    lineage_experiment,
    main_job,
    prepare,
    pretrain_bert,
    pretrain_gpt,
    python_docs,
    train_tokenizer,
    train_translation,
)
from train.corpus_benchmark import CorpusBenchmarkError
from train.data.corpus import tokenizer_training_texts
from train.data.tokenization import config_kwargs_from_tokenizer
from train.data.tokenization import train_tokenizer as trained_tokenizer
from train.run import run_folder
from train.run.run_folder import ASIDE, OUTPUT_RECORD, OutputDirError

torch.set_num_threads(1)
TINY = ["--progress_bar", "false", "--report_to", "none", "--max_steps", "1", "--train_size", "24", "--eval_size", "8",
        "--tokenizer_vocab_size", "300"]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A saved tiny BERT with its tokenizer: what export, convert and attention-maps read."""
    tokenizer = trained_tokenizer("bert", tokenizer_training_texts(size=200), 300, model_max_length=64)
    folder = tmp_path_factory.mktemp("bert")
    modeling.LineageBertForMaskedLM(preset("bert-tiny", **config_kwargs_from_tokenizer(tokenizer, "bert"))
                                    ).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def stub_main_job(monkeypatch) -> None:
    monkeypatch.setattr(main_job, "run_job", lambda args: (Path(args.output_dir) / "summary.md").write_text("job"))


def stub_corpus_benchmark(monkeypatch) -> None:
    monkeypatch.setattr(corpus_benchmark, "run_stage", lambda *args, **kwargs: {"seconds": 1.0, "peak_anon_mib": 1.0})


def valued(flags: tuple[str, ...]) -> list[str]:
    """`flags` as a command that takes `--key value` reads them: the overwrite switch alone as `... true`."""
    return [word for flag in flags for word in ([flag, "true"] if flag == "--overwrite_output_dir" else [flag])]


def evaluate_masked_lm(out: Path, model: Path, *extra: str) -> None:
    text = model.parent / "held-out.txt"  # beside the module's model, outside the folders compared
    text.write_text("the cat sat on the mat .\nthe dog ran over the hill .\n")
    evaluate.main(["--model", str(model), "--text_file", str(text), "--output_dir", str(out), *extra])


def corpus_bench(out: Path, *extra: str, work: Path | None = None) -> None:
    corpus_benchmark.main(["--family", "gpt", "--size_mb", "0.02", "--unique_mb", "0.01", "--stages", "run",
                           "--work", str(work or out.parent.parent / "work"), "--json", str(out), *extra])


def average_twins(out: Path, model: Path, *extra: str) -> None:
    """`lineage average` of the model folder and a copy of it (one folder named twice is refused)."""
    twin = model.parent / f"{model.name}-twin"
    if not twin.exists():
        shutil.copytree(model, twin)
    average.main([str(model), str(twin), "--output_dir", str(out), *extra])


# name -> (run(out, model folder, *extra), the file planted in the user's folder, the name the refusal gives, the
# overwrite flag or None, stub or None); a name ending in .json: the output is that file, not a folder
COMMANDS = {
    "python-docs": (lambda out, m, *x: python_docs.main([str(out), *x]), "train.txt", "train.txt",
                    "--overwrite_output_dir", None),
    "train tokenizer": (lambda out, m, *x: train_tokenizer.main(["--family", "gpt", "--vocab_size", "300",
                                                                 "--max_texts", "60", "--output_dir", str(out), *x]),
                        "tokenizer.json", "tokenizer.json", "--overwrite_output_dir", None),
    "export": (lambda out, m, *x: export.main(["--model", str(m), "--output_dir", str(out), *x]), "export.json",
               "export.json", "--overwrite_output_dir", None),
    "convert": (lambda out, m, *x: convert.main([str(m), str(out), "--to", "transformers", *x]), "README.md",
                "README.md", "--overwrite_output_dir", None),
    "attention-maps": (lambda out, m, *x: attention_maps.main(["--model", str(m), "--text", "the cat sat",
                                                               "--output_dir", str(out), *x]),
                       "tokens.json", "tokens.json", "--overwrite_output_dir", None),
    "average": (lambda out, m, *x: average_twins(out, m, *x), "model.safetensors", "model.safetensors",
                "--overwrite_output_dir", None),
    "evaluate": (lambda out, m, *x: evaluate_masked_lm(out, m, *x), "results.json", "results.json",
                 "--overwrite_output_dir", None),
    "experiment": (lambda out, m, *x: lineage_experiment.main(["--quick", "--arms", "rnn-none", "--output_dir",
                                                               str(out), *x]),
                   "report.md", "report.md", "--overwrite_output_dir", None),
    "main_job": (lambda out, m, *x: main_job.main(["--quick", "--progress_bar", "false", "--output_dir", str(out),
                                                   *valued(x)]),
                 "summary.md", "summary.md", "--overwrite_output_dir", stub_main_job),
    "benchmark.json": (lambda out, m, *x: benchmark.main(["--model", "gpt-tiny", "--task", "causal-lm", "--batch_size",
                                                          "1", "--seq_length", "8", "--steps", "1", "--warmup", "1",
                                                          "--json", str(out), *x]),
                       None, "bench", "--overwrite_json", None),
    "corpus-benchmark.json": (lambda out, m, *x: corpus_bench(out, *x), None, "bench", "--overwrite_json",
                              stub_corpus_benchmark),
    "corpus-benchmark --work": (lambda out, m, *x: corpus_bench(out.parent / "bench.json", *x, work=out),
                                "notes.txt", "notes.txt", None, stub_corpus_benchmark),
    "pretrain_gpt": (lambda out, m, *x: pretrain_gpt.main(["--recipe", "gpt-pretrain-tiny", *TINY, "--output_dir",
                                                           str(out), *valued(x)]),
                     "tokenizer/tokenizer.json", "tokenizer", "--overwrite_output_dir", None),
    "pretrain_bert": (lambda out, m, *x: pretrain_bert.main(["--recipe", "bert-pretrain-tiny", *TINY, "--output_dir",
                                                             str(out)]),
                      "tokenizer/tokenizer.json", "tokenizer", None, None),
    "finetune": (lambda out, m, *x: finetune.main(["--recipe", "bert-finetune-nli-tiny", *TINY, "--output_dir",
                                                   str(out)]),
                 "logs/metrics.jsonl", "logs", None, None),
    "train translation": (lambda out, m, *x: train_translation.main(["--recipe", "transformer-translation-tiny", *TINY,
                                                                     "--output_dir", str(out)]),
                          "model/config.json", "model", None, None),
}


def digest(folder: Path) -> dict[str, str]:
    """Every file and folder under `folder` (hidden ones too) -> sha256 of its bytes (a folder: its name)."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


def users_output(tmp_path: Path, name: str) -> Path:
    """Where the command writes: a folder of the user's files, with one of the names the command writes, or the
    user's own JSON file."""
    out = tmp_path / "user" / ("bench.json" if name.endswith(".json") else "mine")
    planted = COMMANDS[name][1]
    if planted is None:
        out.parent.mkdir(parents=True)
        out.write_text('{"my": "numbers"}')
        return out
    (out / planted).parent.mkdir(parents=True)
    (out / planted).write_text("the user's own")
    (out / "notes.txt").write_text("notes")
    return out


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_command_run_into_the_users_files_is_refused_naming_them_and_leaves_each_byte(name, model, tmp_path,
                                                                                          monkeypatch, capsys):
    command, _, named, _, stub = COMMANDS[name]
    if stub:
        stub(monkeypatch)
    out = users_output(tmp_path, name)
    before = digest(tmp_path)
    with pytest.raises((OutputDirError, CorpusBenchmarkError, SystemExit)) as caught:
        command(out, model)
    assert named in str(caught.value) + capsys.readouterr().err
    assert digest(tmp_path) == before


def test_prepare_writes_nothing_into_output_dir(tmp_path):
    """`lineage prepare` takes the run's own keys, output_dir among them, and writes only into the cache."""
    out = users_output(tmp_path, "pretrain_gpt")
    before = digest(tmp_path)
    prepare.main(["--recipe", "gpt-pretrain-tiny", "--train_size", "24", "--eval_size", "8", "--tokenizer_vocab_size",
                  "300", "--output_dir", str(out)])
    assert digest(tmp_path) == before


@pytest.mark.parametrize("name", [name for name, row in COMMANDS.items() if row[3]])
def test_a_command_replaces_its_own_earlier_output_only_with_its_overwrite_flag(name, model, tmp_path, monkeypatch,
                                                                                 capsys):
    command, _, _, flag, stub = COMMANDS[name]
    if stub:
        stub(monkeypatch)
    out = tmp_path / "x" / ("bench.json" if name.endswith(".json") else "out")
    command(out, model)
    before = digest(tmp_path)
    with pytest.raises((OutputDirError, CorpusBenchmarkError, SystemExit)) as caught:
        command(out, model)
    message = str(caught.value) + capsys.readouterr().err
    assert flag in message and ("earlier output" in message or "another run's files" in message)
    assert digest(tmp_path) == before
    written = [out] if out.is_file() else [p for p in out.rglob("*") if p.is_file()]
    for path in written:
        os.utime(path, (0, 0))  # no byte changes: still the command's own output
    command(out, model, flag)
    assert list(out.parent.iterdir()) == [out]  # no staging or set-aside folder beside it
    assert out.is_file() or not [p for p in out.iterdir() if p.name.startswith((ASIDE, ".tmp", ".old"))]
    assert all(p.stat().st_mtime > 0 for p in ([out] if out.is_file() else out.rglob("*")) if p.is_file())


def test_an_in_place_output_is_put_back_when_its_replacement_stops_or_is_killed(tmp_path, capsys):
    """`output_in_place` (the experiment, the main job): an overwrite that raises deletes what it wrote and puts the
    earlier output back byte for byte; one killed leaves it set aside, and the next check puts it back."""
    out = tmp_path / "out"
    with run_folder.output_in_place(out, "job"):
        (out / "report.md").write_text("first")
    before = digest(tmp_path)
    with pytest.raises(RuntimeError, match="stopped"), run_folder.output_in_place(out, "job"):
        (out / "report.md").write_text("second, half")
        raise RuntimeError("stopped")
    assert digest(tmp_path) == before and "job: put back its earlier output" in capsys.readouterr().out
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    aside = out / f"{ASIDE}{gone}"  # as a run of pid `gone` killed midway leaves it
    aside.mkdir()
    for path in [p for p in out.iterdir() if p != aside]:
        path.rename(aside / path.name)
    (out / OUTPUT_RECORD).write_text(json.dumps({"command": "job", "pid": gone}))
    (out / "report.md").write_text("half")
    assert run_folder.check_writer_output(str(out), "job", overwrite=True) == out.resolve()
    assert digest(tmp_path) == before


def test_a_failed_first_output_is_recorded_and_replaced_with_the_flag(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError), run_folder.output_in_place(out, "job"):
        (out / "part.txt").write_text("half")
        raise RuntimeError
    assert json.loads((out / OUTPUT_RECORD).read_text())["finished"] is False
    with pytest.raises(OutputDirError, match="earlier output of job; pass --overwrite_output_dir"):
        run_folder.check_writer_output(str(out), "job")
    run_folder.check_writer_output(str(out), "job", overwrite=True)


@pytest.mark.parametrize("mask", [0o022, 0o002])
def test_files_and_folders_take_the_users_umask(mask, model, tmp_path, monkeypatch):
    """Every folder is 0777 & ~umask and every file 0666 & ~umask, as mkdir and open make them: the model folder and
    its safetensors (safetensors 0.8 writes 0600), checkpoints, a converted model, a tokenizer and the cache."""
    monkeypatch.setenv("LINEAGE_CACHE", str(tmp_path / "cache"))
    old = os.umask(mask)
    try:
        COMMANDS["pretrain_gpt"][0](tmp_path / "run", model, "--save_steps", "1")
        COMMANDS["convert"][0](tmp_path / "converted", model)
        COMMANDS["train tokenizer"][0](tmp_path / "tok", model)
    finally:
        os.umask(old)
    modes = {p.relative_to(tmp_path).as_posix(): (p.is_dir(), p.stat().st_mode & 0o777) for p in tmp_path.rglob("*")
             if p.name != run_folder.LOCK}
    assert any(name.endswith("model/model.safetensors") for name in modes)
    assert any(name.startswith("run/checkpoints/step-") for name in modes)
    assert any(name.startswith("cache/") for name in modes)
    wrong = {name: oct(mode) for name, (folder, mode) in modes.items()
             if mode != (0o777 if folder else 0o666) & ~mask}
    assert not wrong


def test_the_corpus_benchmark_records_what_it_measured(tmp_path, monkeypatch):
    """`--repo` that is no checkout is refused (the installed code would run, recorded as the path given); another
    `--unique_mb` writes its own corpus (it reused the first) and the JSON records it."""
    stub_corpus_benchmark(monkeypatch)
    (tmp_path / "not-a-checkout").mkdir()
    with pytest.raises(CorpusBenchmarkError, match="--repo .*not-a-checkout: not a Lineage checkout"):
        corpus_bench(tmp_path / "x" / "a.json", "--repo", str(tmp_path / "not-a-checkout"))
    assert not (tmp_path / "work").exists()
    corpus_bench(tmp_path / "x" / "a.json")
    corpus_bench(tmp_path / "x" / "b.json", "--unique_mb", "0.005")
    first, second = (json.loads((tmp_path / "x" / name).read_text()) for name in ("a.json", "b.json"))
    assert (first["unique_mb"], second["unique_mb"]) == (0.01, 0.005) and first["corpus"] != second["corpus"]
    distinct = [len(set(Path(result["corpus"]).read_text().splitlines())) for result in (first, second)]
    assert distinct[0] > distinct[1]
    assert first["repo"] == second["repo"] == str(Path(corpus_benchmark.__file__).resolve().parents[1])
