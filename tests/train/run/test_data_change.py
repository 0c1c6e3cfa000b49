"""A resume notices changed data (issue 38): a checkpoint records its training data's content fingerprint (each local
file's, `train.data.fingerprints`), and a resume on data whose fingerprint differs, even with size and modification
time kept, is refused naming the file, in memory and streamed, unless `allow_data_change`; checkpoints of the previous
release, without a fingerprint, still resume."""

import json
import os
from pathlib import Path

import datasets
import pytest
from conftest import exact_resume

from train.data import fingerprints
from train.data.corpus import NER_LABELS, generate_records
from train.finetune import main as finetune
from train.pretrain_gpt import main as pretrain_gpt
from train.run import checkpoints
from train.run.checkpoints import DataChangedError, check_resume, data_fingerprint

RUN = ["--recipe", "gpt-pretrain-tiny", "--progress_bar", "false", "--report_to", "none", "--max_seq_length", "32",
       "--tokenizer_vocab_size", "300", "--save_steps", "0"]


def corpus(folder: Path) -> Path:
    path = folder / "corpus.jsonl"
    path.write_text("".join(f'{{"text": "Document {i} says something about the number {i * 7}."}}\n'
                            for i in range(300)))
    return path


def edit_keeping_size_and_mtime(path: Path) -> None:
    kept = os.stat(path)
    path.write_text(path.read_text().replace("Document 5 says", "Document 5 SAYS"))
    os.utime(path, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    assert (os.stat(path).st_size, os.stat(path).st_mtime_ns) == (kept.st_size, kept.st_mtime_ns)


@pytest.mark.parametrize("streaming", [False, pytest.param(True, marks=exact_resume)], ids=["in memory", "streamed"])
def test_a_resume_on_changed_data_is_refused_naming_the_file_unless_allowed(tmp_path, capsys, streaming):
    path, out = corpus(tmp_path), tmp_path / "run"
    keys = [*RUN, "--train_file", str(path), "--streaming", str(streaming).lower(), "--output_dir", str(out)]
    pretrain_gpt([*keys, "--max_steps", "2"])
    (checkpoint,) = checkpoints.complete_checkpoints(out / "checkpoints")
    recorded = json.loads((checkpoint / checkpoints.STATE_FILE).read_text())["run"]["dataset"]["fingerprint"]
    assert list(recorded) == [str(path)] and recorded[str(path)].startswith(f"{path.stat().st_size}:")
    edit_keeping_size_and_mtime(path)
    resume = [*keys, "--max_steps", "3", "--resume_from_checkpoint", "latest"]
    with pytest.raises(DataChangedError) as refused:
        pretrain_gpt(resume)
    message = str(refused.value)
    assert f"{path}: changed since the checkpoint was written (fingerprint {recorded[str(path)]} then" in message
    assert "--allow_data_change true" in message
    capsys.readouterr()
    results, _ = pretrain_gpt([*resume, "--allow_data_change", "true"])
    assert results["steps"] == 3
    assert f"data {path}: {recorded[str(path)]} -> " in capsys.readouterr().out  # the run line says what changed
    pretrain_gpt([*keys, "--max_steps", "4", "--resume_from_checkpoint", "latest"])  # its checkpoint has the new data


def test_a_launch_reads_each_data_file_once_for_its_fingerprint_and_the_next_launch_sees_an_edit(tmp_path,
                                                                                                 monkeypatch):
    monkeypatch.setattr(fingerprints, "_SEEN", {})
    monkeypatch.setattr(fingerprints, "SETTLED_NS", -1)  # every file counts as settled, as a corpus written earlier
    reads, read = [], fingerprints._read_fingerprint
    monkeypatch.setattr(fingerprints, "_read_fingerprint", lambda f: reads.append(Path(f).resolve()) or read(f))
    path, valid, out = tmp_path / "corpus.txt", tmp_path / "valid.txt", tmp_path / "run"
    path.write_text("".join(f"Document {i} says something about the number {i * 7}.\n" for i in range(300)))
    valid.write_text("".join(f"Document {i} says little.\n" for i in range(40)))
    keys = [*RUN, "--train_file", str(path), "--validation_file", str(valid), "--output_dir", str(out)]
    pretrain_gpt([*keys, "--max_steps", "2"])
    assert sorted(reads) == sorted([path.resolve(), valid.resolve()])  # the file checks, datasets' cache, the record
    edit_keeping_size_and_mtime(path)
    with pytest.raises(DataChangedError):
        pretrain_gpt([*keys, "--max_steps", "3", "--resume_from_checkpoint", "latest"])


def test_a_checkpoint_of_the_previous_release_without_a_fingerprint_still_resumes(tmp_path):
    path, out = corpus(tmp_path), tmp_path / "run"
    keys = [*RUN, "--train_file", str(path), "--output_dir", str(out)]
    pretrain_gpt([*keys, "--max_steps", "2"])
    (checkpoint,) = checkpoints.complete_checkpoints(out / "checkpoints")
    state = checkpoint / checkpoints.STATE_FILE
    record = json.loads(state.read_text())
    del record["run"]["dataset"]["fingerprint"]
    state.write_text(json.dumps(record, indent=1))
    results, _ = pretrain_gpt([*keys, "--max_steps", "3", "--resume_from_checkpoint", "latest"])
    assert results["steps"] == 3


def test_a_folders_files_are_fingerprinted_each_and_added_or_removed_files_are_named(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    for name in ("a.txt", "b.txt"):
        (folder / name).write_text(f"the text of {name}\n")
    before = {"fingerprint": data_fingerprint(str(folder), None)}
    assert list(before["fingerprint"]) == [str(folder / "a.txt"), str(folder / "b.txt")]
    (folder / "b.txt").unlink()
    (folder / "c.txt").write_text("a new shard\n")
    identity = {"dataset": {"fingerprint": data_fingerprint(str(folder), None)}, "hyperparameters": {}}
    checkpoint = tmp_path / "step-1"
    checkpoint.mkdir()
    (checkpoint / checkpoints.STATE_FILE).write_text(json.dumps({
        "state": {}, "files": {}, "run": {"dataset": before, "hyperparameters": {}}}))
    with pytest.raises(DataChangedError) as refused:
        check_resume(checkpoint, identity)
    assert f"{folder / 'b.txt'}: in the data the checkpoint was written with, not in this run's" in str(refused.value)
    assert f"{folder / 'c.txt'}: not in the data the checkpoint was written with" in str(refused.value)
    identity["hyperparameters"]["allow_data_change"] = True
    assert set(check_resume(checkpoint, identity)) == {f"data {folder / 'b.txt'}", f"data {folder / 'c.txt'}"}


def test_the_embedded_corpus_has_no_fingerprint_and_a_hub_dataset_is_fingerprinted_by_its_revision(monkeypatch):
    assert data_fingerprint("embedded:documents", None) is None

    class Builder:
        hash = "0123abcd"

    calls = []
    monkeypatch.setattr(datasets, "load_dataset_builder", lambda name, config: calls.append((name, config)) or Builder)
    assert data_fingerprint("org/corpus", "en") == {"org/corpus": "0123abcd"}
    assert calls == [("org/corpus", "en")]

    def offline(name, config):
        raise ConnectionError("offline")

    monkeypatch.setattr(datasets, "load_dataset_builder", offline)
    assert data_fingerprint("org/corpus", "en") is None


def test_a_folder_is_fingerprinted_by_every_file_its_task_reads_there(tmp_path):
    """A token classification run on a folder of `a.txt` and `b.conll` (CoNLL files, as WNUT-17's) records both, so an
    edit of `b.conll` is refused on resume (before: `a.txt` alone, the suffixes every task lists, and the resume went
    on); a pretraining run on a folder of `a.txt` beside a `b.conll` it does not read records `a.txt` alone."""
    folder, out = tmp_path / "ner", tmp_path / "run"
    folder.mkdir()
    sentences = list(generate_records("ner", "train", size=40))
    for name, rows in (("a.txt", sentences[:20]), ("b.conll", sentences[20:])):
        (folder / name).write_text("".join("".join(f"{word}\t{NER_LABELS[tag]}\n" for word, tag in
                                                   zip(row["tokens"], row["ner_tags"])) + "\n" for row in rows))
    keys = ["--recipe", "bert-finetune-nli-tiny", "--task", "token-classification", "--train_file", str(folder),
            "--output_dir", str(out), "--progress_bar", "false", "--report_to", "none", "--save_steps", "0"]
    finetune([*keys, "--max_steps", "2"])
    (checkpoint,) = checkpoints.complete_checkpoints(out / "checkpoints")
    recorded = json.loads((checkpoint / checkpoints.STATE_FILE).read_text())["run"]["dataset"]["fingerprint"]
    assert list(recorded) == [str(folder / "a.txt"), str(folder / "b.conll")]
    edit = folder / "b.conll"
    kept = os.stat(edit)
    edit.write_text(edit.read_text().replace("\tO\n", "\tB-LOC\n", 1))
    os.utime(edit, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    with pytest.raises(DataChangedError, match=f"{edit}: changed since the checkpoint was written"):
        finetune([*keys, "--max_steps", "3", "--resume_from_checkpoint", "latest"])
    (folder / "a.txt").write_text("".join(f"Document {i} says something about the number {i * 7}.\n"
                                          for i in range(300)))
    pretrain_gpt([*RUN, "--train_file", str(folder), "--output_dir", str(tmp_path / "gpt"), "--max_steps", "2"])
    (checkpoint,) = checkpoints.complete_checkpoints(tmp_path / "gpt" / "checkpoints")
    recorded = json.loads((checkpoint / checkpoints.STATE_FILE).read_text())["run"]["dataset"]["fingerprint"]
    assert list(recorded) == [str(folder / "a.txt")]
