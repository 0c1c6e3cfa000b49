"""A run never loses work and never misrecords what it did (issue 24): an output folder belongs to one run (a second
run is refused, or deletes the first's files naming each; a live lock keeps a concurrent run out, a dead one's lock
is taken over), and a resume is checked against the recipe (another architecture is named key by key; a changed
learning rate takes effect and is recorded in the log, the run record, recipe.yaml and the card)."""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from train.finetune import main as finetune
from train.run import run_folder
from train.run.checkpoints import (
    CheckpointError,
    ResumeMismatchError,
    complete_checkpoints,
)
from train.run.recipes import recipe_from_dict
from train.run.run_folder import OutputDirError

torch.set_num_threads(1)
TINY = ["--recipe", "bert-finetune-nli-tiny", "--progress_bar", "false", "--report_to", "none",
        "--train_size", "32", "--eval_size", "16", "--max_steps", "4", "--save_steps", "2", "--save_total_limit", "3"]


def run(out: Path, *extra: str):
    return finetune([*TINY, "--output_dir", str(out), *extra])


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in (run_folder.LOCK,)}


def log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """One finished run (4 steps, checkpoints at 2 and 4) whose folder the tests below try to reuse."""
    out = tmp_path_factory.mktemp("first") / "run"
    run(out)
    return out


@pytest.fixture
def finished(first_run, tmp_path):
    """A private copy of the finished run's folder."""
    out = tmp_path / "run"
    shutil.copytree(first_run, out)
    return out


def test_a_run_writes_its_record_and_releases_its_lock(first_run):
    record = json.loads((first_run / run_folder.RECORD).read_text())
    assert set(record) >= {"recipe_sha256", "started", "pid", "host", "command"}
    assert len(record["recipe_sha256"]) == 16
    assert not (first_run / run_folder.LOCK).exists()


def test_second_run_into_the_same_folder_is_refused_and_the_first_runs_files_stay(finished):
    before = files(finished)
    with pytest.raises(OutputDirError) as caught:
        run(finished, "--seed", "7", "--max_steps", "2")
    message = str(caught.value)
    assert str(finished.resolve()) in message
    assert "--resume_from_checkpoint latest" in message and "--overwrite_output_dir true" in message
    assert files(finished) == before  # tokenizer, checkpoints, log and model untouched


def test_a_second_run_with_its_own_tokenizer_is_refused_too(finished, tmp_path):
    """With --tokenizer nothing is trained: the engine's claim refuses, before the log is touched."""
    shutil.copytree(finished / "tokenizer", tmp_path / "tokenizer")
    before = files(finished)
    with pytest.raises(OutputDirError, match="holds another run's files"):
        run(finished, "--tokenizer", str(tmp_path / "tokenizer"))
    assert files(finished) == before


def test_resume_under_another_tokenizer_names_it(finished, tmp_path):
    from train.data.corpus import tokenizer_training_texts
    from train.data.tokenization import train_tokenizer

    other = tmp_path / "other"
    train_tokenizer("bert", tokenizer_training_texts(size=100), 300, model_max_length=64).save_pretrained(other)
    with pytest.raises(ResumeMismatchError, match=r"tokenizer: the checkpoint was written with tokens=\d+, this run "
                                                  r"has tokens=\d+"):
        run(finished, "--resume_from_checkpoint", "latest", "--max_steps", "6", "--tokenizer", str(other))


def test_overwrite_output_dir_sets_the_first_runs_files_aside_and_deletes_them_once_it_trains(finished, capsys):
    run(finished, "--max_steps", "2", "--overwrite_output_dir", "true")
    printed = capsys.readouterr().out
    aside = finished.resolve() / f"{run_folder.ASIDE}{os.getpid()}"
    names = "checkpoints, logs, tokenizer, model, loss_curve.png"
    assert f"overwrite_output_dir: set aside {names} of {finished.resolve()}" in printed
    assert f"overwrite_output_dir: deleting {aside}" in printed
    assert not list(finished.glob(f"{run_folder.ASIDE}*"))
    assert [p.name for p in complete_checkpoints(finished / "checkpoints")] == ["step-00000002"]  # no step 4 left
    assert max(r["step"] for r in log(finished)) == 2


def test_an_overwriting_run_stopped_before_it_trains_puts_the_first_runs_files_back(finished, capsys):
    """overwrite_output_dir deletes the earlier run only once the new one trains: refused after its claim and its
    tokenizer, it leaves the folder byte for byte as it was; killed there, the next claim puts the files back."""
    from train.run.recipes import RecipeError

    before = files(finished)
    with pytest.raises(RecipeError, match="'max_seq_length' is 4, below the minimum"):
        run(finished, "--overwrite_output_dir", "true", "--max_seq_length", "4")
    assert "put back the earlier run's files" in capsys.readouterr().out
    assert files(finished) == before and not list(finished.glob(f"{run_folder.ASIDE}*"))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    killed = finished / f"{run_folder.ASIDE}{int(gone.stdout)}"  # a claim killed before its run trained
    killed.mkdir()
    for name in ("model", run_folder.RECORD):
        (finished / name).rename(killed / name)
    (finished / run_folder.RECORD).write_text(json.dumps({"wrote": {}}))
    run_folder.claim(recipe_from_dict({"output_dir": str(finished), "resume_from_checkpoint": "latest"})).release()
    assert {k: v for k, v in files(finished).items() if k != run_folder.RECORD} == {
        k: v for k, v in before.items() if k != run_folder.RECORD}


def test_resume_latest_after_a_killed_overwrite_continues_the_earlier_run(finished, capsys):
    """An overwriting run killed after it had begun training but before its first checkpoint (its log and tokenizer
    written, the earlier run set aside): resuming finds the earlier run's checkpoints (it said there were none), puts
    its files back and continues it."""
    before = files(finished)
    killed = subprocess.run([sys.executable, "-c", f"""
import os
from pathlib import Path
from train.run import run_folder
from train.run.recipes import recipe_from_dict
recipe = recipe_from_dict({{"output_dir": {str(finished)!r}, "overwrite_output_dir": True}})
run = run_folder.claim(recipe)
for name in ("logs/metrics.jsonl", "tokenizer/tokenizer.json"):
    (Path({str(finished)!r}) / name).parent.mkdir()
    (Path({str(finished)!r}) / name).write_text("{{}}")
run.record("logs", "tokenizer")
os._exit(9)
"""], capture_output=True, text=True)
    assert killed.returncode == 9 and len(list(finished.glob(f"{run_folder.ASIDE}*"))) == 1
    run(finished, "--resume_from_checkpoint", "latest", "--max_steps", "5")
    printed = capsys.readouterr().out
    assert "put back the earlier run's files" in printed and "resumed from" in printed and "at step 4" in printed
    assert max(r["step"] for r in log(finished)) == 5 and not list(finished.glob(f"{run_folder.ASIDE}*"))
    assert before["checkpoints/step-00000004/lineage_state.json"] == files(finished)[
        "checkpoints/step-00000004/lineage_state.json"]


def test_run_json_records_a_command_that_runs_again_as_written(tmp_path):
    """Through `lineage train ...` the record said `lineage train pretrain_gpt train pretrain_gpt ...`; now the command
    it records, split as a shell splits it and run from the folder it records, trains the same run again."""
    argv = ["lineage", "train", "pretrain-gpt", "--recipe", "gpt-pretrain-tiny", "--progress_bar", "false",
            "--report_to", "none", "--max_steps", "2", "--train_size", "24", "--eval_size", "8",
            "--tokenizer_vocab_size", "300", "--sample_prompts", "[a b]", "--output_dir", "run",
            "--overwrite_output_dir", "true"]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(argv, cwd=tmp_path, env=environment, check=True, capture_output=True)
    first = json.loads((tmp_path / "run" / run_folder.RECORD).read_text())
    weights = (tmp_path / "run" / "model" / "model.safetensors").read_bytes()
    assert first["command"] == shlex.join(argv) and first["cwd"] == str(tmp_path)
    subprocess.run(shlex.split(first["command"]), cwd=first["cwd"], env=environment, check=True, capture_output=True)
    again = json.loads((tmp_path / "run" / run_folder.RECORD).read_text())
    assert (again["command"], again["recipe_sha256"]) == (first["command"], first["recipe_sha256"])
    assert (tmp_path / "run" / "model" / "model.safetensors").read_bytes() == weights


def test_the_command_line_is_recorded_as_the_user_ran_it(monkeypatch):
    module = Path(__file__).resolve().parents[3] / "train" / "finetune.py"
    for argv, recorded in ((["lineage train finetune", "train", "finetune", "--seed", "1 2"],
                            "lineage train finetune --seed '1 2'"),
                           ([str(module), "--seed", "1"], f"{shlex.quote(sys.executable)} -m train.finetune --seed 1"),
                           (["python -m train.finetune", "--seed", "1"],
                            f"{shlex.quote(sys.executable)} -m train.finetune --seed 1")):
        monkeypatch.setattr(sys, "argv", argv)
        assert run_folder.command_line() == recorded


def test_an_output_dir_inside_the_cache_is_refused_naming_both(tmp_path):
    from train.data.tokenization import cache_folder

    cache = cache_folder().resolve()
    for inside in (cache, cache / "prepared" / "run"):
        with pytest.raises(OutputDirError, match=f"{inside} lies inside the Lineage cache {cache} \\(LINEAGE_CACHE"):
            run_folder.claim(recipe_from_dict({"output_dir": str(inside)}))
        with pytest.raises(OutputDirError, match="lies inside the Lineage cache"):
            run_folder.check_writer_output(str(inside), "export")
    assert not (cache / "prepared" / "run").exists()


def test_the_model_card_is_fit_to_publish(tmp_path, monkeypatch):
    """The card names local data and folders by their names (the full paths stay in run.json), escapes control
    characters of samples, lists only the data keys that were read and links Lineage only to a repository its
    package metadata names."""
    from conftest import preset

    import modeling
    from train.run import publish
    from train.run.recipes import load_recipe

    data, start = tmp_path / "data" / "mine.txt", tmp_path / "models" / "start" / "model"
    data.parent.mkdir()
    data.write_text("a b\n")
    start.mkdir(parents=True)
    (start.parent / "run.json").write_text("{}")  # a run's model folder: named with its run's
    recipe = load_recipe("gpt-pretrain-tiny", {"train_file": str(data), "validation_file": str(data), "model":
                                               str(start), "output_dir": str(tmp_path / "run")})
    model = modeling.LineageGptForCausalLM(preset("gpt-tiny"))
    sample = "Anna\x00 was \x1b[31mborn | in\n\u2028x"
    card = publish.write_model_card(tmp_path, model, recipe, {"eval_loss": 1.5, "sample_0": sample,
                                                              "base_model": str(start)}, {"torch": "2"},
                                    description=f"Started from `{start}`.").read_bytes()
    assert b"\x00" not in card and b"\x1b" not in card and str(tmp_path).encode() not in card
    text = card.decode()
    assert publish.read_card_metadata(tmp_path / "README.md")["datasets"] == ["mine.txt"]
    assert "| sample_0 | Anna\\x00 was \\x1b[31mborn \\| in\\n\\u2028x |" in text
    assert "Started from `start/model`." in text and "github.com" not in text and "trained with Lineage on" in text
    assert "| base_model | start/model |" in text and "\nmodel: start/model\n" in text
    shown = yaml.safe_load(text.split("```yaml\n")[1].split("```")[0])
    assert "dataset" not in shown and "embedded" not in text and shown["train_file"] == "mine.txt"

    class Metadata:
        def get_all(self, key):
            return ["Repository, https://example.org/lineage"] if key == "Project-URL" else None

    monkeypatch.setattr(publish.importlib.metadata, "metadata", lambda name: Metadata())
    card = publish.write_model_card(tmp_path, model, recipe, {}, {}).read_text()
    assert "[Lineage](https://example.org/lineage)" in card


def test_the_card_names_local_data_by_the_readers_rule(tmp_path):
    """A path is named by its name where the reader reads local data: a file or folder, or for a translation pair's
    columns the prefix of its two files, each plain or compressed (before: any file `<path>.*` made a path local, so
    a Hub id beside `<id>.jsonl`, or a prefix no command reads as a pair, lost its folders)."""
    from train.data.pair_files import pair_columns
    from train.run.publish import public_name

    (tmp_path / "hub").mkdir()
    for name in ("hub/wmt16.jsonl", "hub/wmt16.fr", "data.en", "data.de.gz"):
        (tmp_path / name).write_bytes(b"Ein Satz.\n")
    hub, data, en_de = str(tmp_path / "hub" / "wmt16"), str(tmp_path / "data"), pair_columns("en", "de")
    assert public_name(hub, en_de) == hub and public_name(data) == data
    assert public_name(data, en_de) == "data" and public_name(f"{data}.en") == "data.en"


@pytest.mark.parametrize(("family", "task", "shown"), [
    ("bert", "nli", set()), ("gpt", "nli", {"lm_loss_weight"}),
    ("bert", "question-answering", {"max_query_length", "doc_stride"})])
def test_the_cards_recipe_shows_only_the_keys_of_the_runs_command_task_and_model_type(tmp_path, family, task, shown):
    """Every BERT classifier's card listed max_query_length and doc_stride (question answering's) and lm_loss_weight
    (GPT's), and every card the keys of the other commands; recipe.yaml keeps every key, for a re-run."""
    import transformers
    from conftest import preset

    from train.run import publish
    from train.run.recipes import parse_args

    recipe = parse_args([f"--recipe={family}-finetune-nli-tiny", "--task", task], command="finetune")
    head = {"nli": transformers.AutoModelForSequenceClassification,
            "question-answering": transformers.AutoModelForQuestionAnswering}[task]
    model = head.from_config(preset(f"{family}-tiny"))
    text = publish.write_model_card(tmp_path, model, recipe, {}, {}).read_text()
    keys = set(yaml.safe_load(text.split("```yaml\n")[1].split("```")[0]))
    optional = {"max_query_length", "doc_stride", "lm_loss_weight"}
    assert keys & optional == shown
    assert {"task", "max_seq_length", "learning_rate", "lora"} <= keys
    assert not keys & {"nsp", "mlm_probability", "num_beams", "pack_documents", "sample_prompts", "max_new_tokens"}
    recipe.save(tmp_path / "recipe.yaml")
    assert optional <= set(yaml.safe_load((tmp_path / "recipe.yaml").read_text()))


def test_output_dir_that_is_a_file_is_refused(tmp_path):
    file = tmp_path / "out.txt"
    file.write_text("not a folder")
    with pytest.raises(OutputDirError, match=r"recipe key 'output_dir': .*out.txt is a file"):
        run_folder.claim(recipe_from_dict({"output_dir": str(file / "run")}))


def test_a_run_refused_after_its_start_leaves_no_file_behind(tmp_path):
    """`start_run` claims the folder; a refusal inside the run before it trained withdraws the claim: a new folder
    goes, with what the run wrote (a tokenizer), an existing one keeps only its own files. A run that wrote a
    checkpoint keeps its record."""
    from train.run.recipes import RecipeError
    from train.run.run_folder import start_run

    new = tmp_path / "new"
    with pytest.raises(RecipeError, match="refused"), start_run(recipe_from_dict({"output_dir": str(new)})):
        assert (new / run_folder.RECORD).is_file() and (new / run_folder.LOCK).is_file()
        raise RecipeError("refused")
    assert not new.exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "notes.txt").write_text("mine")
    with pytest.raises(RecipeError), start_run(recipe_from_dict({"output_dir": str(existing)})):
        raise RecipeError("refused")
    assert [p.name for p in existing.iterdir()] == ["notes.txt"]
    for part, kept in (("tokenizer/tokenizer.json", False), ("checkpoints/step-00000001/model.safetensors", True)):
        wrote = recipe_from_dict({"output_dir": str(tmp_path / "wrote")})
        with pytest.raises(RecipeError), start_run(wrote) as run:
            (tmp_path / "wrote" / part).parent.mkdir(parents=True)
            (tmp_path / "wrote" / part).write_text("{}")
            run.record(part.split("/")[0])
            raise RecipeError("refused after writing")
        assert (tmp_path / "wrote").exists() == kept
        run.release()
    assert part in json.loads((tmp_path / "wrote" / run_folder.RECORD).read_text())["wrote"]


def test_each_run_holds_its_own_claim_and_only_its_owner_writes(tmp_path):
    """A claim lives in its `Run`, not in module state: withdrawing one run (refused before it wrote) removes its new
    folder and leaves another run's record and lock; a released run gives its lock back once and withdraws nothing;
    a process that joined a run records nothing; a tokenizer trained for a run needs the run to keep it."""
    from train.setup.models import resolve_model
    from train.setup.run_tokenizer import get_tokenizer

    first = run_folder.claim(recipe_from_dict({"output_dir": str(tmp_path / "a")}))
    second = run_folder.claim(recipe_from_dict({"output_dir": str(tmp_path / "b")}))
    first.withdraw()
    assert not (tmp_path / "a").exists()
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == sorted([run_folder.LOCK, run_folder.RECORD])
    record = (tmp_path / "b" / run_folder.RECORD).read_bytes()
    (tmp_path / "b" / "logs").mkdir()
    (tmp_path / "b" / "logs" / "metrics.jsonl").write_text("{}")
    run_folder.join(second.recipe).record("logs")
    assert (tmp_path / "b" / run_folder.RECORD).read_bytes() == record
    second.release()
    second.release()
    second.withdraw()
    assert not (tmp_path / "b" / run_folder.LOCK).exists() and (tmp_path / "b" / run_folder.RECORD).is_file()
    with pytest.raises(TypeError, match="pass run="):
        get_tokenizer(recipe_from_dict({"model": "bert-tiny", "output_dir": str(tmp_path / "c")}), "bert", list,
                      resolve_model("bert-tiny"))
    assert not (tmp_path / "c").exists()


def test_a_live_runs_lock_keeps_a_second_run_out_and_a_dead_ones_is_taken_over(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / run_folder.LOCK).write_text(json.dumps({"pid": other.pid, "host": __import__("socket").gethostname(),
                                                       "started": "then"}))
        with pytest.raises(OutputDirError, match=f"in use by another run \\(process {other.pid} "):
            run_folder.claim(recipe_from_dict({"output_dir": str(out)}))
    finally:
        other.kill()
        other.wait()
    run = run_folder.claim(recipe_from_dict({"output_dir": str(out)}))
    assert f"removing the stale lock of process {other.pid}" in capsys.readouterr().out
    assert json.loads((out / run_folder.LOCK).read_text())["pid"] == __import__("os").getpid()
    run.release()
    assert not (out / run_folder.LOCK).exists()


def test_resume_with_another_architecture_names_the_key_and_never_says_corrupt(finished):
    with pytest.raises(ResumeMismatchError) as caught:
        run(finished, "--resume_from_checkpoint", "latest", "--max_steps", "6",
            "--model_overrides", "{num_hidden_layers: 1}")
    message = str(caught.value)
    assert "num_hidden_layers=2" in message and "num_hidden_layers=1" in message
    assert "corrupt" not in message.replace("sound", "")


def test_resume_with_other_data_is_refused_naming_it(finished):
    with pytest.raises(CheckpointError, match=r"data: the checkpoint was written with examples=32, this run has "
                                              r"examples=24"):
        run(finished, "--resume_from_checkpoint", "latest", "--max_steps", "6", "--train_size", "24")


def test_resume_with_a_changed_learning_rate_applies_it_and_records_it(finished, capsys):
    run(finished, "--resume_from_checkpoint", "latest", "--max_steps", "6", "--learning_rate", "1.0e-6",
        "--lr_scheduler", "constant", "--logging_steps", "1")
    printed = capsys.readouterr().out
    assert "learning_rate: 0.001 -> 1e-06 (changed on resume)" in printed
    assert "lr_scheduler: linear -> constant (changed on resume)" in printed
    records = log(finished)
    assert [r["lr"] for r in records if "lr" in r and r["step"] > 4] == [pytest.approx(1e-6)] * 2  # what ran
    launch = [r for r in records if "launch" in r][-1]
    assert launch["changed"]["learning_rate"] == [0.001, 1e-6]
    assert json.loads((finished / run_folder.RECORD).read_text())["resumes"][-1]["changed"]["lr_scheduler"] == [
        "linear", "constant"]
    assert yaml.safe_load((finished / "model" / "recipe.yaml").read_text())["learning_rate"] == 1e-6
    assert "`learning_rate` 0.001 -> 1e-06" in (finished / "model" / "README.md").read_text()


# ----------------------------------------------------------------------------- labels and lengths as users give them

def reviews(path: Path, labels: list, extra: str = "") -> Path:
    rows = [{"text": f"review {i} says the film was {'not ' * (i % 2)}good {extra}", "label": label}
            for i, label in enumerate(labels)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def classify(tmp_path: Path, train: Path, validation: Path, *extra: str):
    return run(tmp_path / "run", "--task", "sequence-classification", "--dataset", "", "--train_file", str(train),
               "--validation_file", str(validation), "--max_steps", "2", "--save_steps", "0", *extra)


def test_string_labels_train_end_to_end_and_the_saved_config_names_them(tmp_path):
    from transformers import AutoConfig

    train = reviews(tmp_path / "train.jsonl", ["pos", "neg", "neutral"] * 10)
    validation = reviews(tmp_path / "validation.jsonl", ["neg", "pos"] * 4)
    results, folder = classify(tmp_path, train, validation)
    assert 0.0 <= results["eval_accuracy"] <= 1.0
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    assert config.id2label == {0: "neg", 1: "neutral", 2: "pos"}  # sorted, as datasets' ClassLabel numbers them
    assert config.label2id == {"neg": 0, "neutral": 1, "pos": 2}


@pytest.mark.parametrize("bad, message", [
    (-1, r"validation.jsonl: line 3 \(JSON Lines, column 'label'\): label -1 is not a class id >= 0 \(an unlabelled "
         r"row.*skip_unlabeled: true"),
    (0.5, r"validation.jsonl: line 3 \(JSON Lines, column 'label'\): label 0.5 is not a class"),
    (2, r"validation.jsonl: line 3 \(JSON Lines, column 'label'\): label 2 never occurs in the training data"),
])
def test_a_bad_label_is_refused_before_training_naming_file_line_and_value(tmp_path, bad, message):
    train = reviews(tmp_path / "train.jsonl", [0, 1] * 10)
    validation = reviews(tmp_path / "validation.jsonl", [0, 1, bad, 0])
    with pytest.raises(ValueError, match=message):
        classify(tmp_path, train, validation)
    assert not (tmp_path / "run" / "logs").exists()  # nothing trained


def test_rows_labelled_minus_one_are_skipped_with_a_count_when_the_recipe_says_so(tmp_path, capsys):
    train = reviews(tmp_path / "train.jsonl", [0, 1, -1] * 8)
    validation = reviews(tmp_path / "validation.jsonl", [0, 1, -1, -1])
    classify(tmp_path, train, validation, "--skip_unlabeled", "true")
    printed = capsys.readouterr().out
    assert "train.jsonl: skipped 8 rows labelled -1 in column 'label'" in printed
    assert "validation.jsonl: skipped 2 rows labelled -1" in printed


@pytest.mark.parametrize("command, argv, minimum", [
    ("finetune", ["--recipe", "bert-finetune-nli-tiny", "--max_seq_length", "4"], 5),
    ("finetune", ["--recipe", "gpt-finetune-nli-tiny", "--max_seq_length", "3"], 5),
    ("finetune", ["--recipe", "bert-finetune-nli-tiny", "--task", "sequence-classification",
                  "--dataset", "embedded:sentiment", "--max_seq_length", "2"], 3),
    ("pretrain_bert", ["--recipe", "bert-pretrain-tiny", "--max_seq_length", "3"], 5),
    ("pretrain_gpt", ["--recipe", "gpt-pretrain-tiny", "--max_seq_length", "1"], 2),
    ("train_translation", ["--recipe", "transformer-translation-tiny", "--max_seq_length", "1"], 2),
])
def test_max_seq_length_below_the_templates_minimum_is_refused(tmp_path, command, argv, minimum):
    import importlib

    from train.run.recipes import RecipeError

    main = importlib.import_module(f"train.{command}").main
    with pytest.raises(RecipeError, match=f"'max_seq_length' is {argv[-1]}, below the minimum of {minimum}"):
        main([*argv, "--output_dir", str(tmp_path / "run"), "--progress_bar", "false", "--report_to", "none",
              "--train_size", "40", "--eval_size", "8"])
    assert not (tmp_path / "run" / "logs").exists()


def test_at_the_minimum_length_truncation_applies(tmp_path):
    import datasets

    from train.data.corpus import tokenizer_training_texts
    from train.data.model_inputs import tokenize_dataset
    from train.data.tokenization import train_tokenizer

    tokenizer = train_tokenizer("bert", tokenizer_training_texts(size=100), 400)
    rows = datasets.Dataset.from_dict({"premise": ["a long premise of many words"] * 2,
                                       "hypothesis": ["a long hypothesis too"] * 2, "label": [0, 1]})
    encoded = tokenize_dataset(rows, tokenizer, "classification", text_column="premise",
                               text_pair_column="hypothesis", max_length=5)
    assert [len(ids) for ids in encoded["input_ids"]] == [5, 5]
