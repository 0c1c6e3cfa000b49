"""Bad data as users give it (a user study): each is refused before any training with an error naming the file, the
line as an editor counts it and the column, and saying what is allowed; or, where the data is sound, it trains:
string NER tags, and BERT's own pretraining layout in a .txt file."""

import bz2
import gzip
import json
import lzma
import pickle
import shutil
import subprocess
from pathlib import Path

import datasets
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from transformers import AutoConfig

from train.data.encoders import LabelAlignmentError
from train.data.errors import DataError, MalformedRowError
from train.data.files import load_text_dataset
from train.data.labels import LabelError, class_labels
from train.finetune import main as finetune
from train.pretrain_bert import main as pretrain_bert
from train.run.recipes import RecipeError, recipe_from_dict

datasets.disable_progress_bars()
RUN = ["--progress_bar", "false", "--report_to", "none", "--dataset", "", "--max_steps", "2", "--save_steps", "0"]


def lines(path, rows: list) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def load(path, columns, tmp_path):
    return load_text_dataset(str(path), columns=columns, cache_dir=str(tmp_path / "cache"))


def run_finetune(tmp_path, task: str, train: str, validation: str, *argv: str):
    if validation == train:  # the same rows held out as a copy: one file may not be both
        validation = str(shutil.copy(train, tmp_path / f"held-out-{Path(train).name}"))
    return finetune(["--recipe", "bert-finetune-nli-tiny", *RUN, "--task", task, "--train_file", train,
                     "--validation_file", validation, "--output_dir", str(tmp_path / "run"), *argv])


# ----------------------------------------------------------------------------- 1. a column's type

@pytest.mark.parametrize("value, found", [(["a", "b"], r"a list \(\['a', 'b'\]\)"), (5, r"an int \(5\)")])
def test_a_text_column_of_lists_or_numbers_is_refused_naming_line_column_and_types(tmp_path, value, found):
    path = lines(tmp_path / "a.jsonl", [{"text": "fine", "label": 0}, {"text": value, "label": 1}])
    with pytest.raises(DataError, match=rf"a.jsonl: line 2 \(JSON Lines, column 'text'\): the value is {found}, but "
                                        r"column 'text' must hold a string"):
        load(path, (("text", "text"), ("label", "label")), tmp_path)


def test_finetune_refuses_a_list_in_the_text_column_before_training(tmp_path):
    rows = [{"text": ["a good film", "a bad film"], "label": i % 2} for i in range(8)]
    train = lines(tmp_path / "train.jsonl", rows)
    with pytest.raises(DataError, match=r"train.jsonl: line 1 \(JSON Lines, column 'text'\): the value is a list .* "
                                        r"text_pair_column"):
        run_finetune(tmp_path, "sequence-classification", train, train)
    assert not (tmp_path / "run").exists()


def test_a_json_array_names_the_line_its_object_starts_on(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('[\n  {"text": "a", "label": 0},\n  {"text": 7,\n   "label": 1}\n]\n')
    with pytest.raises(DataError, match=r"a.json: line 3 \(JSON array, column 'text'\): the value is an int \(7\)"):
        load(path, (("text", "text"), ("label", "label")), tmp_path)


FRAME = {"text": ["a good film", "a bad film", "fine"], "label": [1, 0, 1]}


@pytest.mark.parametrize("orient, index, written", [
    (None, True, r"df\.to_json\(path\) \(orient='columns', its default\)"),
    ("index", True, r"df\.to_json\(path, orient='index'\)"),
    ("split", True, r"df\.to_json\(path, orient='split'\)"), ("split", False, r"df\.to_json\(path, orient='split'\)"),
    ("table", True, r"df\.to_json\(path, orient='table'\)"), ("table", False, r"df\.to_json\(path, orient='table'\)"),
], ids=["columns", "index", "split", "split-without-index", "table", "table-without-index"])
@pytest.mark.parametrize("indent", [None, 2])
def test_a_json_file_of_one_pandas_table_says_how_to_write_its_rows(tmp_path, orient, index, written, indent):
    """Each of pandas' layouts of a whole table in one object, on one line or indented over several (before: split
    and table got 'no column 'text' in line 1; the file has columns ['columns', 'index', 'data']' or ['schema',
    'data'], an indented one 'line 1: not a JSON object')."""
    path = tmp_path / "a.json"
    pd.DataFrame(FRAME).to_json(path, **({"orient": orient} if orient else {}), **({} if index else {"index": False}),
                                indent=indent)
    with pytest.raises(MalformedRowError, match=rf"a\.json: line 1: one JSON object holds the whole table, .*, as "
                                                rf"pandas' {written} writes it; Lineage reads a row per JSON object: "
                                                r"write the file with df\.to_json\(path, orient='records', "
                                                r"lines=True\) \(JSON Lines\), or orient='records' \(a JSON array\)"):
        load(path, (("text", "text"), ("label", "label")), tmp_path)


@pytest.mark.parametrize("lines_, indent", [(False, None), (True, None), (False, 2)])
def test_pandas_records_are_read_as_rows(tmp_path, lines_, indent):
    path = tmp_path / "a.json"
    pd.DataFrame(FRAME).to_json(path, orient="records", lines=lines_, indent=indent)
    assert load(path, (("text", "text"), ("label", "label")), tmp_path)[:] == FRAME


def test_an_indented_json_object_of_no_pandas_table_is_refused_as_before(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"text": "a good film", "label": 1}, indent=2))
    with pytest.raises(MalformedRowError, match=r"a\.json: line 1: not a JSON object"):
        load(path, (("text", "text"), ("label", "label")), tmp_path)


@pytest.mark.parametrize("rows", [[{"columns": ["a", "b"], "index": [0], "data": [["x", "y"]]}] * 2,
                                  [{"text": "a good film", "columns": ["a", "b"], "data": [["x", "y"]]}],
                                  [{"schema": {"fields": []}, "data": [{"a": 1}], "text": "fine"}]])
def test_json_lines_with_columns_named_as_pandas_tables_keys_are_rows(tmp_path, rows):
    """A column called data, columns, index or schema is no pandas table: not one object alone, or other keys too."""
    path = lines(tmp_path / "a.jsonl", rows)
    assert load(path, ("data",), tmp_path)[:]["data"] == [row["data"] for row in rows]


def test_a_tokens_column_must_hold_lists_of_strings(tmp_path):
    path = lines(tmp_path / "a.jsonl", [{"tokens": "Anna lives here", "ner_tags": [1, 0, 0]}])
    with pytest.raises(DataError, match=r"a.jsonl: line 1 \(JSON Lines, column 'tokens'\): the value is a str "
                                        r"\('Anna lives here'\), but column 'tokens' must hold a list of strings"):
        load(path, (("tokens", "words"), ("ner_tags", "tags")), tmp_path)


@pytest.mark.parametrize("columns, row, named", [
    ((("tokens", "words"), ("ner_tags", "tags")), {"tokens": ["Anna", "lives"], "ner_tags": ["B-PER", "O"]},
     "tokens"),
    ((("question", "text"), ("context", "text"), ("answers", "answers")),
     {"question": "Where?", "context": "Anna lives in Oslo.", "answers": {"text": ["Oslo"], "answer_start": [14]}},
     "answers")])
def test_lists_in_a_csv_as_pandas_writes_them_say_to_write_json_lines(columns, row, named, tmp_path):
    """pandas' to_csv writes a list or dict as its repr, which a CSV reads as text: the refusal says which writer
    keeps them (before: the type alone)."""
    pd.DataFrame([row, row]).to_csv(tmp_path / "a.csv", index=False)
    with pytest.raises(DataError, match=rf"a.csv: line 2 \(CSV, column '{named}'\): the value is a str .*; a list or "
                                        r"dict written as its text, as pandas' to_csv writes one: write the file as "
                                        r"JSON Lines, df.to_json\(path, orient='records', lines=True\), or parquet, "
                                        r"which keep them$"):
        load(tmp_path / "a.csv", columns, tmp_path)


def test_a_csv_text_column_of_digits_stays_text(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("source,target\n007,null sieben\n12,None\n")
    rows = load(path, (("source", "text"), ("target", "text")), tmp_path)
    assert rows[:] == {"source": ["007", "12"], "target": ["null sieben", "None"]}


# ----------------------------------------------------------------------------- 2. empty texts, in every format

def _write(path, rows):
    if path.suffix == ".jsonl":
        lines(path, rows)
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows, indent=1))
    elif path.suffix == ".csv":
        path.write_text("source,target\n" + "".join(f"{r['source']},{r['target']}\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("name, where", [("a.jsonl", r"line 2 \(JSON Lines"), ("a.json", r"line 6 \(JSON array"),
                                         ("a.csv", r"line 3 \(CSV"), ("a.parquet", "row 1")])
@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_translation_target_is_refused_in_every_format(tmp_path, name, where, empty):
    path = _write(tmp_path / name, [{"source": "one", "target": "eins"}, {"source": "two", "target": empty}])
    message = rf"{name}: {where}.*column 'target'\)?: the row has no value for column 'target'"
    with pytest.raises(DataError, match=message):
        load(path, ("source", "target"), tmp_path)


# ----------------------------------------------------------------------------- 3. a duplicated CSV header column

def test_a_duplicated_csv_header_column_is_refused(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("text,text,label\na,b,0\n")
    with pytest.raises(MalformedRowError, match=r"a.csv: line 1 \(the header\): column 'text' appears twice "
                                                r"\(fields 1 and 2\)"):
        load(path, ("text", "label"), tmp_path)


@pytest.mark.parametrize("name, write, message", [
    ("excel.csv", lambda df, path: df.to_csv(path, sep=";", index=False),
     "line 1 (the header) is one field, 'text;label': a .csv file is split at commas, and semicolons "
     "divide it into 'text', 'label'; write it with commas (pandas: df.to_csv(path, index=False); a spreadsheet: CSV, "
     "comma delimited)"),
    ("tabs.csv", lambda df, path: df.to_csv(path, sep="\t", index=False),
     "line 1 (the header) is one field, 'text\\tlabel': a .csv file is split at commas, and tabs divide it "
     "into 'text', 'label'; name the file .tsv"),
])
def test_a_csv_first_line_that_names_no_columns_says_why(name, write, message, tmp_path):
    """Before: 'no column 'text' in the header (line 1); the file has columns ['text;label']' (['gj04', '1', 'It
    rains.']), with the advice to name the columns by recipe keys."""
    write(pd.DataFrame({"text": ["It rains.", "It snows."], "label": [1, 0]}), tmp_path / name)
    with pytest.raises(MalformedRowError) as refusal:
        load(tmp_path / name, ("text", "label"), tmp_path)
    assert str(refusal.value) == f"{tmp_path / name}: {message}"


@pytest.mark.parametrize("layout", [["source", "label", "mark", "text"], ["label", "text"]])
def test_a_first_line_of_data_is_named_as_read_and_the_header_advised_makes_the_file_read(layout, tmp_path):
    """GLUE's CoLA in_domain_train.tsv (source, label, mark, sentence) and a user's label<TAB>sentence file, written
    without a header: the refusal quotes line 1 as it was read and gives a command adding a header line, whose file
    reads every row (before: 'add a first line naming the columns', no line, no names)."""
    frame = pd.DataFrame({"source": "gj04", "label": [1, 0, 1], "mark": ["", "*", ""],
                          "text": ["Our friends won't buy this analysis.", "They drank the pub.", "It rains."]})
    path = tmp_path / "in domain.tsv"
    frame[layout].to_csv(path, sep="\t", index=False, header=False)
    with pytest.raises(MalformedRowError) as refusal:
        load(path, ("text", "label"), tmp_path)
    message = str(refusal.value)
    first = path.read_text().splitlines()[0]
    assert f"{path}: line 1, {first!r}, was read as the header" in message
    assert f"its {len(layout)} columns, split at tabs as the rows are, 'text', 'label' among them" in message
    subprocess.run(["bash", "-c", message.partition(", e.g. ")[2]], check=True)
    rows = load(tmp_path / "in domain-named.tsv", ("text", "label"), tmp_path)
    assert rows["text"] == list(frame["text"]) and rows["label"] == list(frame["label"])


def test_the_header_advised_for_a_task_of_one_text_column_names_a_text_not_the_number(tmp_path):
    """A corpus of id<TAB>sentence rows without a header, for a task that reads `text` alone (pretraining from a
    table): the advised header names the sentence `text`, not the id (before: `text` over the number)."""
    frame = pd.DataFrame({"id": [1999, 2001], "text": ["The film came out that year.", "Its sequel followed."]})
    path = tmp_path / "corpus.tsv"
    frame.to_csv(path, sep="\t", index=False, header=False)
    with pytest.raises(MalformedRowError) as refusal:
        load(path, ("text",), tmp_path)
    subprocess.run(["bash", "-c", str(refusal.value).partition(", e.g. ")[2]], check=True)
    assert load(tmp_path / "corpus-named.tsv", ("text",), tmp_path)["text"] == list(frame["text"])


@pytest.mark.parametrize("tabs", [True, False])
def test_a_text_file_given_for_columns_says_it_is_one_column_of_lines(tabs, tmp_path):
    """ManyThings' Tatoeba pairs (deu.txt: English, German and an attribution, split at tabs) for a translation;
    before: 'no column 'en' in the schema; the file has columns ['text']', advising the column keys."""
    path = tmp_path / "deu.txt"
    path.write_text("Go.\tGeh.\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272\n" if tabs else "Go.\n")
    table = (r"; its lines hold tabs, as a table's \(line 1: 'Go.\\tGeh.\\tCC-BY 2.0 \(France\) Attribution: "
             r"tatoeba.org #287727'\): name the file .tsv, with a first line naming its columns, split at tabs$")
    with pytest.raises(DataError, match=r"deu.txt: no column 'en': a .txt file is read as text, its lines \(or "
                                        r"paragraphs\) the one column 'text'" + (table if tabs else "$")):
        load(path, (("en", "text"), ("de", "text")), tmp_path)


# ----------------------------------------------------------------------------- 4. corrupt compressed files

@pytest.mark.parametrize("name, content, kind", [
    ("a.txt.gz", bytes(range(256)) * 4, "gzip"),
    ("b.txt.gz", gzip.compress(b"hello world\n" * 1000)[:60], "gzip"),
    ("c.txt.bz2", bz2.compress(b"hello world\n" * 1000)[:40], "bzip2"),
    ("d.txt.xz", b"not xz at all", "xz"),
    ("e.txt.xz", lzma.compress(b"hello world\n" * 1000)[:60], "xz"),
    ("f.txt.zst", b"not zstandard", "zstandard"),
])
def test_a_corrupt_compressed_file_is_refused_naming_it(tmp_path, name, content, kind):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError, match=rf"{name}: not a valid {kind} file"):
        load(path, ("text",), tmp_path)


# ----------------------------------------------------------------------------- 5. NER tags

def sentences(path, tags: list) -> str:
    words = ["Anna", "lives", "in", "Oslo"]
    return lines(path, [{"tokens": words[:len(t)], "ner_tags": t} for t in tags])


def test_string_ner_tags_train_and_the_saved_config_names_them(tmp_path):
    train = sentences(tmp_path / "train.jsonl", [["B-PER", "O", "O", "B-LOC"], ["O", "O"]] * 8)
    validation = sentences(tmp_path / "validation.jsonl", [["B-PER", "O", "O", "B-LOC"]] * 2)
    results, folder = run_finetune(tmp_path, "token-classification", train, validation)
    assert 0.0 <= results["eval_accuracy"] <= 1.0
    assert AutoConfig.from_pretrained(folder).id2label == {0: "B-LOC", 1: "B-PER", 2: "O"}


def test_ner_tag_minus_100_marks_a_word_the_loss_skips(tmp_path):
    train = sentences(tmp_path / "train.jsonl", [[1, 0, -100, 2], [0, 0]] * 8)
    results, folder = run_finetune(tmp_path, "token-classification", train, train)
    assert AutoConfig.from_pretrained(folder).num_labels == 3


@pytest.mark.parametrize("tags, message", [
    ([1, 0, -1], r"validation.jsonl: line 2 \(JSON Lines, column 'ner_tags'\): tag -1 \(word 3\) is not a class id "
                 r">= 0 \(an unlabelled row.*skip_unlabeled: true"),
    ([1, 0, 3], r"validation.jsonl: line 2 \(JSON Lines, column 'ner_tags'\): tag 3 \(word 3\) never occurs in the "
                r"training data \(.*train.jsonl: \{0: 16, 1: 4, 2: 4\}\)"),
])
def test_a_bad_ner_tag_is_refused_before_training(tmp_path, tags, message):
    train = sentences(tmp_path / "train.jsonl", [[1, 0, 0, 2], [0, 0]] * 4)
    validation = sentences(tmp_path / "validation.jsonl", [[1, 0], tags])
    with pytest.raises(LabelError, match=message):
        run_finetune(tmp_path, "token-classification", train, validation)
    assert not (tmp_path / "run" / "logs").exists()


@pytest.mark.parametrize("split", ["train", "validation"])
def test_words_and_tags_of_different_lengths_are_refused_naming_the_file_and_line(tmp_path, split):
    rows = [["Anna", "lives", "in", "Oslo"], ["Tom", "sings"]] * 3
    tags = [[1, 0, 0, 2], [1, 0]] * 3
    tags[4] = [1, 0, 0]
    path = lines(tmp_path / f"{split}.jsonl", [{"tokens": w, "ner_tags": t} for w, t in zip(rows, tags)])
    good = lines(tmp_path / "good.jsonl", [{"tokens": w, "ner_tags": t} for w, t in zip(rows, [[1, 0, 0, 2],
                                                                                                   [1, 0]] * 3)])
    train, validation = (path, good) if split == "train" else (good, path)
    with pytest.raises(LabelAlignmentError, match=rf"{split}\.jsonl: line 5 \(JSON Lines, column 'ner_tags'\): 4 "
                                                  r"words in 'tokens' but 3 tags in 'ner_tags'"):
        run_finetune(tmp_path, "token-classification", train, validation)


def test_a_row_error_keeps_its_row_through_a_process_boundary():
    """A map over several processes raises the error its worker raised, pickled: what names the line survives."""
    error = pickle.loads(pickle.dumps(LabelAlignmentError.at(4, "ner_tags", "4 words in 'tokens' but 3 tags")))
    assert (str(error), error.row, error.column, error.detail) == (
        "row 4: 4 words in 'tokens' but 3 tags", 4, "ner_tags", "4 words in 'tokens' but 3 tags")


def test_ner_rows_with_tag_minus_1_are_skipped_when_the_recipe_says_so(tmp_path, capsys):
    train = sentences(tmp_path / "train.jsonl", [[1, 0, 0, 2], [0, -1]] * 8)
    run_finetune(tmp_path, "token-classification", train, train, "--skip_unlabeled", "true")
    assert "train.jsonl: skipped 8 rows labelled -1 in column 'ner_tags'" in capsys.readouterr().out


def test_a_run_that_skips_unlabelled_rows_records_the_rows_it_trained_on(tmp_path, capsys):
    """`train_size` in recipe.yaml stays the rows read, what a re-run cuts; results.json and the card's results say
    how many of them trained and how many skip_unlabeled left out (before: the count before skipping alone)."""
    rows = [{"text": f"review {i}", "label": -1 if i % 4 == 3 else i % 2} for i in range(24)]
    train = lines(tmp_path / "train.jsonl", rows)
    results, folder = run_finetune(tmp_path, "sequence-classification", train, train, "--skip_unlabeled", "true",
                                   "--train_size", "20")
    said = capsys.readouterr().out
    assert "using the first 20 of the 24 rows" in said and "skipped 5 rows labelled -1" in said
    assert "train_size: 20\n" in (folder / "recipe.yaml").read_text()
    recorded = json.loads((folder / "results.json").read_text())
    assert (recorded["train_rows"], recorded["skipped_unlabeled"]) == (results["train_rows"], 5) == (15, 5)
    card = (folder / "README.md").read_text()
    assert "| train_rows | 15 |" in card and "| skipped_unlabeled | 5 |" in card


# ----------------------------------------------------------------------------- 6. one class only

def test_a_single_class_training_set_is_refused_unless_the_recipe_allows_it(tmp_path):
    train = lines(tmp_path / "train.jsonl", [{"text": f"review {i}", "label": "pos"} for i in range(12)])
    with pytest.raises(LabelError, match=r"train.jsonl: every label in column 'label' is 'pos' \(12 rows\)"
                                         r".*allow_single_class: true"):
        run_finetune(tmp_path, "sequence-classification", train, train)
    assert not (tmp_path / "run").exists()
    _, folder = run_finetune(tmp_path, "sequence-classification", train, train, "--allow_single_class", "true")
    assert AutoConfig.from_pretrained(folder).id2label == {0: "pos"}


# ----------------------------------------------------------------------------- 7. BERT's own pretraining layout

DOCUMENTS = ["Anna was born in Oslo in 1950.\nShe studied law in Bergen.\nShe worked as a judge.\nShe died in 2010.",
             "First, wash the rice.\nThen boil it for ten minutes.\nFinally, add the salt.",
             "On day one we left Rome.\nWe reached Milan by train.\nThe next day we went on to Turin.",
             "Omar was born in Cairo.\nHe became a teacher.\nHe married in 1990.\nHis son was born a year later."]


@pytest.mark.parametrize("nsp", ["true", "false"])
def test_bert_pretrains_on_a_txt_file_in_berts_layout(tmp_path, capsys, nsp):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(DOCUMENTS * 3) + "\n")
    results, _ = pretrain_bert(["--recipe", "bert-pretrain-tiny", *RUN, "--train_file", str(corpus), "--nsp", nsp,
                                "--output_dir", str(tmp_path / "run")])
    assert results["train_loss"] > 0
    assert "corpus.txt: 12 documents, 42 sentences" in capsys.readouterr().out


def test_text_sample_by_line_reads_one_row_per_line_and_the_recipe_key_names_its_values(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("A one.\nA two.\n\nB one.\n")
    assert load_text_dataset(str(corpus), cache_dir=str(tmp_path / "cache"))["text"] == ["A one.\nA two.", "B one.\n"]
    lines_read = load_text_dataset(str(corpus), text_sample_by="line", cache_dir=str(tmp_path / "cache"))
    assert lines_read["text"] == ["A one.", "A two.", "", "B one."]
    with pytest.raises(RecipeError, match="'text_sample_by' must be one of auto, line, paragraph, document, got"):
        recipe_from_dict({"text_sample_by": "lines"})


def test_a_corpus_of_one_sentence_documents_says_how_to_lay_it_out(tmp_path):
    """A sentence per line and no blank line, as BookCorpus' books are: the refusal says both layouts that give pairs,
    and a folder of such books with the one it names trains a document per book (before: the refusal named the
    blank lines alone)."""
    books = tmp_path / "books"
    books.mkdir()
    for number, name in enumerate(("Anna", "Omar")):
        (books / f"book_{number}.txt").write_text(f"{name} was born in Oslo.\n{name} moved to Cairo.\n")
    with pytest.raises(DataError, match=r"books: 4 documents, 4 sentences: no document has two sentences.*a blank line "
                                        r"between documents.*; a folder of a file per document, a sentence per line "
                                        r"\(BookCorpus' books\), is a document per file with text_sample_by document$"):
        pretrain_bert(["--recipe", "bert-pretrain-tiny", *RUN, "--train_file", str(books),
                       "--output_dir", str(tmp_path / "run")])
    pretrain_bert(["--recipe", "bert-pretrain-tiny", *RUN, "--train_file", str(books), "--text_sample_by", "document",
                   "--output_dir", str(tmp_path / "run")])
    assert (tmp_path / "run" / "model" / "config.json").is_file()


# ----------------------------------------------------------------------------- 8. labels of a cut training set

def test_a_label_error_of_a_cut_training_set_says_it_was_cut(tmp_path):
    path = tmp_path / "sorted.csv"
    path.write_text("text,label\n" + "".join(f"review {i},{'neg' if i < 5 else 'pos'}\n" for i in range(10)))
    rows = load(path, ("text", "label"), tmp_path).select(range(3))
    with pytest.raises(LabelError, match=r"sorted.csv \(its first 3 rows: train_size\): every label in column "
                                         r"'label' is 'neg' \(3 rows\)"):
        class_labels(rows, None, "label", (str(path), "validation"))
