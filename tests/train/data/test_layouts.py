"""Every corpus layout, both ways, both families: real English text written as other tools write it (plain lines,
paragraphs, BERT's layout, gzip / bzip2 / xz / zstandard, folders of shards, pandas' JSON Lines, JSON, CSV and TSV,
pyarrow's parquet, `save_to_disk`, WikiExtractor's folders, a Hub dataset in the offline cache) reads back as the same
documents in memory and streamed, and gives GPT the same blocks and BERT the same sentence pairs both ways; bad values
are refused with the same message both ways; the commands train streamed from a fresh cache (issue 38)."""

import bz2
import gzip
import json
import lzma
import tempfile
from pathlib import Path

import datasets
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import exact_resume, hub_dataset
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from train.data.errors import DataError, MissingColumnError
from train.data.files import load_text_dataset
from train.data.model_inputs import check_documents, group_seed, prepare_causal_lm_dataset, prepare_nsp_dataset
from train.data.tokenization import train_tokenizer

datasets.disable_progress_bars()

# Written for these tests: each sentence ends in . ? or ! and starts with a capital, so split_sentences gives it back.
DOCUMENTS = [
    ["The old lighthouse stands at the end of a narrow stone pier.",
     "Every evening the keeper climbed its spiral stairs to light the lamp.",
     "Ships passing in the fog relied on its beam to find the harbour entrance.",
     "It has been automatic since the keeper retired, but the stairs are still there."],
    ["Bread is one of the oldest prepared foods.",
     "Flour, water, salt and yeast are all a simple loaf needs.",
     "The dough must rest long enough for the yeast to fill it with small bubbles of gas.",
     "Baking then sets the structure and browns the crust."],
    ["Our neighbours keep bees in two white hives behind their garden shed.",
     "In early summer the bees visit the lime trees along the road.",
     "By August the frames are heavy with honey.",
     "They give a jar to each house on the street, which makes everyone tolerant of the occasional sting."],
    ["A river changes its course slowly over many years.",
     "Water flows faster on the outside of each bend and wears the bank away.",
     "On the inside of the bend, sand and gravel settle in the calm water.",
     "Eventually a loop may be cut off entirely and become a quiet lake."],
    ["Learning a second language is easier with daily practice than with long weekly sessions.",
     "Short conversations help more than memorising lists of words.",
     "Mistakes are part of the process, and most listeners are patient with them."],
    ["The train left the station twenty minutes late.",
     "Nobody complained, because the snow had been falling since dawn.",
     "Outside the windows the fields were white and the hedges had disappeared.",
     "We reached the city just as the street lamps were coming on."],
    ["Why do cats sleep so much?",
     "Their ancestors hunted at dawn and dusk and rested through the rest of the day.",
     "A house cat keeps the same rhythm even though its food arrives in a bowl.",
     "Most cats sleep between twelve and sixteen hours a day."],
    ["The library opened a small workshop for repairing old books.",
     "Volunteers learn to reattach loose pages and mend torn spines.",
     "The work is slow, but a repaired book can be lent for many more years.",
     "Some of the volunteers have now trained others in the neighbouring towns."],
    ["Tomatoes need warmth, sunlight and regular watering.",
     "If the soil dries out and is then soaked, the fruit often splits.",
     "Gardeners in cooler regions grow them in greenhouses or against a south facing wall."],
    ["The bridge was built in eighteen months by a team of two hundred workers.",
     "Its steel arches were assembled on the shore and floated into place on barges.",
     "On the day it opened, thousands of people walked across it before the first car was allowed.",
     "It still carries most of the traffic between the two halves of the town."],
    ["Maps of the night sky were once drawn entirely by hand.",
     "Astronomers recorded the position of each star through a telescope and a set of careful measurements.",
     "Today cameras and computers do the same work in a fraction of the time.",
     "The old charts remain useful for studying how stars move over centuries."],
    ["She opened the letter at the kitchen table.",
     "It was from her grandfather, written in the careful handwriting she remembered.",
     "He described the farm where he had grown up and the horse he had ridden to school.",
     "She read it twice and then put it away in the drawer with the photographs."],
    ["Walking is one of the simplest forms of exercise.",
     "It needs no equipment beyond a comfortable pair of shoes.",
     "A brisk walk of half an hour most days improves sleep and mood.",
     "Many people find that they notice more of their own town on foot!"],
    ["The museum's newest exhibit explains how clocks keep time.",
     "A pendulum swings with a regular period that depends mostly on its length.",
     "Later clocks replaced the pendulum with a vibrating crystal of quartz.",
     "The most precise clocks now count the oscillations of atoms."],
]
TEXTS = [" ".join(sentences) for sentences in DOCUMENTS]
SEED = 3


def _frame(texts: list[str]) -> pd.DataFrame:
    """The documents with the extra columns a crawl or a Hub dataset carries."""
    return pd.DataFrame({"id": range(len(texts)), "url": [f"https://example.org/{i}" for i in range(len(texts))],
                         "text": texts, "words": [len(t.split()) for t in texts]})


# ----------------------------------------------------------------------------- how other tools write a corpus

def _lines(folder: Path, cache: Path, name: str = "corpus.txt", texts: list[str] = TEXTS) -> Path:
    path = folder / name
    path.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    return path


def _paragraphs(folder: Path, cache: Path) -> Path:
    path = folder / "paragraphs.txt"
    path.write_text("\n\n".join(TEXTS) + "\n", encoding="utf-8")
    return path


def _bert_layout(folder: Path, cache: Path) -> Path:
    path = folder / "sentences.txt"
    path.write_text("\n\n".join("\n".join(sentences) for sentences in DOCUMENTS) + "\n", encoding="utf-8")
    return path


def _compressed(suffix: str, opener):
    def write(folder: Path, cache: Path) -> Path:
        path = folder / f"corpus.txt{suffix}"
        with opener(path, "wb") as handle:
            handle.write("".join(t + "\n" for t in TEXTS).encode("utf-8"))
        return path
    return write


def _zstandard(path: Path, mode: str):
    zstandard = pytest.importorskip("zstandard")
    return zstandard.open(path, mode)


def _text_shards(folder: Path, cache: Path) -> Path:
    shards = folder / "shards"
    shards.mkdir()
    for index, start in enumerate(range(0, len(TEXTS), 5)):
        _lines(shards, cache, f"part-{index:05d}.txt", TEXTS[start:start + 5])
    return shards


def _jsonl_gz_shards(folder: Path, cache: Path) -> Path:
    shards = folder / "jsonl-shards"
    shards.mkdir()
    frame = _frame(TEXTS)
    frame[:7].to_json(shards / "train-00000-of-00002.jsonl.gz", orient="records", lines=True, compression="gzip")
    frame[7:].to_json(shards / "train-00001-of-00002.jsonl.gz", orient="records", lines=True, compression="gzip")
    return shards


def _pandas(suffix: str, **kwargs):
    def write(folder: Path, cache: Path) -> Path:
        path = folder / f"corpus{suffix}"
        frame = _frame(TEXTS)
        if suffix in (".csv", ".tsv"):
            frame.to_csv(path, index=False, **kwargs)
        else:
            frame.to_json(path, orient="records", **kwargs)
        return path
    return write


def _parquet(folder: Path, cache: Path) -> Path:
    path = folder / "corpus.parquet"
    pq.write_table(pa.Table.from_pandas(_frame(TEXTS), preserve_index=False), path)
    return path


def _saved(folder: Path, cache: Path) -> Path:
    path = folder / "saved"
    datasets.Dataset.from_pandas(_frame(TEXTS), preserve_index=False).save_to_disk(str(path), num_shards=2)
    return path


def _wikiextractor(compress: bool):
    """WikiExtractor's folder `text/AA/wiki_00`, ... (`.bz2` with its --compress): `<doc>` blocks of the title, a
    blank line and the paragraphs (here two of each document's sentences)."""
    def write(folder: Path, cache: Path) -> Path:
        text = folder / "text"
        for index, start in enumerate(range(0, len(DOCUMENTS), 5)):
            blocks = "".join(f'<doc id="{n}" url="https://en.wikipedia.org/wiki?curid={n}" title="Article {n}">\n'
                             f"Article {n}\n\n{' '.join(s[:2])}\n{' '.join(s[2:])}\n\n</doc>\n"
                             for n, s in enumerate(DOCUMENTS[start:start + 5], start))
            path = text / ("AA", "AB", "AC")[index] / ("wiki_00.bz2" if compress else "wiki_00")
            path.parent.mkdir(parents=True)
            path.write_bytes(bz2.compress(blocks.encode()) if compress else blocks.encode())
        return text
    return write


def _hub_cache(folder: Path, cache: Path) -> str:
    """A Hub dataset in the offline cache, as an online `load_dataset("lineage-tests/english")` leaves it."""
    rows = _pandas(".jsonl", lines=True)(folder, cache)
    return hub_dataset(cache, "lineage-tests/english", "default", {"train": rows})


LAYOUTS = {
    "one document per line": _lines,
    "paragraphs between blank lines": _paragraphs,
    "BERT's layout": _bert_layout,
    ".txt.gz": _compressed(".gz", gzip.open),
    ".txt.bz2": _compressed(".bz2", bz2.open),
    ".txt.xz": _compressed(".xz", lzma.open),
    ".txt.zst": _compressed(".zst", _zstandard),
    "folder of .txt shards": _text_shards,
    "folder of .jsonl.gz shards": _jsonl_gz_shards,
    "JSON Lines with extra columns": _pandas(".jsonl", lines=True),
    "JSON array with extra columns": _pandas(".json"),
    "CSV": _pandas(".csv"),
    "TSV": _pandas(".tsv", sep="\t"),
    "parquet": _parquet,
    "save_to_disk folder": _saved,
    "WikiExtractor's text/AA/wiki_00": _wikiextractor(compress=False),
    "WikiExtractor's text/AA/wiki_00.bz2": _wikiextractor(compress=True),
    "Hub dataset, offline cache": _hub_cache,
}


@pytest.fixture(scope="module")
def tokenizers():
    return {"gpt": train_tokenizer("gpt", TEXTS, 300), "bert": train_tokenizer("bert", TEXTS, 300)}


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """A LINEAGE_CACHE and a datasets cache nobody has used: nothing an earlier read kept can decide the result."""
    monkeypatch.setenv("LINEAGE_CACHE", str(tmp_path / "lineage-cache"))
    return tmp_path / "datasets-cache"


def _normalized(texts) -> list[str]:
    return [" ".join(t.split()) for t in texts]


def _gpt_blocks(data, tokenizer, block_size: int = 16, pack_documents: bool = False) -> list[dict]:
    blocks = prepare_causal_lm_dataset(data, tokenizer, block_size, pack_documents=pack_documents)
    return list(blocks) if isinstance(blocks, datasets.IterableDataset) else [blocks[i] for i in range(len(blocks))]


def _bert_pairs(data, tokenizer, seed: int, max_length: int = 32) -> list[dict]:
    check_documents(data, "the corpus")
    pairs = prepare_nsp_dataset(data, tokenizer, max_length, seed=seed)
    return list(pairs) if isinstance(pairs, datasets.IterableDataset) else [pairs[i] for i in range(len(pairs))]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_layout_gives_the_same_documents_blocks_and_pairs_in_memory_and_streamed(layout, tmp_path, fresh_cache,
                                                                                       tokenizers, capsys):
    """Streamed first, from fresh caches (the order a new user's first run has), then in memory: the same documents,
    GPT's blocks and BERT's pairs (the stream seeds its group of documents with `group_seed`)."""
    source = LAYOUTS[layout](tmp_path, fresh_cache)
    read = {mode: load_text_dataset(source, columns=[("text", "text")], streaming=mode == "streamed",
                                    cache_dir=str(fresh_cache)) for mode in ("streamed", "in memory")}
    stream, memory = read["streamed"], read["in memory"]
    assert isinstance(stream, datasets.IterableDataset) and isinstance(memory, datasets.Dataset)
    streamed_texts = [row["text"] for row in stream]
    assert _normalized(streamed_texts) == _normalized(memory["text"]) == TEXTS
    if Path(source).is_dir() and not layout.startswith("save_to_disk"):
        listed = capsys.readouterr().out
        shards = sorted(p.name for p in Path(source).iterdir())
        assert f"{len(shards)} data files, read in this order: " in listed
        assert [listed.index(name) for name in shards] == sorted(listed.index(name) for name in shards)
    assert _gpt_blocks(stream, tokenizers["gpt"]) == _gpt_blocks(memory, tokenizers["gpt"])
    memory_seed = group_seed(SEED, streamed_texts[0])
    assert _bert_pairs(stream, tokenizers["bert"], SEED) == _bert_pairs(memory, tokenizers["bert"], memory_seed)


@pytest.mark.parametrize("pack_documents", [False, True])
def test_empty_documents_add_no_tokens_to_gpts_blocks(pack_documents, tmp_path, fresh_cache, tokenizers):
    """Blank lines of a `.txt` file read a row per line, and empty texts of a parquet file (as pandas writes them):
    GPT's blocks are those of the same corpus without them, in memory and streamed (before: each gave a lone
    end-of-text token), as transformers' run_clm.py concatenates nothing for them."""
    blank = [text for pair in zip(TEXTS, [""] * len(TEXTS)) for text in pair]
    lines = _lines(tmp_path, fresh_cache, "blank-lines.txt", ["", *blank, ""])
    records = tmp_path / "records.parquet"
    _frame(["", *blank]).to_parquet(records, index=False)
    plain = load_text_dataset(_lines(tmp_path, fresh_cache), text_sample_by="line", cache_dir=str(fresh_cache))
    expected = _gpt_blocks(plain, tokenizers["gpt"], pack_documents=pack_documents)
    for source in (lines, records):
        for streaming in (False, True):
            data = load_text_dataset(source, columns=[("text", "text")], streaming=streaming, text_sample_by="line",
                                     cache_dir=str(fresh_cache))
            assert _gpt_blocks(data, tokenizers["gpt"], pack_documents=pack_documents) == expected


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.permutations(range(len(TEXTS))).flatmap(lambda p: st.integers(2, len(p)).map(lambda n: p[:n])),
       block_size=st.integers(4, 48), pack_documents=st.booleans(), max_length=st.integers(12, 64),
       seed=st.integers(0, 1000))
def test_streamed_and_in_memory_give_the_same_first_batches(order, block_size, pack_documents, max_length, seed,
                                                            tokenizers, monkeypatch):
    """For any documents in any order: the same GPT blocks (with or without document positions) and the same BERT
    pairs, whichever way the same file is read."""
    with tempfile.TemporaryDirectory() as folder:
        monkeypatch.setenv("LINEAGE_CACHE", str(Path(folder) / "lineage-cache"))
        texts = [TEXTS[i] for i in order]
        path = _lines(Path(folder), Path(folder), texts=texts)
        stream, memory = (load_text_dataset(path, streaming=mode, cache_dir=str(Path(folder) / "datasets-cache"))
                          for mode in (True, False))
        gpt, bert = tokenizers["gpt"], tokenizers["bert"]
        if sum(len(gpt(t)["input_ids"]) + 1 for t in texts) >= block_size:
            assert (_gpt_blocks(stream, gpt, block_size, pack_documents)
                    == _gpt_blocks(memory, gpt, block_size, pack_documents))
        assert (_bert_pairs(stream, bert, seed, max_length)
                == _bert_pairs(memory, bert, group_seed(seed, texts[0]), max_length))


# ----------------------------------------------------------------------------- the same checks, the same messages

def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _rows(texts=TEXTS[:5]) -> list[dict]:
    return [{"id": i, "text": t} for i, t in enumerate(texts)]


BAD = {  # name -> (write the file, columns, error class, what the message says)
    "an int in a JSON Lines text column": (
        lambda d: _jsonl(d / "a.jsonl", _rows()[:3] + [{"id": 3, "text": 7}] + _rows()[4:]), [("text", "text")],
        DataError, r"a\.jsonl: line 4 \(JSON Lines, column 'text'\): the value is an int \(7\), but column 'text' "
                   r"must hold a string"),
    "an empty translation target": (
        lambda d: _jsonl(d / "pairs.jsonl", [{"source": t, "target": "" if i == 2 else t} for i, t in
                                             enumerate(TEXTS[:4])]),
        [("source", "text"), ("target", "text")], MissingColumnError,
        r"pairs\.jsonl: line 3 \(JSON Lines, column 'target'\): the row has no value for column 'target' \(an empty "
        r"string\)"),
    "a JSON line without the text key": (
        lambda d: _jsonl(d / "b.jsonl", _rows()[:2] + [{"id": 2, "title": "no text"}] + _rows()[3:]),
        [("text", "text")], MissingColumnError,
        r"b\.jsonl: line 3 \(JSON Lines, column 'text'\): the row has no value"),
    "an empty CSV field": (
        lambda d: (_frame(["", *TEXTS[1:4]]).to_csv(d / "c.csv", index=False), d / "c.csv")[1],
        [("text", "text")], MissingColumnError, r"c\.csv: line 2 \(CSV, column 'text'\): the row has no value"),
    "a number column as text in parquet": (
        lambda d: (pq.write_table(pa.Table.from_pandas(_frame(TEXTS[:3]), preserve_index=False), d / "d.parquet"),
                   d / "d.parquet")[1],
        [("words", "text")], DataError, r"d\.parquet: row 0, column 'words': the value is an int"),
    "a blank text in the second shard of a folder": (
        lambda d: (_jsonl(d / "part-0.jsonl", _rows()), _jsonl(d / "part-1.jsonl", _rows()[:1] + [{"text": "  "}]),
                   d)[2],
        [("text", "text"), ("id", "label")], MissingColumnError,  # a corpus (text alone) reads it as a blank line
        r"part-1\.jsonl: line 2 \(JSON Lines, column 'text'\): the row has no value for column 'text' \(only "
        r"whitespace\)"),
    "SQuAD answers of 2 texts and 1 start": (
        lambda d: _jsonl(d / "q.jsonl", [{"answers": {"text": ["Oslo"], "answer_start": [0]}},
                                         {"answers": {"text": ["Oslo", "Norway"], "answer_start": [0]}}]),
        [("answers", "answers")], DataError,
        r"q\.jsonl: line 2 \(JSON Lines, column 'answers'\): the answers have 2 entries in 'text' but 1 in "
        r"'answer_start' \(\{.*\}\): each answer text needs its start, so column 'answers' must hold two lists of the "
        r"same length, as in SQuAD: \{'text': \[strings\], 'answer_start': \[integers\]\}"),
    "a missing value in a save_to_disk folder": (
        lambda d: (datasets.Dataset.from_dict({"text": [TEXTS[0], None]}).save_to_disk(str(d / "saved")),
                   d / "saved")[1],
        [("text", "text")], MissingColumnError, r"saved: row 1, column 'text': the row has no value"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_streamed_and_in_memory_refuse_the_same_value_with_the_same_message(case, tmp_path, fresh_cache):
    """In memory the value is refused when the data is loaded; in a stream when its row is read (the row counted as
    read), with the same text."""
    write, columns, error, message = BAD[case]
    folder = tmp_path / "data"
    folder.mkdir()
    source = write(folder)
    stream = load_text_dataset(source, columns=columns, streaming=True, cache_dir=str(fresh_cache))
    with pytest.raises(error, match=message) as streamed:
        list(stream)
    with pytest.raises(error, match=message) as in_memory:
        load_text_dataset(source, columns=columns, cache_dir=str(fresh_cache))
    assert str(streamed.value) == str(in_memory.value)


@pytest.mark.parametrize("lanes", [3, 1])
def test_a_value_refused_in_one_lane_of_shards_names_its_file_and_line(lanes, tmp_path, fresh_cache):
    """A stream of shards read in lanes side by side (`batching.StreamBatches`) counts rows per lane; the refusal still
    names the shard and its line."""
    for index in range(3):
        rows = _rows(TEXTS[index * 4:index * 4 + 4])
        if index == 2:
            rows[1]["text"] = None
        _jsonl(tmp_path / f"part-{index}.jsonl", rows)
    stream = load_text_dataset(tmp_path, columns=[("text", "text")], streaming=True, cache_dir=str(fresh_cache))
    with pytest.raises(MissingColumnError, match=r"part-2\.jsonl: line 2 \(JSON Lines, column 'text'\)"):
        list(stream.shard(lanes, lanes - 1, contiguous=False))


@exact_resume
def test_a_resumed_stream_still_names_the_line_of_a_bad_value(tmp_path, fresh_cache):
    """The stream's check counts rows from its start through a saved and restored position (a resumed run)."""
    rows = [{"text": f"Sentence number {i} of the stream."} for i in range(2500)]
    rows[2300] = {"text": ["a", "list"]}
    path = _jsonl(tmp_path / "long.jsonl", rows)
    stream = load_text_dataset(path, columns=[("text", "text")], streaming=True, cache_dir=str(fresh_cache))
    read = iter(stream)
    assert [next(read)["text"] for _ in range(1500)] == [r["text"] for r in rows[:1500]]
    resumed = load_text_dataset(path, columns=[("text", "text")], streaming=True, cache_dir=str(fresh_cache))
    resumed.load_state_dict(stream.state_dict())
    read = iter(resumed)
    assert next(read)["text"] == rows[1500]["text"]
    with pytest.raises(DataError, match=r"long\.jsonl: line 2301 \(JSON Lines, column 'text'\): the value is a list"):
        list(read)


def test_streamed_translation_refuses_an_empty_target_as_in_memory(tmp_path, fresh_cache):
    from train.train_translation import main as train_translation

    path = BAD["an empty translation target"][0](tmp_path)
    base = ["--recipe", "rnn-translation-tiny", "--train_file", str(path), "--max_steps", "2", "--save_steps", "0",
            "--progress_bar", "false", "--report_to", "none"]
    messages = []
    for streaming in ("true", "false"):
        with pytest.raises(MissingColumnError) as refused:
            train_translation([*base, "--streaming", streaming, "--output_dir", str(tmp_path / streaming)])
        messages.append(str(refused.value))
    assert messages[0] == messages[1] and "line 3 (JSON Lines, column 'target')" in messages[0]


# ----------------------------------------------------------------------------- the commands, from a fresh cache

def _bert_shards(folder: Path, cache: Path) -> Path:
    shards = folder / "bert-shards"
    shards.mkdir()
    for index, start in enumerate(range(0, len(DOCUMENTS), 5)):
        text = "\n\n".join("\n".join(sentences) for sentences in DOCUMENTS[start:start + 5])
        (shards / f"part-{index:05d}.txt").write_text(text + "\n", encoding="utf-8")
    return shards


COMMAND_DATA = {("pretrain_gpt", "file"): _lines, ("pretrain_gpt", "folder"): _text_shards,
                ("pretrain_bert", "file"): _bert_layout, ("pretrain_bert", "folder"): _bert_shards,
                ("pretrain_gpt", "WikiExtractor's"): _wikiextractor(compress=True),
                ("pretrain_bert", "WikiExtractor's"): _wikiextractor(compress=False)}


@pytest.mark.parametrize("command, data", list(COMMAND_DATA))
def test_a_first_streamed_run_trains_from_a_fresh_cache(command, data, tmp_path, fresh_cache, monkeypatch, capsys):
    """`lineage train ... --streaming true` as a new user's first run: a LINEAGE_CACHE and a datasets cache of its own,
    no earlier in-memory read of the file."""
    from train import pretrain_bert, pretrain_gpt

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", fresh_cache)
    source = COMMAND_DATA[command, data](tmp_path, fresh_cache)
    main = {"pretrain_gpt": pretrain_gpt.main, "pretrain_bert": pretrain_bert.main}[command]
    results, folder = main(["--recipe", f"{command.removeprefix('pretrain_')}-pretrain-tiny", "--train_file",
                            str(source), "--streaming", "true", "--max_steps", "2", "--save_steps", "0",
                            "--progress_bar", "false", "--report_to", "none", "--output_dir", str(tmp_path / "out")])
    assert results["steps"] == 2 and (folder / "model.safetensors").is_file()
    if data != "file":
        assert "3 data files, read in this order: " in capsys.readouterr().out
