"""WikiExtractor's output, written as WikiExtractor writes it (`text/AA/wiki_00`, `--compress`'s `wiki_00.bz2`): its
blocks read back as their bodies (without the title line, unescaped), in memory and streamed alike; BERT's pairs keep
within an article and GPT's packed blocks separate articles, as for the same texts given as rows; a malformed file is
refused naming its line; a task of other columns refuses the files."""

import bz2
import html
from pathlib import Path

import datasets
import pytest

from train.data.errors import DataError
from train.data.files import load_text_dataset, resolve_files
from train.data.model_inputs import prepare_causal_lm_dataset, prepare_nsp_dataset
from train.data.tokenization import train_tokenizer

datasets.disable_progress_bars()

TOPICS = [("The harbour", "boats", "fishermen", "nets"), ("Bread", "flour", "ovens", "bakers"),
          ("Bees", "hives", "honey", "flowers"), ("Rivers", "banks", "floods", "bridges"),
          ("Clocks", "pendulums", "gears", "springs"), ("Trains", "stations", "tracks", "signals")]


def _article(index: int) -> tuple[str, list[str]]:
    """A title and its paragraphs of several sentences, one with the `&` and `<` that --html-safe escapes."""
    title, *words = TOPICS[index]
    paragraphs = [" ".join(f"{title} have {word} number {n} & more, for {other} < {n + 1}." for word in words)
                  for n, other in enumerate(words)]
    return title, paragraphs


def _block(index: int) -> str:
    """One article as WikiExtractor 3 writes it: the opening line, the title again, a blank line, the paragraphs
    escaped by its default --html-safe, a blank line, the closing line."""
    title, paragraphs = _article(index)
    body = "\n".join(html.escape(p, quote=False) for p in paragraphs)
    return (f'<doc id="{index + 1}" url="https://en.wikipedia.org/wiki?curid={index + 1}" title="{title}">\n'
            f"{title}\n\n{body}\n\n</doc>\n")


def _extracted(folder: Path, compress: bool) -> Path:
    """WikiExtractor's output folder `text`: AA/wiki_00, AA/wiki_01, AB/wiki_00 (of three, two and one articles),
    each compressed with bzip2 as its --compress writes it."""
    text = folder / ("compressed" if compress else "text")
    blocks = iter(range(len(TOPICS)))
    for name, count in (("AA/wiki_00", 3), ("AA/wiki_01", 2), ("AB/wiki_00", 1)):
        data = "".join(_block(next(blocks)) for _ in range(count)).encode("utf-8")
        path = text / (f"{name}.bz2" if compress else name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bz2.compress(data) if compress else data)
    (text / "AA" / "NOTES").write_text("my notes on the dump\n")  # of no suffix, but no WikiExtractor file: not data
    return text


BODIES = ["\n".join(_article(index)[1]) for index in range(len(TOPICS))]


@pytest.fixture(scope="module")
def tokenizers():
    texts = [" ".join(body.split()) for body in BODIES]
    return {"gpt": train_tokenizer("gpt", texts, 300), "bert": train_tokenizer("bert", texts, 300)}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LINEAGE_CACHE", str(tmp_path / "lineage-cache"))
    return str(tmp_path / "datasets-cache")


def _rows(data) -> list[dict]:
    return list(data) if isinstance(data, datasets.IterableDataset) else [data[i] for i in range(len(data))]


@pytest.mark.parametrize("compress", [False, True])
def test_the_blocks_read_back_as_their_bodies_in_memory_and_streamed(compress, tmp_path, cache):
    """A document per block, in the files' path order: its paragraphs as lines, without the repeated title and with
    `&amp;`/`&lt;` read back; its id, url and title beside it; a stream of a shard per file gives the same rows."""
    text = _extracted(tmp_path, compress)
    assert [p.relative_to(text).parts[-1] for p in resolve_files(text)] == [
        f"wiki_0{n}{'.bz2' if compress else ''}" for n in (0, 1, 0)]
    memory = load_text_dataset(text, cache_dir=cache)
    stream = load_text_dataset(text, streaming=True, cache_dir=cache)
    assert memory["text"] == BODIES
    assert memory["title"] == [topic[0] for topic in TOPICS]
    assert memory["id"] == [str(index + 1) for index in range(len(TOPICS))]
    assert stream.n_shards == 3 and _rows(stream) == _rows(memory)


def test_a_txt_file_of_blocks_is_read_as_blocks(tmp_path, cache):
    """A `.txt` file whose first line opens a `<doc>` block (the output renamed) is read as WikiExtractor's."""
    renamed = tmp_path / "wiki.txt"
    renamed.write_text("".join(map(_block, range(len(TOPICS)))), encoding="utf-8")
    for streaming in (False, True):
        assert [row["text"] for row in load_text_dataset(renamed, streaming=streaming, cache_dir=cache)] == BODIES


def test_blocks_of_other_attributes_are_read_alike(tmp_path, cache):
    """WikiExtractor 2's --revision writes `revid` between id and url (`<doc id="1" revid="9" url=... title=...>`),
    and an attribute may follow the title: the same bodies, ids and titles."""
    revised = tmp_path / "wiki.txt"
    blocks = [_block(i).replace('" url=', f'" revid="{i + 90}" url=', 1) for i in range(3)]
    blocks += [_block(i).replace('">\n', '" lang="en">\n', 1) for i in range(3, len(TOPICS))]
    revised.write_text("".join(blocks), encoding="utf-8")
    for streaming in (False, True):
        rows = _rows(load_text_dataset(revised, streaming=streaming, cache_dir=cache))
        assert [row["text"] for row in rows] == BODIES
        assert [(row["id"], row["title"]) for row in rows] == [(str(i + 1), t[0]) for i, t in enumerate(TOPICS)]


@pytest.mark.parametrize("streaming", [False, True])
def test_bert_pairs_keep_within_an_article_and_gpt_blocks_separate_articles(streaming, tmp_path, cache, tokenizers):
    """The pairs and packed blocks of the files equal those of the same bodies given as rows; every pair's first
    segment lies in one article, and a true next sentence in the same article; each packed block's positions restart
    where an article ends."""
    text = _extracted(tmp_path, compress=True)
    wiki = load_text_dataset(text, streaming=streaming, cache_dir=cache)
    rows = datasets.Dataset.from_dict({"text": BODIES})
    rows = rows.to_iterable_dataset() if streaming else rows
    bert, gpt = tokenizers["bert"], tokenizers["gpt"]
    pairs = _rows(prepare_nsp_dataset(wiki, bert, max_length=48, seed=1, dupe_factor=3))
    assert pairs == _rows(prepare_nsp_dataset(rows, bert, max_length=48, seed=1, dupe_factor=3)) and pairs
    articles = [bert(BODIES[i].replace("\n", " "), add_special_tokens=False)["input_ids"] for i in range(len(TOPICS))]
    for pair in pairs:
        ids, sep = pair["input_ids"], pair["input_ids"].index(bert.sep_token_id)
        a, b = ids[1:sep], ids[sep + 1:-1]
        holding_a = {i for i, article in enumerate(articles) if _within(a, article)}
        assert holding_a, bert.decode(a)
        if pair["next_sentence_label"] == 0:
            assert any(_within(b, articles[i]) for i in holding_a), (bert.decode(a), bert.decode(b))
    blocks = _rows(prepare_causal_lm_dataset(wiki, gpt, 24, pack_documents=True))
    assert blocks == _rows(prepare_causal_lm_dataset(rows, gpt, 24, pack_documents=True)) and blocks
    for block in blocks:
        ids, positions = block["input_ids"], block["position_ids"]
        restarts = [i for i in range(1, len(ids)) if positions[i] == 0]
        assert restarts == [i + 1 for i in range(len(ids) - 1) if ids[i] == gpt.eos_token_id]


def _within(part: list[int], whole: list[int]) -> bool:
    return any(whole[i:i + len(part)] == part for i in range(len(whole) - len(part) + 1))


MALFORMED = {  # name -> (the file's text, what the refusal says)
    "a block not closed": (_block(0) + _block(1).removesuffix("</doc>\n"),
                           r"wiki_00(\.bz2)?: line 9: the <doc> block opened here is not closed by </doc> \(the "
                           r"file ends at line 15\); it may be cut short"),
    "a block opened in a block": (_block(0).removesuffix("</doc>\n") + _block(1),
                                  r"wiki_00(\.bz2)?: line 8: a <doc> block opens before the one opened at line 1 "
                                  r"is closed"),
    "text outside the blocks": (_block(0) + "Stray text.\n" + _block(1),
                                r"wiki_00(\.bz2)?: line 9: text outside a <doc> block \('Stray text\.'\)"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
@pytest.mark.parametrize("compress", [False, True])
def test_a_malformed_file_is_refused_naming_its_line(name, compress, tmp_path, cache):
    """In memory at once; streamed when the stream reaches the line; plain or compressed."""
    content, message = MALFORMED[name]
    folder = tmp_path / "text" / "AA"
    folder.mkdir(parents=True)
    (folder / ("wiki_00.bz2" if compress else "wiki_00")).write_bytes(
        bz2.compress(content.encode()) if compress else content.encode())
    with pytest.raises(DataError, match=message):
        load_text_dataset(tmp_path / "text", cache_dir=cache)
    with pytest.raises(DataError, match=message):
        list(load_text_dataset(tmp_path / "text", streaming=True, cache_dir=cache))


def test_a_task_of_other_columns_refuses_the_files(tmp_path, cache):
    """Classification (text and label), token classification (words and tags): the refusal says what the files are
    read as, and what to give instead."""
    text = _extracted(tmp_path, compress=False)
    for columns in ([("text", "text"), ("label", "label")], [("tokens", "words"), ("ner_tags", "tags")]):
        with pytest.raises(DataError, match=r"AA/wiki_00: WikiExtractor's output \(<doc> blocks, an article each\) is "
                                            r"read as documents of text, for a task that reads one column of text "
                                            r"\(pretraining, a tokenizer's training\); this task reads the columns "):
            load_text_dataset(text, columns=columns, cache_dir=cache)
