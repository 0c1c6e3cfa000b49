"""CoNLL files as the NER corpora ship them (CoNLL-2003's four columns with -DOCSTART- lines, WNUT-17's word and tag
by a tab, gzip, Windows line ends, no blank line at the end or several in a row, no suffix as `eng.train`) read as the
rows of the same sentences in JSON Lines, in memory and streamed, a folder of them too; bad lines are refused naming
the file and line the same both ways; `finetune --task token-classification` trains on them (NER, and POS with
`label_column: pos_tags`) and `lineage evaluate` scores one."""

import csv
import gzip
import json
from pathlib import Path

import datasets
import pytest

from train import evaluate, finetune
from train.data.corpus import NER_LABELS, generate_records
from train.data.errors import DataError, DataFileNotFoundError, EmptyDataFileError, InvalidUTF8Error, UnknownColumnError
from train.data.files import load_text_dataset
from train.data.labels import LabelError, class_labels

datasets.disable_progress_bars()

COLUMNS = [("tokens", "words"), ("ner_tags", "tags")]
DOCSTART = "-DOCSTART- -X- -X- O\n\n"


def _sentences(split: str, size: int) -> list[dict]:
    """NER sentences, each word with a POS and a chunk tag of its own (as CoNLL-2003's)."""
    rows = []
    for index, row in enumerate(generate_records("ner", split, size=size)):
        tags = [NER_LABELS[t] for t in row["ner_tags"]]
        pos = ["NNP" if t != "O" else "CD" if w.isdigit() else "NN" for w, t in zip(row["tokens"], tags)]
        rows.append({"id": str(index), "tokens": row["tokens"], "pos_tags": pos,
                     "chunk_tags": ["B-NP" if p == "NNP" else "O" for p in pos], "ner_tags": tags})
    return rows


SENTENCES = _sentences("train", 12)
FOUR = ("tokens", "pos_tags", "chunk_tags", "ner_tags")


def _lines(rows: list[dict], columns: tuple[str, ...], separator: str) -> list[str]:
    """Each sentence's lines, a token per line."""
    return ["".join(separator.join(values) + "\n" for values in zip(*(row[c] for c in columns))) for row in rows]


def conll2003(rows: list[dict] = SENTENCES) -> str:
    """As eng.train: -DOCSTART- and a blank line before each document (of 5 sentences), a blank line after each
    sentence."""
    blocks = _lines(rows, FOUR, " ")
    return "".join((DOCSTART if i % 5 == 0 else "") + block + "\n" for i, block in enumerate(blocks))


def wnut(rows: list[dict] = SENTENCES) -> str:
    return "".join(block + "\n" for block in _lines(rows, ("tokens", "ner_tags"), "\t"))


LAYOUTS = {  # file name -> (its bytes, the columns of its rows)
    "train.txt": (lambda: conll2003().encode(), FOUR),
    "eng.train": (lambda: conll2003().encode(), FOUR),
    "train.txt.gz": (lambda: gzip.compress(conll2003().encode()), FOUR),
    "wnut17train.conll": (lambda: wnut().encode(), ("tokens", "ner_tags")),
    "train.tsv": (lambda: wnut().encode(), ("tokens", "ner_tags")),
    "windows.iob": (lambda: conll2003().replace("\n", "\r\n").encode(), FOUR),
    "gaps.bio": (lambda: ("\n\n\n" + wnut().replace("\n\n", "\n\n \n\t\n")).rstrip("\n").encode(),
                 ("tokens", "ner_tags")),
}


def _jsonl(path: Path, columns: tuple[str, ...], rows: list[dict] = SENTENCES) -> Path:
    path.write_text("".join(json.dumps({c: row[c] for c in ("id", *columns)}) + "\n" for row in rows))
    return path


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_every_layout_gives_the_rows_of_its_json_lines_file(name, streaming, tmp_path, capsys):
    write, columns = LAYOUTS[name]
    path = tmp_path / name
    path.write_bytes(write())
    rows = load_text_dataset(path, columns=COLUMNS, streaming=streaming)
    same = load_text_dataset(_jsonl(tmp_path / "same.jsonl", columns), columns=COLUMNS, streaming=streaming)
    assert list(rows) == list(same)
    assert (rows.n_shards == 1) if streaming else (rows.column_names == ["id", *columns])
    skipped = " (3 -DOCSTART- lines skipped)" if columns == FOUR else ""
    assert capsys.readouterr().out == (f"{path}: CoNLL layout, {len(columns)} columns ({', '.join(columns)}), 12 "
                                       f"sentences{skipped}\n")


def test_the_classes_are_those_of_the_same_json_lines_in_one_order(tmp_path):
    (tmp_path / "train.txt").write_text(conll2003())
    for column in ("ner_tags", "pos_tags"):
        columns = [("tokens", "words"), (column, "tags")]
        conll = load_text_dataset(tmp_path / "train.txt", columns=columns)
        same = load_text_dataset(_jsonl(tmp_path / "same.jsonl", FOUR), columns=columns)
        names, rows, _ = class_labels(conll, None, column, ("train.txt", "train.txt"))
        assert names == class_labels(same, None, column, ("same.jsonl", "same.jsonl"))[0] == sorted(names)
        assert rows[0][column] == [names.index(tag) for tag in SENTENCES[0][column]]


def test_several_files_are_read_in_order_a_stream_a_shard_each(tmp_path):
    first, second = tmp_path / "a.txt", tmp_path / "b.txt.gz"
    first.write_text(conll2003(SENTENCES[:5]))
    second.write_bytes(gzip.compress(conll2003(SENTENCES[5:]).encode()))
    rows = load_text_dataset([first, second], columns=COLUMNS)
    assert rows["tokens"] == [row["tokens"] for row in SENTENCES]
    assert rows["id"] == [str(i) for i in range(5)] + [str(i) for i in range(7)]  # each file's, as the Hub's
    assert load_text_dataset([first, second], columns=COLUMNS, streaming=True).n_shards == 2


@pytest.mark.parametrize("streaming", [False, True])
def test_a_folder_of_conll_files_is_read_for_token_classification_alone(streaming, tmp_path):
    """Its `.conll`, `.iob` and `.bio` files, in name order (before: refused as a folder of no data files); a task
    that reads no word lists still lists only its own suffixes."""
    folder = tmp_path / "wnut"
    folder.mkdir()
    for name, rows in (("a.conll", SENTENCES[:4]), ("b.iob", SENTENCES[4:8]), ("c.bio", SENTENCES[8:])):
        (folder / name).write_text(wnut(rows))
    rows = load_text_dataset(folder, columns=COLUMNS, streaming=streaming)
    assert [row["tokens"] for row in rows] == [row["tokens"] for row in SENTENCES]
    assert rows.n_shards == 3 if streaming else len(rows) == 12
    with pytest.raises(DataFileNotFoundError, match=r"wnut: folder holds no data files \(.txt, .*.parquet, "
                                                    r"<prefix>.<language> \(train.en\)\)"):
        load_text_dataset(folder, columns=[("text", "text")], streaming=streaming)


README = "CoNLL-2003 shared task: language-independent named entity recognition.\nSee the paper for the tags.\n"


@pytest.mark.parametrize("streaming", [False, True])
def test_a_folders_readme_and_license_are_left_out_and_said(streaming, tmp_path, capsys):
    """`README.txt` and `LICENSE.txt` beside the data, as corpora ship them, are left out of the folder and said once
    (before: refused as bad CoNLL, 'README.txt: line 2: 8 columns where line 1 ... has 9'); a folder of CoNLL-2003's
    files (`eng.train`, no suffix a folder lists) beside its README is refused naming a file to give."""
    folder = tmp_path / "wnut"
    folder.mkdir()
    (folder / "train.conll").write_text(wnut())
    (folder / "README.txt").write_text(README)
    (folder / "LICENSE.txt").write_text("Creative Commons Attribution 4.0 International\n")
    rows = load_text_dataset(folder, columns=COLUMNS, streaming=streaming)
    assert [row["tokens"] for row in rows] == [row["tokens"] for row in SENTENCES]
    assert capsys.readouterr().out.startswith(f"{folder}: LICENSE.txt, README.txt left out: documentation by their "
                                              f"name, not data (name a file to read it)\n{folder / 'train.conll'}: "
                                              f"CoNLL layout")
    (folder / "train.conll").rename(folder / "eng.train")
    with pytest.raises(DataFileNotFoundError, match=f"^{folder}: folder holds no data files \\(.txt, .*, .bio\\); "
                                                    f"LICENSE.txt, README.txt left out: documentation by their name, "
                                                    f"not data; a CoNLL file of another suffix is read where it is "
                                                    f"named \\(a file per split\\): e.g. {folder / 'eng.train'}$"):
        load_text_dataset(folder, columns=COLUMNS, streaming=streaming)
    assert load_text_dataset(folder / "eng.train", columns=COLUMNS)["tokens"] == [row["tokens"] for row in SENTENCES]


def _bad(path: Path, streaming: bool):
    return list(load_text_dataset(path, columns=COLUMNS, streaming=streaming))


@pytest.mark.parametrize("streaming", [False, True])
def test_bad_files_are_refused_naming_the_file_and_line_both_ways(streaming, tmp_path):
    path = tmp_path / "train.txt"
    lines = conll2003().splitlines(keepends=True)
    path.write_text("".join(lines[:6] + ["New York NNP B-NP B-LOC\n"] + lines[6:]))
    with pytest.raises(DataError, match=f"^{path}: line 7: 5 columns where line 3, the first token line, has 4 "
                                        f"\\(split at spaces\\); a CoNLL file holds a token per line: its word, "
                                        f"then its tags \\(the last one the label\\), in the same columns on every "
                                        f"line, and a blank line after each sentence$"):
        _bad(path, streaming)
    path.write_text("EU\tB-ORG\nrejects\nGerman\tB-MISC\n")
    with pytest.raises(DataError, match=f"^{path}: line 2: 1 column where line 1, the first token line, has 2 "
                                        f"\\(split at tabs\\); a CoNLL file"):
        _bad(path, streaming)
    path.write_text("EU\tB-ORG\n\tO\n")
    with pytest.raises(DataError, match=f"^{path}: line 2: column 1 is empty; a CoNLL file"):
        _bad(path, streaming)
    path.write_text("The old lighthouse stands at the end of a narrow stone pier.\nEvery evening the keeper climbed.\n")
    with pytest.raises(DataError, match=f"^{path}: line 2: 5 columns where line 1, the first token line, has 12"):
        _bad(path, streaming)
    path.write_text("Lighthouse\n")
    with pytest.raises(DataError, match=f"^{path}: line 1: one column \\('Lighthouse'\\), no tag; a CoNLL file"):
        _bad(path, streaming)
    path.write_text(DOCSTART * 2)
    with pytest.raises(EmptyDataFileError, match=f"^{path}: no sentence, only -DOCSTART- lines"):
        _bad(path, streaming)
    path.write_text("")
    with pytest.raises(EmptyDataFileError, match=f"^{path}: the data file is empty$"):
        _bad(path, streaming)
    path.write_bytes(conll2003().encode().replace(b"Ortega", b"Ort\xe9ga", 1))
    with pytest.raises(InvalidUTF8Error, match=f"^{path}: line 3: not valid UTF-8"):
        _bad(path, streaming)
    path.write_text(conll2003())
    with pytest.raises(UnknownColumnError, match=f"^{path}: no column 'tags'; read as CoNLL \\(4 columns\\), the file "
                                                 f"has the columns tokens, pos_tags, chunk_tags, ner_tags$"):
        load_text_dataset(path, columns=[("tokens", "words"), ("tags", "tags")], streaming=streaming)
    (tmp_path / "two.txt").write_text(wnut())
    with pytest.raises(DataError, match=f"^{tmp_path / 'two.txt'} has 2 columns but {path} has 4: read together"):
        load_text_dataset([path, tmp_path / "two.txt"], columns=COLUMNS, streaming=streaming)


def _run(out: Path, *extra: str):
    return finetune.main(["--recipe", "bert-finetune-nli-tiny", "--task", "token-classification", "--output_dir",
                          str(out), "--progress_bar", "false", "--max_steps", "3", "--save_steps", "0", *extra])


def test_finetune_trains_on_conll_files_and_lineage_evaluate_scores_one(tmp_path, capsys):
    train, valid = tmp_path / "eng.train", tmp_path / "eng.testa"
    train.write_text(conll2003(_sentences("train", 60)))
    valid.write_text(conll2003(_sentences("validation", 20)))
    results, folder = _run(tmp_path / "ner", "--train_file", str(train), "--validation_file", str(valid))
    said = capsys.readouterr().out
    assert (f"{train}: CoNLL layout, 4 columns (tokens, pos_tags, chunk_tags, ner_tags), 60 sentences (12 -DOCSTART- "
            f"lines skipped)\n") in said and f"{valid}: CoNLL layout" in said
    config = json.loads((folder / "config.json").read_text())
    assert list(config["id2label"].values()) == sorted(NER_LABELS)
    out = evaluate.main(["--model", str(folder), "--dataset", str(valid), "--output_dir", str(tmp_path / "eval")])
    scored = json.loads((out / "results.json").read_text())
    assert scored["data"] == {"dataset": str(valid), "rows": 20, "task": "token-classification"}
    assert scored["scores"]["token-classification"]["entity_f1"] == pytest.approx(results["eval_entity_f1"])
    results, folder = _run(tmp_path / "pos", "--train_file", str(train), "--validation_file", str(valid),
                           "--label_column", "pos_tags")
    assert set(json.loads((folder / "config.json").read_text())["id2label"].values()) == {"CD", "NN", "NNP"}
    assert 0 <= results["eval_accuracy"] <= 1 and "eval_entity_f1" not in results


def test_finetune_refuses_bad_conll_files_before_anything_is_written(tmp_path):
    train, valid = tmp_path / "train.txt", tmp_path / "valid.txt"
    train.write_text(conll2003())
    rows = _sentences("validation", 3)
    rows[0]["ner_tags"][0] = "B-MISC"
    valid.write_text(conll2003(rows))
    with pytest.raises(LabelError, match=f"^{valid}: line 3 \\(CoNLL sentence 1, column 'ner_tags'\\): tag 'B-MISC' "
                                         f"\\(word 1\\) never occurs in the training data"):
        _run(tmp_path / "out", "--train_file", str(train), "--validation_file", str(valid))
    lines = conll2003(rows).splitlines(keepends=True)
    valid.write_text("".join([*lines[:3], lines[3].rsplit(" ", 1)[0] + "\n", *lines[4:]]))
    with pytest.raises(DataError, match=f"^{valid}: line 4: 3 columns where line 3"):
        _run(tmp_path / "out", "--train_file", str(train), "--validation_file", str(valid))
    assert not (tmp_path / "out").exists()


def _token_frame(rows: list[dict], names: dict[str, str]):
    """A token per row as pandas holds a corpus (`names`: column -> the frame's name), a row of no value after each
    sentence, which `to_csv` writes as empty fields."""
    import pandas as pd

    records = []
    for row in rows:
        records += [[row[column][i] for column in names] for i in range(len(row["tokens"]))] + [[None] * len(names)]
    return pd.DataFrame(records, columns=list(names.values()))


@pytest.mark.parametrize("streaming", [False, True])
def test_a_header_line_names_the_columns_and_is_read_as_no_token(streaming, tmp_path, capsys):
    """A `.tsv` of pandas' `to_csv(sep="\t", index=False)` or a spreadsheet's (a header line, `\r\n`) gives the rows of
    the same sentences in JSON Lines, its columns named by the header (before: the header was the first sentence's
    first token, `token` tagged `ner`); a header of its own order names the columns in it; a file whose first word is
    `Word` (no header: its last field is a tag) keeps it."""
    path = tmp_path / "train.tsv"
    _token_frame(SENTENCES, dict(zip(FOUR, ("token", "pos", "chunk", "ner")))).to_csv(path, sep="\t", index=False)
    rows = load_text_dataset(path, columns=COLUMNS, streaming=streaming)
    assert list(rows) == list(load_text_dataset(_jsonl(tmp_path / "same.jsonl", FOUR), columns=COLUMNS))
    assert capsys.readouterr().out.startswith(f"{path}: CoNLL layout, 4 columns (tokens, pos_tags, chunk_tags, "
                                              f"ner_tags) named by its header (token, pos, chunk, ner), 12 sentences\n")
    with open(path, "w", newline="", encoding="utf-8") as handle:  # as a spreadsheet saves tab-separated text
        writer = csv.writer(handle, delimiter="\t", lineterminator="\r\n")
        writer.writerow(["Word", "NER", "POS"])
        for row in SENTENCES:
            writer.writerows([*zip(row["tokens"], row["ner_tags"], row["pos_tags"]), []])
    rows = list(load_text_dataset(path, columns=[*COLUMNS, ("pos_tags", "tags")], streaming=streaming))
    assert rows == list(load_text_dataset(_jsonl(tmp_path / "same.jsonl", ("tokens", "ner_tags", "pos_tags")),
                                          columns=[*COLUMNS, ("pos_tags", "tags")]))
    path.write_text("Word NN O\nis VBZ O\nEU NNP B-ORG\n\n")
    assert [row["tokens"] for row in load_text_dataset(path, columns=COLUMNS, streaming=streaming)] == [
        ["Word", "is", "EU"]]


@pytest.mark.parametrize("streaming", [False, True])
def test_a_table_that_is_no_conll_file_is_refused_saying_how_to_write_one(streaming, tmp_path):
    """pandas' `to_csv(sep="\t")` with its index (an unnamed first column; before: 'column 1 is empty'), or of a
    sentence per row, its word lists as Python writes them (before: read as one sentence of list-shaped tokens); a
    header naming one column twice."""
    path = tmp_path / "train.tsv"
    _token_frame(SENTENCES, {"tokens": "token", "ner_tags": "ner"}).to_csv(path, sep="\t")
    with pytest.raises(DataError, match=f"^{path}: line 1: a header \\(token, ner\\) after an unnamed first column, as "
                                        f"pandas' to_csv writes the index of a DataFrame; write the file without it: "
                                        f"df.to_csv\\(path, sep='\\\\t', index=False\\)"):
        _bad(path, streaming)
    import pandas as pd

    pd.DataFrame(SENTENCES)[["tokens", "ner_tags"]].to_csv(path, sep="\t", index=False)
    with pytest.raises(DataError, match=f"^{path}: line 2: each column holds a list \\(\"\\['Ortega', .*, a "
                                        f"sentence per line as pandas writes a DataFrame of word lists; write it as "
                                        f"JSON Lines instead, df.to_json\\(path, orient='records', lines=True\\)"):
        _bad(path, streaming)
    path.write_text("token\tner\tner_tags\nEU\tB-ORG\tB-ORG\n")
    with pytest.raises(DataError, match=f"^{path}: line 1: the header \\(token, ner, ner_tags\\) names the column "
                                        f"'ner_tags' twice"):
        _bad(path, streaming)
    path.write_text("token ner\nEU B-ORG O\n")
    with pytest.raises(DataError, match=f"^{path}: line 2: 3 columns where line 1, the header, has 2"):
        _bad(path, streaming)
