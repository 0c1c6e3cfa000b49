"""A run deletes only what it wrote, and every command writes only into a folder of its own (issue 29).

Each case hashes the user's folder before and after: every byte stays in place. The run's manifest (`wrote` in
`run.json`) is what a later run may delete; the commands that write a folder of their own (`train_tokenizer`,
`export`, `convert`, `attention-maps`) replace only an earlier output that their own manifest records.
"""

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch
from conftest import preset

from train import export, pretrain_gpt, train_tokenizer
from train.run import run_folder
from train.run.run_folder import OutputDirError
from train.run.run_log import read_jsonl

torch.set_num_threads(1)
GPT = ["--recipe", "gpt-pretrain-tiny", "--progress_bar", "false", "--report_to", "none", "--max_steps", "2",
       "--train_size", "40", "--tokenizer_vocab_size", "300"]


def digest(folder: Path) -> dict[str, str]:
    """Every file under `folder` (hidden ones too) by relative path -> sha256 of its bytes."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def tokenizer(folder: Path, *extra: str) -> None:
    train_tokenizer.main(["--kind", "gpt", "--vocab_size", "300", "--output_dir", str(folder),
                          "--dataset", "embedded:documents", *extra])


def gpt(out, *extra: str):
    return pretrain_gpt.main([*GPT, "--output_dir", str(out), *extra])


def published(folder: Path) -> Path:
    """A folder as a finished run publishes it: a model, its card and loss curve."""
    preset("gpt-tiny").save_pretrained(folder)
    (folder / "loss_curve.png").write_bytes(b"\x89PNG the user's picture")
    (folder / "README.md").write_text("my model")
    return folder


def test_a_folder_above_the_tokenizer_it_was_told_to_use_is_refused_and_kept(tmp_path):
    exp = tmp_path / "exp1"
    tokenizer(exp / "tokenizer")
    before = digest(exp)
    with pytest.raises(OutputDirError, match=r"holds an input of this run \(recipe key 'tokenizer'"):
        gpt(exp, "--tokenizer", str(exp / "tokenizer"))
    assert digest(exp) == before


def test_a_folder_inside_an_input_is_refused_and_the_input_kept(tmp_path):
    tokenizer(tmp_path / "tokenizer")
    before = digest(tmp_path)
    with pytest.raises(OutputDirError, match=r"run lies in an input of this run \(recipe key 'tokenizer'"):
        gpt(tmp_path / "tokenizer" / "run", "--tokenizer", str(tmp_path / "tokenizer"))
    assert digest(tmp_path) == before and not (tmp_path / "tokenizer" / "run").exists()


def test_a_folder_holding_the_files_a_pattern_matches_is_refused_and_kept(tmp_path):
    """`--train_file 'exp/data/*.txt'` names the files it matches as inputs: an output folder above them is refused
    naming the pattern and the file; one beside them, where the pattern matches nothing the run writes, trains."""
    data = tmp_path / "exp" / "data"
    data.mkdir(parents=True)
    for i in range(2):
        (data / f"part-{i}.txt").write_text("".join(f"document {i} line {j} of the corpus\n" for j in range(40)))
    before = digest(tmp_path)
    pattern = str(data / "*.txt")
    with pytest.raises(OutputDirError, match=r"holds an input of this run \(recipe key 'train_file', "
                                             r"pattern .*\*\.txt: .*part-0\.txt\)"):
        gpt(tmp_path / "exp", "--train_file", pattern)
    assert digest(tmp_path) == before
    gpt(data / "run", "--train_file", pattern)
    assert (data / "run" / "model" / "config.json").is_file()


def test_an_empty_output_dir_and_the_working_folder_are_refused_and_nothing_is_deleted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tokenizer(tmp_path / "tokenizer")
    (tmp_path / "run.json").write_text('{"mine": true}')
    before = digest(tmp_path)
    with pytest.raises(OutputDirError, match="recipe key 'output_dir' is empty"):
        gpt("")
    with pytest.raises(OutputDirError, match="recipe key 'output_dir' is the working folder"):
        gpt(".")
    assert digest(tmp_path) == before


def test_a_published_model_folder_is_refused_and_kept(tmp_path):
    model = published(tmp_path / "prev" / "model")
    before = digest(tmp_path)
    with pytest.raises(OutputDirError, match="is a saved model folder .*config.json"):
        gpt(model)
    assert digest(tmp_path) == before


@pytest.mark.parametrize("name", ["run.json", "loss_curve.png", "tokenizer", "logs"])
def test_files_no_run_recorded_are_never_taken_for_a_stopped_run(tmp_path, name):
    """Before: a folder holding only run.json, tokenizer/ or loss_curve.png was cleared as a refused run's."""
    out = tmp_path / "out"
    out.mkdir()
    if name in ("tokenizer", "logs"):
        (out / name).mkdir()
        (out / name / "notes.txt").write_text("mine")
    else:
        (out / name).write_text("mine")
    before = digest(out)
    with pytest.raises(OutputDirError, match=f"holds {name}, which no Lineage run recorded writing there"):
        gpt(out)
    assert digest(out) == before and sorted(p.name for p in out.iterdir()) == [name]


def test_overwrite_deletes_only_what_the_run_recorded(tmp_path, capsys):
    out = tmp_path / "run"
    gpt(out)
    record = json.loads((out / run_folder.RECORD).read_text())
    assert {"tokenizer/tokenizer.json", "logs/metrics.jsonl", "model/model.safetensors", "loss_curve.png"} <= set(
        record["wrote"])
    assert any(k.startswith("checkpoints/step-00000002/") for k in record["wrote"])
    (out / "notes.txt").write_text("the user's notes")
    gpt(out, "--overwrite_output_dir", "true", "--seed", "3")
    assert "overwrite_output_dir: deleting" in capsys.readouterr().out
    assert (out / "notes.txt").read_text() == "the user's notes"
    (out / "model" / "mine.txt").write_text("added after the run")
    with pytest.raises(OutputDirError, match="holds model, which no Lineage run recorded writing there"):
        gpt(out, "--overwrite_output_dir", "true")
    assert (out / "model" / "mine.txt").is_file() and (out / "model" / "model.safetensors").is_file()


@pytest.mark.parametrize("streaming, refusal", [
    ("false", r"short\.txt: the text yields \d+ tokens .*, fewer than one block of \d+ \(max_seq_length\): give more "
              r"text or a smaller max_seq_length$"),
    ("true", r"^the training stream yielded no example \(.*short\.txt: an example is a block of \d+ tokens "
             r"\(max_seq_length\) packed from each 1,000 documents in turn, the tail of each that fills no block "
             r"dropped: give more text or a smaller max_seq_length\)$")])
def test_a_run_that_stops_before_training_leaves_the_folder_as_it_was(tmp_path, capsys, streaming, refusal):
    """A refusal after the tokenizer is trained (the run's data is too short for one block) or a stream that fails at
    the first step, after the log recorded the launch (step 0), deletes what the run wrote, naming each, and nothing
    else: a file of the user's stays and the folder is as it was (before: its run.json, tokenizer and log stayed until
    the next run replaced them). Both refusals say what an example is and what gives more (before, streamed: 'the
    training stream yielded no example' alone)."""
    short = tmp_path / "short.txt"
    short.write_text("a b\nc d\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("the user's notes")
    before = digest(out)
    with pytest.raises(Exception, match=refusal):
        gpt(out, "--train_file", str(short), "--streaming", streaming)
    assert digest(out) == before
    said = capsys.readouterr().out
    for name in ("tokenizer", "logs") if streaming == "true" else ("tokenizer",):
        assert f"stopped before training (no checkpoint, logged step or model): deleting {out.resolve() / name}" in said
    with pytest.raises(Exception, match=refusal):
        gpt(tmp_path / "new", "--train_file", str(short), "--streaming", streaming)
    assert not (tmp_path / "new").exists()


def test_a_run_killed_before_training_is_cleared_from_its_own_record(tmp_path, capsys, monkeypatch):
    """A run killed before it trained (no withdrawal: the stream failed at its first step) leaves its record, the
    tokenizer and the log of its launch, all in the manifest: the next start deletes exactly those, naming each, and
    replaces the run without a flag."""
    short = tmp_path / "short.txt"
    short.write_text("a b\nc d\n")
    out = tmp_path / "run"
    with monkeypatch.context() as killed:
        killed.setattr(run_folder.Run, "withdraw", lambda run: None)
        with pytest.raises(Exception, match="yielded no example"):
            gpt(out, "--train_file", str(short), "--streaming", "true")
    assert [entry["step"] for entry in read_jsonl(out / "logs" / "metrics.jsonl")] == [0]
    assert any(k.startswith("tokenizer/") for k in json.loads((out / run_folder.RECORD).read_text())["wrote"])
    gpt(out)
    said = capsys.readouterr().out
    for name in ("tokenizer", "logs"):
        assert f"(no checkpoint, logged step or model): deleting {out.resolve() / name}" in said
    assert (out / "model" / "config.json").is_file() and max(
        entry["step"] for entry in read_jsonl(out / "logs" / "metrics.jsonl")) > 0
    with pytest.raises(OutputDirError, match="holds another run's files"):
        gpt(out)


def test_a_start_refused_before_training_writes_nothing(tmp_path):
    """Lengths against the model's positions are checked before a tokenizer is trained or a folder made."""
    for argv in (["--max_seq_length", "65"], ["--pad_to_multiple_of", "48"], ["--max_new_tokens", "64"]):
        with pytest.raises(Exception, match=argv[0].removeprefix("--")):
            gpt(tmp_path / "new" / "run", *argv)
    assert not (tmp_path / "new").exists()


def test_train_tokenizer_refuses_a_models_folder_and_replaces_its_own_output(tmp_path):
    model = published(tmp_path / "run" / "model")
    before = digest(model)
    with pytest.raises(OutputDirError, match=r"--output_dir .*model is not empty and holds .*which train_tokenizer "
                                             r"did not write there"):
        tokenizer(model)
    assert digest(model) == before
    tokenizer(tmp_path / "tok")
    first = digest(tmp_path / "tok")
    with pytest.raises(OutputDirError, match="holds an earlier output of train_tokenizer; pass --overwrite_output_dir"):
        tokenizer(tmp_path / "tok", "--vocab_size", "280")
    assert digest(tmp_path / "tok") == first
    tokenizer(tmp_path / "tok", "--vocab_size", "280", "--overwrite_output_dir")
    assert digest(tmp_path / "tok") != first and run_folder.OUTPUT_RECORD in first
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    with pytest.raises(OutputDirError, match="holds tokenizer.json, which train_tokenizer did not write there"):
        tokenizer(tmp_path / "tok", "--overwrite_output_dir")


def test_export_refuses_a_folder_of_other_files(tmp_path):
    model = tmp_path / "m"
    preset("gpt-tiny").save_pretrained(model)
    theirs = tmp_path / "out"
    theirs.mkdir()
    (theirs / "export.json").write_text("the user's")
    with pytest.raises(OutputDirError, match=r"--output_dir .*out is not empty and holds export.json"):
        export.main(["--model", str(model), "--output_dir", str(theirs)])
    assert (theirs / "export.json").read_text() == "the user's"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_refused_resume_keeps_the_record_of_the_first_run(tmp_path):
    out = tmp_path / "run"
    gpt(out, "--save_steps", "1")
    before = (out / run_folder.RECORD).read_bytes()
    with pytest.raises(Exception, match="per_device_train_batch_size|micro-batch"):
        gpt(out, "--resume_from_checkpoint", "latest", "--max_steps", "4", "--per_device_train_batch_size", "3")
    assert (out / run_folder.RECORD).read_bytes() == before
    gpt(out, "--resume_from_checkpoint", "latest", "--max_steps", "3")
    record = json.loads((out / run_folder.RECORD).read_text())
    assert record["pid"] == json.loads(before)["pid"] and record["command"] == json.loads(before)["command"]
    assert record["resumes"][-1]["step"] == 2 and record["resumes"][-1]["pid"] == os.getpid()


def test_a_resume_never_adopts_files_the_run_did_not_write(tmp_path):
    """Before: a resume recorded a user's files under model/ as the run's, and a later overwrite deleted them."""
    out = tmp_path / "run"
    gpt(out, "--save_steps", "1")
    (out / "model" / "notes.txt").write_text("mine")
    with pytest.raises(OutputDirError, match="holds model, which no Lineage run recorded writing there"):
        gpt(out, "--resume_from_checkpoint", "latest", "--max_steps", "3")
    (out / "model" / "notes.txt").unlink()
    gpt(out, "--resume_from_checkpoint", "latest", "--max_steps", "3")
    assert "model/notes.txt" not in json.loads((out / run_folder.RECORD).read_text())["wrote"]
