"""Translation pairs as other tools write them: the Hub's layout (`{"translation": {"en": ..., "de": ...}}`, a
`datasets.Translation` feature, a parquet struct) read through `source_column` / `target_column` = `translation.en` /
`translation.de`, columns of other names (a TSV with the header `en de`), and two files of a sentence per line named
by their prefix (`train` of `train.en` and `train.de`, as fairseq, Moses and sacreBLEU write them) give the same pairs
in memory and streamed; bad pairs are refused naming the file, the line and the entry, the same both ways;
`train_translation` and `lineage evaluate` read them; one such file is text lines where one text column is read."""

import gzip
import json
import re
from pathlib import Path

import datasets
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import exact_resume, hub_dataset

from train import evaluate, train_tokenizer, train_translation
from train.data.corpus import generate_records
from train.data.errors import DataError, DataFileNotFoundError, InvalidUTF8Error, MissingColumnError, UnknownColumnError
from train.data.files import data_files, load_text_dataset
from train.run import checkpoints
from train.run.engine import Engine
from train.run.publish import read_card_metadata
from train.run.recipes import RecipeError, load_recipe
from train.run.run_folder import OutputDirError
from train.train_translation import pair_columns, pairs

datasets.disable_progress_bars()

PAIRS = [(r["source"], r["target"]) for r in generate_records("translation", "train", size=40)]
HUB = ("translation.en", "translation.de")


def _hub_jsonl(folder: Path) -> Path:
    path = folder / "wmt.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "translation": {"de": de, "en": en}}) + "\n"
                            for i, (en, de) in enumerate(PAIRS)), encoding="utf-8")
    return path


def _translation_feature(folder: Path) -> Path:
    """As `load_dataset("wmt/wmt16", "de-en")` gives it: a `Translation` feature, saved with `save_to_disk`."""
    path = folder / "saved"
    features = datasets.Features({"translation": datasets.Translation(languages=["de", "en"])})
    dataset = datasets.Dataset.from_list([{"translation": {"de": de, "en": en}} for en, de in PAIRS], features=features)
    datasets.DatasetDict({"train": dataset}).save_to_disk(str(path), num_shards={"train": 2})
    return path


def _parquet_struct(folder: Path) -> Path:
    path = folder / "pairs.parquet"
    pq.write_table(pa.table({"translation": [{"en": en, "de": de} for en, de in PAIRS]}), path)
    return path


def _tsv(folder: Path) -> Path:
    path = folder / "pairs.tsv"
    pd.DataFrame({"en": [en for en, _ in PAIRS], "de": [de for _, de in PAIRS]}).to_csv(path, sep="\t", index=False)
    return path


LAYOUTS = {"Hub JSON Lines": (_hub_jsonl, HUB), "Translation feature, save_to_disk": (_translation_feature, HUB),
           "parquet struct": (_parquet_struct, HUB), "TSV with the header en de": (_tsv, ("en", "de"))}


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_layout_gives_the_pairs_in_order(layout, streaming, tmp_path):
    write, columns = LAYOUTS[layout]
    data = load_text_dataset(write(tmp_path), columns=pair_columns(*columns), streaming=streaming)
    assert [(row["source"], row["target"]) for row in pairs(data, *columns)] == PAIRS


@pytest.mark.parametrize("streaming", [False, True])
def test_a_pair_without_its_target_entry_is_refused_naming_file_line_and_entry(streaming, tmp_path):
    path = tmp_path / "wmt.jsonl"
    rows = [{"translation": {"de": de, "en": en}} for en, de in PAIRS[:3]] + [{"translation": {"en": "ten"}}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    with pytest.raises(MissingColumnError, match=r"wmt\.jsonl: line 4 \(JSON Lines, column 'translation\.de'\): the "
                                                 r"row has no value for column 'translation\.de'"):
        list(load_text_dataset(path, columns=pair_columns(*HUB), streaming=streaming))


def test_a_language_the_pairs_lack_is_refused_naming_the_entries_they_hold(tmp_path):
    with pytest.raises(UnknownColumnError, match=r"no column 'translation\.fr'; column 'translation' holds the "
                                                 r"entries translation\.de, translation\.en"):
        load_text_dataset(_translation_feature(tmp_path), columns=pair_columns("translation.en", "translation.fr"))


def test_entries_of_a_column_of_strings_are_refused(tmp_path):
    path = tmp_path / "flat.jsonl"
    path.write_text(json.dumps({"translation": "Hello"}) + "\n", encoding="utf-8")
    with pytest.raises(UnknownColumnError, match=r"column 'translation' holds no named entries"):
        load_text_dataset(path, columns=pair_columns(*HUB))


def test_a_saved_dataset_read_by_entries_gains_no_file(tmp_path):
    saved = _translation_feature(tmp_path)
    before = sorted(p.relative_to(saved) for p in saved.rglob("*"))
    load_text_dataset(saved, columns=pair_columns(*HUB))
    assert sorted(p.relative_to(saved) for p in saved.rglob("*")) == before


def _train(source: Path, output_dir: Path, *extra: str) -> tuple[dict, Path]:
    return train_translation.main(["--recipe", "rnn-translation-tiny", "--train_file", str(source), "--max_steps",
                                   "2", "--save_steps", "0", "--progress_bar", "false", "--report_to", "none",
                                   "--tokenizer_vocab_size", "300", "--output_dir", str(output_dir), *extra])


@pytest.mark.parametrize("streaming", ["false", "true"])
def test_train_translation_and_evaluate_read_the_hubs_layout(streaming, tmp_path):
    data = _hub_jsonl(tmp_path)
    results, folder = _train(data, tmp_path / "run", "--source_column", HUB[0], "--target_column", HUB[1],
                             "--streaming", streaming)
    assert results["steps"] == 2
    assert "source_column: translation.en" in (folder / "recipe.yaml").read_text()
    out = evaluate.main(["--model", str(folder), "--dataset", str(data), "--source_column", HUB[0],
                         "--target_column", HUB[1], "--eval_size", "4", "--num_beams", "1", "--max_new_tokens", "4",
                         "--output_dir", str(tmp_path / "eval")])
    report = json.loads((out / "results.json").read_text())
    assert sum(r["sentences"] for r in report["translation"]["bleu_by_length"]) == 4
    again = evaluate.main(["--model", str(folder), "--dataset", str(data), "--eval_size", "4", "--num_beams", "1",
                           "--max_new_tokens", "4", "--output_dir", str(tmp_path / "eval2")])  # the run's columns
    assert json.loads((again / "results.json").read_text())["scores"] == report["scores"]
    with pytest.raises(UnknownColumnError, match=r"no column 'source'.*--source_column and --target_column"):
        evaluate.main(["--model", str(folder), "--dataset", str(data), "--source_column", "source", "--output_dir",
                       str(tmp_path / "eval3")])


def test_the_columns_are_advised_by_name_when_the_data_has_other_ones(tmp_path):
    with pytest.raises(UnknownColumnError, match=r"no column 'source'.*recipe keys source_column and target_column"):
        _train(_hub_jsonl(tmp_path), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_the_pair_columns_are_refused_for_another_command():
    from train import finetune

    with pytest.raises(RecipeError, match=r"recipe key 'source_column' is read by train_translation only"):
        finetune.main(["--recipe", "bert-finetune-nli-tiny", "--source_column", "en"])


def test_the_wmt14_recipe_is_the_papers_and_reads_the_hubs_wmt14(tmp_path, monkeypatch):
    """`transformer-base-wmt14`: the paper's settings (section 5), and its data keys read `wmt/wmt14` (`de-en`) as an
    online load leaves it in the datasets cache, a `Translation` feature, validation split newstest2013; the run
    itself shrunk to a tiny model and 2 steps."""
    recipe = load_recipe("transformer-base-wmt14")
    assert (recipe.model, recipe.lr_scheduler, recipe.warmup_steps, recipe.learning_rate, recipe.max_steps) == (
        "transformer-base", "inverse_sqrt", 4000, 1.0, 100_000)
    assert (recipe.adam_beta2, recipe.adam_epsilon, recipe.label_smoothing, recipe.tokenizer_vocab_size) == (
        0.98, 1e-9, 0.1, 37000)
    assert (recipe.weight_decay, recipe.max_grad_norm, recipe.num_beams, recipe.average_last_checkpoints) == (
        0.0, 0.0, 4, 5)
    assert (recipe.beam_search, recipe.length_penalty) == ("gnmt", 0.6)  # section 6.1's decoding
    files = {}
    for split, rows in (("train", PAIRS), ("validation", PAIRS[:6]), ("test", PAIRS[6:10])):
        files[split] = tmp_path / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps({"translation": {"de": de, "en": en}}) + "\n" for en, de in rows))
    features = datasets.Features({"translation": datasets.Translation(languages=["de", "en"])})
    hub_dataset(tmp_path / "cache", "wmt/wmt14", "de-en", files, features)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    results, folder = train_translation.main([
        "--recipe", "transformer-base-wmt14", "--model", "transformer-tiny", "--tokenizer_vocab_size", "300",
        "--max_seq_length", "32", "--max_new_tokens", "8", "--per_device_train_batch_size", "8", "--max_steps", "2",
        "--warmup_steps", "1", "--save_steps", "0", "--average_last_checkpoints", "0", "--eval_steps", "0",
        "--progress_bar", "false", "--report_to", "none", "--output_dir", str(tmp_path / "run")])
    assert results["steps"] == 2 and "eval_bleu" in results
    recorded = (folder / "recipe.yaml").read_text()
    assert "dataset: wmt/wmt14" in recorded and "source_column: translation.en" in recorded


# ----------------------------------------------------------------------------- two files, a sentence per line

EN, DE = [en for en, _ in PAIRS], [de for _, de in PAIRS]
LANGUAGES = ("en", "de")


def _lines(texts: list[str], end: str = "\n", last: bool = True) -> bytes:
    return (end.join(texts) + (end if last else "")).encode()


def _pair(folder: Path, en: bytes, de: bytes, compressed: tuple[str, str] = ("", ""), name: str = "train") -> Path:
    """`<folder>/<name>.en` and `.de` (each gzipped where `compressed` says `.gz`); the prefix that names them."""
    for language, data, suffix in zip(LANGUAGES, (en, de), compressed):
        Path(f"{folder / name}.{language}{suffix}").write_bytes(gzip.compress(data) if suffix else data)
    return folder / name


WRITTEN = {  # as the tools write them
    "a line each, a trailing newline (fairseq, Moses)": lambda d: _pair(d, _lines(EN), _lines(DE)),
    "gzipped, the target without a trailing newline": lambda d: _pair(d, _lines(EN), _lines(DE, last=False),
                                                                      (".gz", ".gz")),
    "Windows line ends": lambda d: _pair(d, _lines(EN, "\r\n"), _lines(DE, "\r\n")),
}


def _read(prefix: Path, streaming: bool) -> list[dict]:
    return list(load_text_dataset(prefix, columns=pair_columns(*LANGUAGES), streaming=streaming))


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("written", list(WRITTEN))
def test_two_files_of_a_sentence_per_line_give_the_rows_of_the_same_json_lines_file(written, streaming, tmp_path):
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text("".join(json.dumps({"en": en, "de": de}) + "\n" for en, de in PAIRS), encoding="utf-8")
    expected = _read(jsonl, streaming)
    assert [(row["en"], row["de"]) for row in expected] == PAIRS
    data = load_text_dataset(WRITTEN[written](tmp_path), columns=pair_columns(*LANGUAGES), streaming=streaming)
    assert list(data) == expected
    if streaming:
        assert data.n_shards == 1  # read in lockstep, as one file
    else:
        assert len(data.cache_files) == 2  # each file's Arrow table, memory-mapped side by side: nothing copied


@exact_resume
def test_a_resumed_stream_of_two_files_continues_at_the_next_line_and_names_lines_as_before(tmp_path):
    en, de = [f"Sentence {i}." for i in range(2500)], [f"Satz {i}." for i in range(2500)]
    de[2300] = ""
    prefix = _pair(tmp_path, _lines(en), _lines(de))
    stream = load_text_dataset(prefix, columns=pair_columns(*LANGUAGES), streaming=True)
    read = iter(stream)
    assert [next(read)["de"] for _ in range(1500)] == de[:1500]
    resumed = load_text_dataset(prefix, columns=pair_columns(*LANGUAGES), streaming=True)
    resumed.load_state_dict(stream.state_dict())
    read = iter(resumed)
    assert next(read) == {"en": en[1500], "de": de[1500]}
    with pytest.raises(MissingColumnError, match=rf"^{re.escape(str(prefix))}\.de: line 2301 \(column 'de', paired "
                                                 rf"with line 2301 of {re.escape(str(prefix))}\.en\)"):
        list(read)


def _losses(output_dir: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (output_dir / "logs" / "metrics.jsonl").read_text().splitlines()]
    return {record["step"]: record["loss"] for record in records if "loss" in record}


@exact_resume
def test_an_interrupted_streamed_run_on_two_files_resumes_to_the_uninterrupted_runs_losses(tmp_path, monkeypatch):
    """40 pairs in micro-batches of 8: a pass is 5 steps; interrupted in step 7, resumed from the checkpoint of step 6,
    one micro-batch into the second pass."""
    prefix = WRITTEN["a line each, a trailing newline (fairseq, Moses)"](tmp_path)
    keys = ("--streaming", "true", "--max_steps", "8", "--save_steps", "3", "--save_total_limit", "5",
            "--logging_steps", "1", "--per_device_train_batch_size", "8")
    _train_pairs(prefix, tmp_path / "straight", *keys)
    compute_loss = Engine._compute_loss

    def interrupted(engine, batch):
        if engine.state.step + 1 == 7:
            raise KeyboardInterrupt("simulated interruption")
        return compute_loss(engine, batch)

    monkeypatch.setattr(Engine, "_compute_loss", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _train_pairs(prefix, tmp_path / "resumed", *keys)
    monkeypatch.undo()
    _train_pairs(prefix, tmp_path / "resumed", *keys, "--resume_from_checkpoint", "latest")
    assert [r["step"] for r in json.loads((tmp_path / "resumed" / "run.json").read_text())["resumes"]] == [6]
    assert _losses(tmp_path / "resumed") == _losses(tmp_path / "straight")  # bit for bit
    assert sorted(_losses(tmp_path / "straight")) == list(range(1, 9))


@pytest.mark.parametrize("streaming", [False, True])
def test_files_of_other_line_counts_are_refused_naming_both(streaming, tmp_path):
    prefix = _pair(tmp_path, _lines(EN), _lines(DE[:-1]))
    en, de = (re.escape(f"{prefix}.{language}") for language in LANGUAGES)
    counted = (rf"{de} ends at line 39, but {en} goes on at line 40" if streaming
               else rf"{en} has 40 lines and {de} has 39")
    with pytest.raises(DataError, match=rf"^{counted}: the two files of a translation pair must have the same number "
                                        r"of lines, as line i of each holds a sentence and its translation$"):
        _read(prefix, streaming)


def test_an_empty_line_is_refused_as_an_empty_json_lines_value_naming_its_file_and_line_both_ways(tmp_path):
    de = list(DE)
    de[6] = ""
    prefix = _pair(tmp_path, _lines(EN), _lines(de))
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text("".join(json.dumps({"en": en, "de": de}) + "\n" for en, de in zip(EN, de)), encoding="utf-8")
    with pytest.raises(MissingColumnError) as as_json_lines:
        _read(jsonl, False)
    messages = []
    for streaming in (False, True):
        with pytest.raises(MissingColumnError) as refused:
            _read(prefix, streaming)
        messages.append(str(refused.value))
    refusal = str(as_json_lines.value).split("): ", 1)[1]
    assert messages == [f"{prefix}.de: line 7 (column 'de', paired with line 7 of {prefix}.en): {refusal}"] * 2


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_a_line_that_is_no_utf8_is_refused_naming_its_file_and_line(suffix, streaming, tmp_path):
    de = _lines(DE).replace(DE[4].encode(), DE[4].encode("latin-1") + b" \xe9t\xe9")
    prefix = _pair(tmp_path, _lines(EN), de, ("", suffix))
    with pytest.raises(InvalidUTF8Error, match=rf"^{re.escape(f'{prefix}.de{suffix}')}: line 5: not valid UTF-8"):
        _read(prefix, streaming)


def test_one_file_of_a_pair_without_the_other_is_refused_naming_it(tmp_path):
    (tmp_path / "train.en").write_bytes(_lines(EN))
    with pytest.raises(DataFileNotFoundError, match=rf"^{re.escape(str(tmp_path / 'train.de'))}: no such data file, "
                                                    rf"but {re.escape(str(tmp_path / 'train.en'))} is"):
        _read(tmp_path / "train", False)


@pytest.mark.parametrize("command", ["read", "train"])
def test_one_side_of_a_pair_named_as_the_data_is_refused_naming_the_prefix_and_its_languages(command, tmp_path):
    """`--dataset test.en` for a translator (before: 'unknown data file type', advising a .txt name or data_format,
    neither of which reads the pair)."""
    prefix = _pair(tmp_path, _lines(EN), _lines(DE), name="test")
    side = re.escape(str(prefix))
    refusal = (rf"^{side}\.en: one side of a translation pair, named alone; a pair's two files \(line i of each holds "
               rf"a sentence and its translation\) are named by their prefix: give {side}, with source_column and "
               r"target_column naming their languages \(en and de\)$")
    with pytest.raises(DataError, match=refusal):
        if command == "read":
            load_text_dataset(f"{prefix}.en", columns=pair_columns())
        else:
            _train(Path(f"{prefix}.en"), tmp_path / "run")


@pytest.mark.parametrize("command", ["read", "train"])
def test_a_file_both_plain_and_compressed_is_refused_naming_both_before_anything_is_read(command, tmp_path):
    """`train.en` beside `train.en.gz` (before: the plain one was read, silently)."""
    prefix = _pair(tmp_path, _lines(EN), _lines(DE))
    (tmp_path / "train.en.gz").write_bytes(gzip.compress(_lines(EN[:3])))
    with pytest.raises(DataError, match=rf"^{re.escape(str(prefix))}\.en and {re.escape(str(prefix))}\.en\.gz are "
                                        rf"both files: a translation pair named {re.escape(str(prefix))} reads one "
                                        r"file of its column 'en', plain or compressed; remove or rename one$"):
        _read(prefix, False) if command == "read" else _train_pairs(prefix, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def _train_pairs(prefix: Path, output_dir: Path, *extra: str) -> tuple[dict, Path]:
    return _train(prefix, output_dir, "--source_column", "en", "--target_column", "de", *extra)


def test_a_prefix_of_no_files_is_not_found_naming_the_two_files_it_would_read(tmp_path):
    prefix = tmp_path / "train"
    with pytest.raises(DataFileNotFoundError, match=rf"^{re.escape(str(prefix))}: no such data file \(recipe key "
                                                    rf"'train_file'\); a translation pair named so is read from "
                                                    rf"{re.escape(str(prefix))}\.en and {re.escape(str(prefix))}\.de"):
        _train_pairs(prefix, tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("output_dir", [".", "train"])
def test_the_run_folder_may_not_hold_or_be_the_prefix_of_its_pair(output_dir, tmp_path):
    prefix = WRITTEN["a line each, a trailing newline (fairseq, Moses)"](tmp_path)
    with pytest.raises(OutputDirError, match=rf"(holds|is) an input of this run \(recipe key 'train_file': "
                                             rf"{re.escape(str(prefix))}\)"):
        _train_pairs(prefix, tmp_path / output_dir)


@pytest.mark.parametrize("written, streaming, evaluated", [
    ("a line each, a trailing newline (fairseq, Moses)", "false", "validation_file"),
    ("gzipped, the target without a trailing newline", "true", "eval_size")])
def test_train_translation_and_evaluate_read_two_files_by_their_prefix(written, streaming, evaluated, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    prefix = WRITTEN[written](data)
    validation = (["--validation_file", str(_pair(data, _lines(EN[:8]), _lines(DE[:8]), name="valid"))]
                  if evaluated == "validation_file" else ["--eval_size", "8"])
    results, folder = _train_pairs(prefix, tmp_path / "run", "--streaming", streaming, *validation)
    assert results["steps"] == 2 and "eval_bleu" in results
    assert f"train_file: {prefix}\n" in (folder / "recipe.yaml").read_text()
    card = (folder / "README.md").read_text()
    files = sorted(p.name for p in data.glob("train.*"))
    assert f"Its training pairs are the lines of `{files[1]}` and `{files[0]}`." in card  # en, then de
    assert str(tmp_path) not in card and "\n- train\n" in card  # the prefix by its name
    (checkpoint,) = checkpoints.complete_checkpoints(tmp_path / "run" / "checkpoints")
    recorded = json.loads((checkpoint / checkpoints.STATE_FILE).read_text())["run"]["dataset"]["fingerprint"]
    assert sorted(recorded) == sorted(str(data / name) for name in files)
    if evaluated == "eval_size":
        assert results["held_out_copies"] == 0 and "split: train[:8]" in card
    scored = ["--dataset", str(prefix), "--split", "train", "--eval_size", "8"]
    out = evaluate.main(["--model", str(folder), *scored, "--num_beams", "1", "--max_new_tokens", "4",
                         "--write_card", "--output_dir", str(tmp_path / "eval")])  # the run's columns, en and de
    report = json.loads((out / "results.json").read_text())
    assert read_card_metadata(folder / "README.md")["model-index"][0]["results"][-1]["dataset"]["name"] == "train"
    assert isinstance(report["scores"]["translation"]["bleu"], float)
    assert report["translation"]["dataset"] == str(prefix) and "split" not in report["translation"]  # one split
    assert sum(r["sentences"] for r in report["translation"]["bleu_by_length"]) == 8


@pytest.mark.parametrize("streaming", [[], ["--streaming"]])
def test_lineage_train_tokenizer_reads_two_files_by_their_prefix_as_a_file_of_both_columns(streaming, tmp_path):
    """Two text columns of a prefix name a pair's files: one vocabulary from both sides' lines, the same as from a
    JSON Lines file of the two columns."""
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text("".join(json.dumps({"en": en, "de": de}) + "\n" for en, de in PAIRS), encoding="utf-8")
    prefix = _pair(tmp_path, _lines(EN), _lines(DE, "\r\n"), ("", ".gz"))
    for source, folder in ((jsonl, tmp_path / "tok-jsonl"), (prefix, tmp_path / "tok-pair")):
        train_tokenizer.main(["--family", "seq2seq", "--vocab_size", "300", "--dataset", str(source), "--text_column",
                              "en", "--text_column", "de", "--output_dir", str(folder), *streaming])
    vocabulary = (tmp_path / "tok-pair" / "tokenizer.json").read_text()
    assert vocabulary == (tmp_path / "tok-jsonl" / "tokenizer.json").read_text()
    assert {"\u2581two", "\u2581zwei"} <= json.loads(vocabulary)["model"]["vocab"].keys()


@pytest.mark.parametrize("relative", [False, True])
def test_a_prefix_read_as_one_text_column_names_its_language_files(relative, tmp_path, monkeypatch):
    """`--dataset train --text_column en` beside train.en and train.de is no pair (one column): the error names the
    file to give (before: a path's 'no such data file', or the offline Hub's error for a relative one, alone)."""
    prefix = _pair(tmp_path, _lines(EN), _lines(DE), ("", ".gz"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises((DataError, DataFileNotFoundError),  # the Hub's error, a path's
                       match=r"train\.de\.gz and .*train\.en are text files of a language, named as a translation "
                             r"pair's sides are: name one as the data, e.g. .*train\.en, to read its lines as the "
                             r"column 'text'"):
        load_text_dataset("train" if relative else prefix, columns=[("en", "text")])


@pytest.mark.parametrize("streaming", [False, True])
def test_a_file_of_a_language_is_read_as_text_lines_where_the_task_reads_one_text_column(streaming, tmp_path):
    """`train.en`, `train.de.gz`: a line per row, as a `.txt` file (before: an unknown data file type); a task of
    other columns still refuses it, saying where it is text."""
    prefix = _pair(tmp_path, _lines(EN), _lines(DE), ("", ".gz"))
    (tmp_path / "de.txt").write_bytes(_lines(DE))
    for name, texts in (("train.en", EN), ("train.de.gz", DE)):
        rows = load_text_dataset(tmp_path / name, columns=[("text", "text")], streaming=streaming)
        assert [row["text"] for row in rows] == texts
    assert list(load_text_dataset(f"{prefix}.de.gz", columns=[("text", "text")], streaming=streaming)) == list(
        load_text_dataset(tmp_path / "de.txt", columns=[("text", "text")], streaming=streaming))
    with pytest.raises(DataError, match=r"train\.en: unknown data file type \(a file of a language, as train\.en, is "
                                        r"read as text lines where the task reads one column of text"):
        load_text_dataset(f"{prefix}.en", columns=[("text", "text"), ("label", "label")], streaming=streaming)


@pytest.mark.parametrize("streaming", [False, True])
def test_a_folder_of_language_files_is_read_as_its_files_are(streaming, tmp_path, capsys):
    """A folder of `train.en`, `train.de.gz`, `valid.en` (as fairseq's and WMT's data folders hold them, beside
    `prepare.sh` and `notes.md`) gives the lines of its files of a language in name order where the task reads one
    text column, as each named alone does, a shard each streamed (before: 'folder holds no data files'), and is what
    a checkpoint fingerprints; its scripts stay out; a translation pair's task is told to name the prefix."""
    folder = tmp_path / "wmt"
    folder.mkdir()
    _pair(folder, _lines(EN), _lines(DE), ("", ".gz"))
    (folder / "valid.en").write_bytes(_lines(EN[:3]))
    (folder / "prepare.sh").write_text("#!/bin/sh\nsacrebleu -t wmt14 -l en-de --echo src > newstest2014.en\n")
    (folder / "notes.md").write_text("# WMT 2014\n")
    files = [folder / "train.de.gz", folder / "train.en", folder / "valid.en"]
    rows = load_text_dataset(folder, columns=[("text", "text")], streaming=streaming)
    assert [row["text"] for row in rows] == DE + EN + EN[:3] and (rows.n_shards == 3 if streaming else True)
    assert f"3 data files, read in this order: {', '.join(map(str, files))}\n" in capsys.readouterr().out
    assert data_files(folder, [("text", "text")]) == files
    recipe = load_recipe(None, {"train_file": str(folder)})
    recipe.read_columns = (("text", "text"),)
    assert list(checkpoints.data_fingerprint(str(folder), None, recipe.data_files())) == list(map(str, files))
    with pytest.raises(DataFileNotFoundError, match=f"^{re.escape(str(folder))}: folder holds no data files "
                                                    f"\\(.txt, .*, .parquet\\); a translation pair's two files of a "
                                                    f"language are named by their prefix: e.g. "
                                                    f"{re.escape(str(folder / 'train'))}$"):
        load_text_dataset(folder, columns=pair_columns(*LANGUAGES), streaming=streaming)
    (folder / "notes.md").rename(folder / "train.xx")
    assert [row["text"] for row in load_text_dataset(folder, columns=[("text", "text")])] == DE + EN + EN[:3]


def test_lineage_train_tokenizer_reads_a_folder_of_language_files_as_one_file_of_their_lines(tmp_path):
    """The folder's vocabulary is that of a `.txt` file of the same lines in the same order."""
    folder = tmp_path / "wmt"
    folder.mkdir()
    _pair(folder, _lines(EN), _lines(DE), (".gz", ""))
    (tmp_path / "both.txt").write_bytes(_lines(DE + EN))
    for source, out in ((folder, tmp_path / "tok-folder"), (tmp_path / "both.txt", tmp_path / "tok-txt")):
        train_tokenizer.main(["--family", "seq2seq", "--vocab_size", "300", "--dataset", str(source), "--output_dir",
                              str(out)])
    vocabularies = [(tmp_path / name / "tokenizer.json").read_text() for name in ("tok-folder", "tok-txt")]
    assert vocabularies[0] == vocabularies[1]
