"""Loading local files, the embedded corpus and Hub names; streaming; cached and multi-process
tokenization; packing and NSP datasets; one test per kind of bad input, with a clean cache after it."""

import bz2
import csv
import gzip
import json
import lzma
import os
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from train.data.corpus import tokenizer_training_texts
from train.data.encoders import QAAnswerSpanError, split_sentences
from train.data.errors import (
    DataError,
    DataFileNotFoundError,
    EmptyDataFileError,
    InvalidUTF8Error,
    MalformedRowError,
    MissingColumnError,
)
from train.data.file_bytes import check_utf8
from train.data.files import data_files, load_text_dataset
from train.data.labels import LabelError, score_labels
from train.data.model_inputs import (
    prepare_causal_lm_dataset,
    prepare_nsp_dataset,
    tokenize_dataset,
)
from train.data.tokenization import train_tokenizer

datasets.disable_progress_bars()
ROWS = [{"text": f"Review number {i} says the film was {'not ' * (i % 2)}good.", "label": i % 2} for i in range(40)]


@pytest.fixture(scope="module")
def bert():
    return train_tokenizer("bert", tokenizer_training_texts(size=300), 800)


@pytest.fixture(scope="module")
def gpt():
    return train_tokenizer("gpt", tokenizer_training_texts(size=300), 800)


def write(path, rows, fmt):
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif fmt in ("csv", "tsv"):
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t" if fmt == "tsv" else ",")
            writer.writeheader()
            writer.writerows(rows)
    elif fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(r["text"] + "\n" for r in rows), encoding="utf-8")
    return path


def cache_files(cache):
    return sorted(p.name for p in cache.rglob("*") if p.is_file() and not p.name.endswith(".lock"))


@pytest.mark.parametrize("fmt", ["txt", "jsonl", "csv", "tsv", "parquet"])
def test_local_formats_and_streaming(tmp_path, fmt):
    path = write(tmp_path / f"reviews.{fmt}", ROWS, fmt)
    columns = ("text",) if fmt == "txt" else ("text", "label")
    dataset = load_text_dataset(path, columns=columns, cache_dir=str(tmp_path / "cache"))
    assert isinstance(dataset, datasets.Dataset) and dataset["text"] == [r["text"] for r in ROWS]
    if fmt != "txt":
        assert [int(x) for x in dataset["label"]] == [r["label"] for r in ROWS]
    stream = load_text_dataset(path, columns=columns, streaming=True)
    assert isinstance(stream, datasets.IterableDataset)
    assert [row["text"] for row in stream] == dataset["text"]


def test_tsv_double_quotes_are_text(tmp_path):
    """A TSV cell is taken as written: quotes that open, close or never close a cell are characters of the text."""
    texts = ['"Hi," she said, "stop."', 'an "unterminated quote', 'plain', '""']
    path = tmp_path / "quotes.tsv"
    path.write_text("text\tlabel\n" + "".join(f"{t}\t{i % 2}\n" for i, t in enumerate(texts)), encoding="utf-8")
    for streaming in (False, True):
        dataset = load_text_dataset(path, columns=("text", "label"), streaming=streaming, cache_dir=str(tmp_path / "c"))
        assert [row["text"] for row in dataset] == texts


def test_folder_paragraphs_and_embedded(tmp_path):
    write(tmp_path / "a.txt", ROWS[:10], "txt")
    write(tmp_path / "b.txt", ROWS[10:], "txt")
    assert len(load_text_dataset(tmp_path, cache_dir=str(tmp_path / "cache"))) == 40
    book = tmp_path / "book" / "docs.txt"
    book.parent.mkdir()
    book.write_text("First doc, line one.\nLine two.\n\nSecond doc.\nIts end.\n", encoding="utf-8")
    docs = load_text_dataset(book, text_sample_by="paragraph", cache_dir=str(tmp_path / "cache"))
    assert [split_sentences(t) for t in docs["text"]] == [["First doc, line one.", "Line two."],
                                                          ["Second doc.", "Its end."]]
    nli = load_text_dataset("embedded:nli", "validation", columns=("premise", "hypothesis", "label"), size=7)
    assert len(nli) == 7 and nli.features["label"].names[0] == "entailment"
    assert isinstance(load_text_dataset("embedded:sentiment", streaming=True, size=3), datasets.IterableDataset)


def test_a_folders_readme_is_left_out_of_its_rows_and_said(tmp_path, capsys):
    """A corpus folder's `README.txt` (`readme.md` is no data file anyway) is no text to train on (before: its lines
    were rows), said once; named, it is read."""
    write(tmp_path / "a.txt", ROWS[:10], "txt")
    (tmp_path / "README.txt").write_text("A corpus of forty lines.\nLicensed CC BY 4.0.\n")
    rows = load_text_dataset(tmp_path, text_sample_by="line", cache_dir=str(tmp_path / "cache"))
    assert rows["text"] == [row["text"] for row in ROWS[:10]]
    assert (f"{tmp_path}: README.txt left out: documentation by its name, not data (name a file to read it)\n"
            in capsys.readouterr().out)
    assert len(load_text_dataset(tmp_path / "README.txt", cache_dir=str(tmp_path / "cache"))) == 2


def test_a_folder_of_folders_of_shards_is_walked_once(tmp_path, monkeypatch):
    """FineWeb's `data/CC-MAIN-*/` shards: the tree is walked once to find both its splits (none) and its files (before:
    twice, once by the split check and once by the listing, each a walk of every file of the corpus)."""
    from train.data.files import resolve_files

    for crawl in ("CC-MAIN-2024-10", "CC-MAIN-2024-18"):
        (tmp_path / "data" / crawl).mkdir(parents=True)
        write(tmp_path / "data" / crawl / "000_00000.jsonl", ROWS[:5], "jsonl")
    walks = []
    walk = Path.rglob
    monkeypatch.setattr(Path, "rglob", lambda self, pattern: walks.append(self) or walk(self, pattern))
    files = resolve_files(tmp_path)
    assert files == sorted((tmp_path / "data").rglob("*.jsonl")) and len(files) == 2
    assert walks == [tmp_path, tmp_path / "data"]  # resolve_files' one, and the expected list's


def test_a_glob_pattern_reads_the_files_it_matches_as_datasets_data_files_does(tmp_path, monkeypatch, capsys):
    """`--train_file 'shards/train-*.parquet'` reads the files the pattern matches, sorted, in memory and streamed,
    the rows datasets' `data_files=` gives for the same pattern (before: refused as no such file); a pattern that
    matches nothing is refused naming the recipe key and the pattern, before anything is read."""
    import pandas as pd

    from train.run.recipes import recipe_from_dict
    from train.setup.splits import load_splits

    monkeypatch.chdir(tmp_path)
    (tmp_path / "shards").mkdir()
    for index in (2, 0, 1):  # written out of order: read sorted
        frame = pd.DataFrame(ROWS[index * 10:index * 10 + 10])
        frame.to_parquet(tmp_path / "shards" / f"train-{index:05d}-of-00003.parquet")
    pd.DataFrame(ROWS[30:]).to_parquet(tmp_path / "shards" / "validation-00000-of-00001.parquet")
    pattern = "shards/train-*.parquet"
    expected = datasets.load_dataset("parquet", data_files=pattern, split="train", cache_dir=str(tmp_path / "ref"))
    assert expected["text"] == [r["text"] for r in ROWS[:30]]
    for streaming in (False, True):
        recipe = recipe_from_dict({"train_file": pattern, "validation_file": "shards/validation-*.parquet",
                                   "streaming": streaming, "max_steps": 2})
        train, validation = load_splits(recipe, [("text", "text"), ("label", "label")])
        assert [row["text"] for row in train] == expected["text"]
        assert validation["text"] == [r["text"] for r in ROWS[30:]]
    assert "3 data files, read in this order: shards/train-00000-of-00003.parquet" in capsys.readouterr().out
    assert data_files(pattern) == sorted(Path("shards").glob("train-*.parquet"))  # a checkpoint fingerprints these
    recipe = recipe_from_dict({"train_file": "shards/test-*.parquet", "max_steps": 2})
    with pytest.raises(DataFileNotFoundError, match=r"shards/test-\*\.parquet: the pattern matches no file "
                                                    r"\(recipe key 'train_file'\)"):
        load_splits(recipe, [("text", "text")])
    with pytest.raises(DataFileNotFoundError, match=r"shards/\*\.csv: the pattern matches no file"):
        load_text_dataset("shards/*.csv", cache_dir=str(tmp_path / "cache"))


def test_split_sentences_on_punctuation():
    assert split_sentences("Anna was born in 1950. She moved to Oslo! Why? 2 cats. e.g. this") == [
        "Anna was born in 1950.", "She moved to Oslo!", "Why?", "2 cats. e.g. this"]


def test_hub_name_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match="'lineage-no-such/dataset' as a Hub dataset"):
        load_text_dataset("lineage-no-such/dataset")


def test_hub_name_reads_the_named_dataset_config_and_split(monkeypatch, tmp_path):
    calls = []

    def load_dataset(name, config, **kwargs):
        calls.append((name, config, kwargs))
        return datasets.Dataset.from_dict({"text": ["one", "two"]})

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    loaded = load_text_dataset("org/corpus", "validation", dataset_config="en", cache_dir=str(tmp_path))
    assert loaded["text"] == ["one", "two"]
    assert calls == [("org/corpus", "en", {"split": "validation", "streaming": False, "cache_dir": str(tmp_path)})]


# ----------------------------------------------------------------------------- bad input

def test_missing_file(tmp_path):
    with pytest.raises(DataFileNotFoundError, match=r"nowhere\.jsonl: no such data file"):
        load_text_dataset(tmp_path / "nowhere.jsonl", cache_dir=str(tmp_path / "cache"))
    assert not (tmp_path / "cache").exists()


def test_a_folder_read_by_paragraph_says_that_every_file_is(tmp_path, capsys):
    """One file with paragraphs decides for the folder (a shard of one document has no empty line): said, with
    what it makes of a file of one document per line."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.txt").write_text("First document.\nSecond document.\n")
    (folder / "b.txt").write_text("One line.\nAnother.\n\nA second paragraph.\n")
    rows = load_text_dataset(folder, cache_dir=str(tmp_path / "cache"))
    assert [text.strip() for text in rows["text"]] == ["First document.\nSecond document.", "One line.\nAnother.",
                                                       "A second paragraph."]
    assert ("b.txt: empty lines separate its documents, so each row is a document of lines in each of the 2 files "
            "(a file without empty lines is one document) (text_sample_by: auto; set line for one row per line)"
            in capsys.readouterr().out)


def test_wikitext_raw_files_are_text_and_an_unknown_type_is_refused_naming_what_to_do(tmp_path):
    (tmp_path / "wiki.train.raw").write_text(" = Title = \n\n A line of the article .\n")
    rows = load_text_dataset(tmp_path / "wiki.train.raw", text_sample_by="line", cache_dir=str(tmp_path / "cache"))
    assert rows["text"] == [" = Title = ", "", " A line of the article ."]
    (tmp_path / "a.xml").write_text("<doc>text</doc>\n")
    with pytest.raises(DataError, match=r"a\.xml: unknown data file type; name the file with one of \.txt, .*\.parquet "
                                        r"at the end \(plain text: \.txt\) \(from Python: load_text_dataset's "
                                        r"data_format\)$"):
        load_text_dataset(tmp_path / "a.xml", cache_dir=str(tmp_path / "cache"))


def test_wikiextractors_json_output_of_no_suffix_is_refused_naming_the_name_to_give(tmp_path):
    """WikiExtractor's --json output (here compressed with --compress), `AB/wiki_01.bz2`, of no suffix: the refusal
    names the name to give (before: 'unknown data file type; name the file with one of .txt, ... or pass data_format
    to load_text_dataset', which a command has no argument for), named or in its folder. Its `<doc>` blocks are read
    as documents: test_wikiextractor."""
    packed = tmp_path / "json" / "AB" / "wiki_01.bz2"
    packed.parent.mkdir(parents=True)
    packed.write_bytes(bz2.compress(json.dumps({"id": "12", "revid": "1", "url": "https://en.wikipedia.org/wiki?curid"
                                                "=12", "title": "Anarchism", "text": "Anarchism\n\nAnarchism is a "
                                                "political philosophy."}).encode() + b"\n"))
    with pytest.raises(DataError, match=r"wiki_01\.bz2: unknown data file type; its first line is a JSON object: name "
                                        r"it wiki_01\.jsonl\.bz2 to read a JSON object per line$"):
        load_text_dataset(packed, cache_dir=str(tmp_path / "cache"))
    with pytest.raises(DataFileNotFoundError, match=r"json: folder holds no data files \(\.txt, .*\); it holds files "
                                                    r"of no suffix, e\.g\. .*wiki_01\.bz2: its first line is a JSON "
                                                    r"object: name it wiki_01\.jsonl\.bz2"):
        load_text_dataset(tmp_path / "json", cache_dir=str(tmp_path / "cache"))
    packed.rename(packed.with_name("wiki_01.jsonl.bz2"))
    assert load_text_dataset(tmp_path / "json", cache_dir=str(tmp_path / "cache"))["title"] == ["Anarchism"]


def test_empty_file(tmp_path):
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    (tmp_path / "blank.jsonl").write_text("\n  \n", encoding="utf-8")
    (tmp_path / "header.csv").write_text("text,label\n", encoding="utf-8")
    cache = tmp_path / "cache"
    with pytest.raises(EmptyDataFileError, match=r"empty\.txt: the data file is empty"):
        load_text_dataset(tmp_path / "empty.txt", cache_dir=str(cache))
    with pytest.raises(EmptyDataFileError, match=r"blank\.jsonl: the data file holds only whitespace"):
        load_text_dataset(tmp_path / "blank.jsonl", cache_dir=str(cache))
    with pytest.raises(EmptyDataFileError, match=r"header\.csv: has a header line but no rows"):
        load_text_dataset(tmp_path / "header.csv", cache_dir=str(cache))
    assert not cache.exists()


def test_missing_column(tmp_path):
    path = write(tmp_path / "reviews.csv", ROWS, "csv")
    cache = tmp_path / "cache"
    with pytest.raises(MissingColumnError, match=r"reviews\.csv: no column 'sentence' in the header \(line 1\); "
                                                 r"the file has columns \['text', 'label'\]"):
        load_text_dataset(path, columns=("sentence",), cache_dir=str(cache))
    assert not cache.exists()
    ragged = tmp_path / "ragged.jsonl"
    ragged.write_text('{"text": "a", "label": 1}\n{"text": "b", "label": 0}\n{"label": 1}\n', encoding="utf-8")
    with pytest.raises(MissingColumnError, match=r"ragged\.jsonl: line 3 \(JSON Lines, column 'text'\): the row has "
                                                 r"no value for column 'text'"):
        load_text_dataset(ragged, columns=("text",), cache_dir=str(cache))


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("line one\nline two\nSchöne Grüße\nline four\n".encode("latin-1"))
    cache = tmp_path / "cache"
    with pytest.raises(InvalidUTF8Error, match=r"latin1\.txt: line 3: not valid UTF-8 \(byte 0xf6"):
        load_text_dataset(path, cache_dir=str(cache))
    assert not cache.exists()


@pytest.mark.parametrize("chunk_size", [1, 2, 4, 1 << 20])
def test_a_bad_byte_after_lone_carriage_returns_is_named_at_the_line_the_text_reader_gives(tmp_path, chunk_size):
    """Lines end in \\n, \\r\\n or a lone \\r (old Mac), as datasets' text reader (universal newlines) ends them,
    whichever chunk a line end falls in (before: a lone \\r ended no line, so this file's line 5 was named line 3)."""
    data, path = b"one\rtwo\r\n\rfour\nf\xffive\r", tmp_path / "mac.txt"
    path.write_bytes(data.replace(b"\xff", b"X"))
    line = load_text_dataset(path, text_sample_by="line", cache_dir=str(tmp_path / "cache"))["text"].index("fXive") + 1
    path.write_bytes(data)
    with pytest.raises(InvalidUTF8Error, match=rf"mac\.txt: line {line}: not valid UTF-8"):
        check_utf8(path, chunk_size)
    with pytest.raises(InvalidUTF8Error, match=rf"mac\.txt: line {line}: not valid UTF-8"):
        load_text_dataset(path, cache_dir=str(tmp_path / "cache"))


def test_paragraphs_between_lone_carriage_returns_are_read_as_documents(tmp_path):
    """text_sample_by auto finds the empty line as the reader does (before: none, so a row per line)."""
    path = tmp_path / "mac.txt"
    path.write_bytes(b"One line.\rAnother.\r\rA second paragraph.\r")
    assert load_text_dataset(path, cache_dir=str(tmp_path / "cache"))["text"] == ["One line.\nAnother.",
                                                                                  "A second paragraph.\n"]


def test_malformed_json_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"text": "fine"}\n{"text": "fine too"}\n{"text": oops}\n', encoding="utf-8")
    cache = tmp_path / "cache"
    with pytest.raises(MalformedRowError, match=r"broken\.jsonl: line 3: not valid JSON"):
        load_text_dataset(path, cache_dir=str(cache))
    assert not [f for f in cache_files(cache) if f.endswith(".arrow")]


def test_qa_span_error_leaves_no_cache_file(tmp_path, bert):
    rows = [{"id": f"q{i}", "question": "Where?", "context": "Anna lives in Oslo.",
             "answers": {"text": ["Oslo"], "answer_start": [14 if i != 5 else 30]}} for i in range(8)]
    path = write(tmp_path / "qa.jsonl", rows, "jsonl")
    cache = tmp_path / "cache"
    dataset = load_text_dataset(path, columns=("question", "context", "answers"), cache_dir=str(cache))
    before = cache_files(cache)
    with pytest.raises(QAAnswerSpanError, match=r"row 5 \(id 'q5'\): answer 'Oslo' at characters 30\.\.34 lies "
                                                r"outside its context of 19 characters"):
        tokenize_dataset(dataset, bert, "qa")
    assert cache_files(cache) == before


# ----------------------------------------------------------------------------- tokenization

def test_tokenize_map_is_cached_and_multiprocess(tmp_path, bert):
    path = write(tmp_path / "reviews.jsonl", ROWS, "jsonl")
    dataset = load_text_dataset(path, columns=("text", "label"), cache_dir=str(tmp_path / "cache"))
    first = tokenize_dataset(dataset, bert, "classification", max_length=16)
    assert first.column_names == ["input_ids", "token_type_ids", "attention_mask", "labels"]
    written = [f["filename"] for f in first.cache_files]
    assert written and all("cache" in f for f in written)
    mtimes = [os.stat(f).st_mtime_ns for f in written]
    again = tokenize_dataset(dataset, bert, "classification", max_length=16)
    assert [f["filename"] for f in again.cache_files] == written
    assert [os.stat(f).st_mtime_ns for f in written] == mtimes  # loaded, not recomputed
    parallel = tokenize_dataset(dataset, bert, "classification", max_length=16, num_proc=2)
    assert parallel["input_ids"] == first["input_ids"] and max(map(len, first["input_ids"])) <= 16
    stream = tokenize_dataset(load_text_dataset(path, columns=("text",), streaming=True), bert, "mlm")
    assert [row["input_ids"] for row in stream] == bert([r["text"] for r in ROWS])["input_ids"]


def column(dataset, name: str) -> list:
    """One column of a map-style dataset (a `datasets.Dataset` or a prepared one), row by row."""
    return [dataset[i][name] for i in range(len(dataset))]


def test_causal_lm_packing_dataset(gpt):
    docs = load_text_dataset("embedded:documents", size=60)
    packed = prepare_causal_lm_dataset(docs, gpt, block_size=64)
    stream = [t for text in docs["text"] for t in (*gpt(text, add_special_tokens=False)["input_ids"], gpt.eos_token_id)]
    flat = [t for block in column(packed, "input_ids") for t in block]
    assert all(len(b) == 64 for b in column(packed, "input_ids"))
    assert flat == stream[:len(flat)] and len(stream) - len(flat) < 64
    whole = prepare_causal_lm_dataset(docs, gpt, block_size=64, drop_last=False)
    assert [t for block in column(whole, "input_ids") for t in block] == stream
    lazy = prepare_causal_lm_dataset(docs.to_iterable_dataset(), gpt, block_size=64, drop_last=False)
    assert [t for row in lazy for t in row["input_ids"]] == stream  # fewer than a thousand documents: one group


def test_causal_lm_dataset_of_packed_documents(gpt):
    """`pack_documents=True`: the same blocks, with `position_ids` restarting after every end-of-text token."""
    docs = load_text_dataset("embedded:documents", size=60)
    plain = prepare_causal_lm_dataset(docs, gpt, block_size=64)
    packed = prepare_causal_lm_dataset(docs, gpt, block_size=64, pack_documents=True)
    assert set(packed[0]) == {"input_ids", "position_ids"} and column(packed, "input_ids") == column(plain, "input_ids")
    for ids, positions in zip(column(packed, "input_ids"), column(packed, "position_ids")):
        assert positions[0] == 0
        for i in range(1, 64):
            assert positions[i] == (0 if ids[i - 1] == gpt.eos_token_id else positions[i - 1] + 1)
    lazy = prepare_causal_lm_dataset(docs.to_iterable_dataset(), gpt, block_size=64, pack_documents=True)
    assert [row["position_ids"] for row in lazy] == column(packed, "position_ids")


def test_nsp_dataset_from_sentences_or_text(bert):
    docs = load_text_dataset("embedded:documents", size=80)
    pairs = prepare_nsp_dataset(docs, bert, max_length=64, seed=1)
    from_text = prepare_nsp_dataset(docs.remove_columns("sentences"), bert, max_length=64, seed=1)
    assert column(pairs, "input_ids") == column(from_text, "input_ids")  # split_sentences recovers the sentences
    assert set(pairs[0]) == {"input_ids", "token_type_ids", "next_sentence_label"}
    assert all(len(x) <= 64 for x in column(pairs, "input_ids")) and len(pairs) > 80
    assert 0.35 < sum(column(pairs, "next_sentence_label")) / len(pairs) < 0.65
    assert set(prepare_nsp_dataset(docs, bert, max_length=64, seed=1, next_sentence=False)[0]) == {
        "input_ids", "token_type_ids"}


# ----------------------------------------------------------------------------- files as users have them (issue 24)

BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("compression", [None, "gz", "bz2", "xz"])
@pytest.mark.parametrize("name, content, columns", [
    ("a.csv", b"text,label\nhello,1\n", ("text", "label")),
    ("a.jsonl", b'{"text": "hello", "label": 1}\n', ("text", "label")),
    ("a.txt", b"hello\nworld\n", ("text",)),
])
def test_a_utf8_byte_order_mark_is_stripped(tmp_path, name, content, columns, compression):
    compress = {None: lambda data: data, "gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[compression]
    path = tmp_path / (f"{name}.{compression}" if compression else name)
    path.write_bytes(compress(BOM + content))
    dataset = load_text_dataset(str(path), columns=columns, cache_dir=str(tmp_path / "cache"))
    assert dataset.column_names == list(columns)
    assert dataset[0]["text"] == "hello"


def test_a_tsv_row_with_an_extra_tab_names_its_line(tmp_path):
    path = tmp_path / "a.tsv"
    path.write_text("text\tlabel\nhello\t1\nbye\tx\t0\n")
    with pytest.raises(MalformedRowError, match=r"a.tsv: line 3: 3 fields where the header \(line 1\) has 2"):
        load_text_dataset(str(path), columns=("text", "label"), cache_dir=str(tmp_path / "cache"))


def test_a_csv_row_without_its_label_names_the_csv_line_and_column(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text('text,label\n"two\nlines",1\nbye\n')
    with pytest.raises(MissingColumnError, match=r"a.csv: line 4 \(CSV, column 'label'\)"):
        load_text_dataset(str(path), columns=("text", "label"), cache_dir=str(tmp_path / "cache"))


def test_a_corpus_shorter_than_one_block_says_both_numbers(gpt):
    short = datasets.Dataset.from_dict({"text": ["one two three"]})
    tokens = len(gpt("one two three", add_special_tokens=False)["input_ids"]) + 1
    with pytest.raises(DataError, match=f"tiny.txt: the text yields {tokens} tokens .* fewer than one block of 64"):
        prepare_causal_lm_dataset(short, gpt, 64, source="tiny.txt")


@pytest.mark.parametrize("streaming", [False, True])
def test_a_csv_score_of_only_whitespace_is_a_missing_score_as_an_empty_one(tmp_path, streaming, capsys):
    """pandas reads a column with a field of spaces as text (to it only an empty field is no value): the field is an
    unlabelled row, refused naming skip_unlabeled or left out with it (before: every score was refused as a number
    written as text, skip_unlabeled or not)."""
    path = tmp_path / "a.csv"
    path.write_text('text,label\na,1.5\nb,  \nc,2\nd," \t"\n')
    data = load_text_dataset(str(path), columns=(("text", "text"), ("label", "score")), streaming=streaming,
                             cache_dir=str(tmp_path / "cache"))
    with pytest.raises(LabelError, match=r"a.csv: line 3 \(CSV, column 'label'\): the row has no score \(null, or an "
                                         r"empty or blank field\): .* set skip_unlabeled: true"):
        list(score_labels(data, None, "label", (str(path), str(path)))[0])
    train, _ = score_labels(data, None, "label", (str(path), str(path)), skip_unlabeled=True)
    assert [row["label"] for row in train] == [1.5, 2.0]
    assert ("skipped 2 rows labelled -1 or without a score" in capsys.readouterr().out) is not streaming


def test_a_folder_of_folders_of_shards_reads_its_subfolders_files_in_path_order(tmp_path):
    """FineWeb as `huggingface-cli download` leaves it (`README.md`, `data/CC-MAIN-*/000_00000.parquet`, its records
    in `.cache/`): a folder with no data file of its own reads its subfolders' files in sorted path order, in memory
    and streamed, and a checkpoint fingerprints those (before: 'folder holds no data files')."""
    import pandas as pd

    root = tmp_path / "fineweb"
    shards = [root / "data" / dump / "000_00000.parquet" for dump in ("CC-MAIN-2024-10", "CC-MAIN-2024-18")]
    hidden = root / ".cache" / "huggingface" / "download" / "data" / "stale.parquet"
    for number, path in enumerate([*shards, hidden]):
        path.parent.mkdir(parents=True)
        pd.DataFrame({"text": [f"Document {number}.{i} of the web." for i in range(3)], "id": ["<urn:uuid:0>"] * 3,
                      "dump": path.parent.name, "language_score": 0.9}).to_parquet(path)
    (root / "README.md").write_text("# FineWeb\n")
    expected = [f"Document {number}.{i} of the web." for number in (0, 1) for i in range(3)]
    for streaming in (False, True):
        rows = load_text_dataset(root, streaming=streaming, cache_dir=str(tmp_path / "cache"))
        assert [row["text"] for row in rows] == expected
    assert data_files(str(root), ("text",)) == shards


def test_split_folders_of_chunk_folders_and_split_files_beside_a_split_folder_are_read_by_split(tmp_path):
    """SlimPajama as it ships (`train/chunk1/example_train_0.jsonl.zst`, `validation/...`, `test/...`) and The Pile's
    root (`train/00.jsonl.zst` beside `val.jsonl.zst` and `test.jsonl.zst`), written with zstandard: each split reads
    its files, the training split its chunks at any depth, in memory and streamed (before: refused, 'folder holds no
    data files'; read whole, the held-out splits would have been trained on)."""
    zstandard = pytest.importorskip("zstandard")

    def write(path: Path, texts: list[str]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = "".join(json.dumps({"text": text, "meta": {"redpajama_set_name": "RedPajamaC4"}}) + "\n"
                        for text in texts)
        path.write_bytes(zstandard.ZstdCompressor().compress(lines.encode()))

    slimpajama = tmp_path / "SlimPajama-627B"
    for split, name in (("train", "example_train"), ("validation", "example_holdout"), ("test", "example_holdout")):
        for chunk in (1, 2):
            texts = [f"{split} {chunk}.{i}" for i in (0, 1)]
            write(slimpajama / split / f"chunk{chunk}" / f"{name}_0.jsonl.zst", texts)
    pile = tmp_path / "pile"
    for name in ("train/00", "train/01", "val", "test"):
        write(pile / f"{name}.jsonl.zst", [f"{name} {i}" for i in (0, 1)])
    for streaming in (False, True):
        rows = load_text_dataset(slimpajama, streaming=streaming, cache_dir=str(tmp_path / "cache"))
        assert [row["text"] for row in rows] == [f"train {chunk}.{i}" for chunk in (1, 2) for i in range(2)]
        rows = load_text_dataset(pile, streaming=streaming, cache_dir=str(tmp_path / "cache"))
        assert [row["text"] for row in rows] == [f"train/{n} {i}" for n in ("00", "01") for i in range(2)]
    held_out = load_text_dataset(slimpajama, "validation", cache_dir=str(tmp_path / "cache"))
    assert held_out["text"] == [f"validation {chunk}.{i}" for chunk in (1, 2) for i in range(2)]
    assert load_text_dataset(pile, "validation", cache_dir=str(tmp_path / "cache"))["text"] == ["val 0", "val 1"]


def test_wikitext_and_c4_folders_train_on_their_training_files(tmp_path):
    """WikiText's raw files (`wiki.train.raw`, `wiki.valid.raw`, `wiki.test.raw`) and C4's `en/` (`c4-train.*.json.gz`
    beside `c4-validation.*.json.gz`, written with gzip): the training files train and the validation files are the
    validation split (before: every split was trained on, the test split a perplexity is reported on too)."""
    wikitext = tmp_path / "wikitext-103-raw"
    wikitext.mkdir()
    for split in ("train", "valid", "test"):
        (wikitext / f"wiki.{split}.raw").write_text(f" = {split} = \n")
    assert load_text_dataset(wikitext, cache_dir=str(tmp_path / "cache"))["text"] == [" = train = "]
    assert load_text_dataset(wikitext, "test", cache_dir=str(tmp_path / "cache"))["text"] == [" = test = "]
    c4 = tmp_path / "en"
    c4.mkdir()
    for name in ("c4-train.00000-of-01024", "c4-train.00001-of-01024", "c4-validation.00000-of-00008"):
        with gzip.open(c4 / f"{name}.json.gz", "wt") as handle:
            handle.write(json.dumps({"text": name, "timestamp": "2019-04-25T12:57:54Z", "url": "https://x.org"}) + "\n")
    rows = load_text_dataset(c4, streaming=True, cache_dir=str(tmp_path / "cache"))
    assert [row["text"] for row in rows] == ["c4-train.00000-of-01024", "c4-train.00001-of-01024"]
    rows = load_text_dataset(c4, "validation", streaming=True, cache_dir=str(tmp_path / "cache"))
    assert [row["text"] for row in rows] == ["c4-validation.00000-of-00008"]


def test_a_corpus_of_records_reads_its_empty_rows_as_blank_lines_as_a_hub_dataset_does(tmp_path):
    """WikiText's parquet files as the Hub holds them (rows '', ' = Valkyria Chronicles III = \\n', '', ...), written
    by pandas, and the same rows saved with save_to_disk: a corpus (one column of text) reads every row, in memory and
    streamed, as its Hub name and a .txt file read blank lines (before: refused at row 0, 'the row has no value for
    column 'text' (an empty string); fill it in or remove the row'); a classifier's text column still refuses one."""
    import pandas as pd

    texts = ["", " = Valkyria Chronicles III = \n", "", " Senjō no Valkyria 3 is a role @-@ playing game .\n", " "]
    parquet = tmp_path / "wikitext-103-raw-v1" / "train-00000-of-00002.parquet"
    parquet.parent.mkdir()
    pd.DataFrame({"text": texts}).to_parquet(parquet)
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(saved))
    for source in (parquet, saved):
        for streaming in (False, True):
            rows = load_text_dataset(source, columns=[("text", "text")], streaming=streaming,
                                     cache_dir=str(tmp_path / "cache"))
            assert [row["text"] for row in rows] == texts
    labelled = tmp_path / "labelled.parquet"
    pd.DataFrame({"text": texts, "label": [0, 1, 0, 1, 0]}).to_parquet(labelled)
    with pytest.raises(DataError, match=r"labelled\.parquet: row 0, column 'text': the row has no value for column "
                                        r"'text' \(an empty string\)"):
        load_text_dataset(labelled, columns=[("text", "text"), ("label", "label")], cache_dir=str(tmp_path / "cache"))
