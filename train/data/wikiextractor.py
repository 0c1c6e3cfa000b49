"""WikiExtractor's output (`text/AA/wiki_00`, ...; `.bz2` with --compress) read as a row per `<doc>` block: its
id, url, title and text, the body's lines of text (paragraphs) without the title line WikiExtractor repeats (as
NVIDIA's BERT preprocessing drops it), `&lt; &gt; &amp;` of its --html-safe read back. A malformed file is refused
naming its line; a stream reads a file per shard. docs/training.md, "Data".
"""

from __future__ import annotations

import re
import reprlib
from collections.abc import Iterator
from pathlib import Path

import datasets

from train.data.errors import DataError, EmptyDataFileError
from train.data.file_bytes import check_signature, compression, head, text_lines
from train.data.fingerprints import files_digest

FORMAT = "wikiextractor"  # the format of such files, beside file_bytes.FORMATS'


ONLY_TEXT = ("WikiExtractor's output (<doc> blocks, an article each) is read as documents of text, for a task that "
             "reads one column of text (pretraining, a tokenizer's training)")


# the line that opens a block: its attributes in any order (WikiExtractor 2's --revision writes revid before url), a
# value running to the quote before the next attribute or the end (a title is written with its quotes unescaped)
_OPENING = re.compile(r'<doc((?: [\w-]+=".*?")+)>')
_ATTRIBUTE = re.compile(r' ([\w-]+)="(.*?)"(?= [\w-]+="|$)')


FEATURES = datasets.Features({name: datasets.Value("string") for name in ("id", "url", "title", "text")})


def is_wikiextractor(path: Path) -> bool:
    """Whether the file's first line opens a `<doc id=...>` block (read from its first bytes, decompressed)."""
    return re.match(r'\s*<doc id="', head(path).decode("utf-8", errors="ignore")) is not None


def _unescaped(line: str) -> str:
    """A line as it was before WikiExtractor's --html-safe (on by default) escaped `<`, `>` and `&`."""
    return line.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _opening(line: str) -> dict[str, str] | None:
    """The attributes of a line that opens a block (id, url and title among them), or None."""
    match = _OPENING.fullmatch(line.strip())
    attributes = dict(_ATTRIBUTE.findall(match[1])) if match else {}
    return attributes if {"id", "url", "title"} <= attributes.keys() else None


def _document(opening: dict[str, str], body: list[str]) -> dict[str, str]:
    if body and body[0].strip() == opening["title"].strip():
        body = body[1:]
    text = "\n".join(_unescaped(line) for line in body if line.strip())
    return {"id": opening["id"], "url": opening["url"], "title": opening["title"], "text": text}


def documents(path: Path) -> Iterator[dict[str, str]]:
    """A WikiExtractor file's rows, a block each; a block of no text is left out."""
    opening, opened_at, body, number = None, 0, [], 0
    for number, line in enumerate(text_lines(path), 1):
        if opening is None:
            opening = _opening(line)
            if opening is not None:
                opened_at, body = number, []
            elif line.strip():
                raise DataError(f"{path}: line {number}: text outside a <doc> block ({reprlib.repr(line)}): "
                                f"WikiExtractor's output holds <doc id=... url=... title=...> ... </doc> blocks only; "
                                f"extract the file again, or remove the line")
        elif line.strip() == "</doc>":
            row, opening = _document(opening, body), None
            if row["text"]:
                yield row
        elif _opening(line) is not None:
            raise DataError(f"{path}: line {number}: a <doc> block opens before the one opened at line {opened_at} "
                            f"is closed by </doc>; extract the file again")
        else:
            body.append(line)
    if opening is not None:
        raise DataError(f"{path}: line {opened_at}: the <doc> block opened here is not closed by </doc> (the file "
                        f"ends at line {number}); it may be cut short: extract or copy it again")


def _rows(files: list[str]) -> Iterator[dict[str, str]]:
    for path in files:
        yield from documents(Path(path))


def load_wikiextractor(files: list[Path], kinds: dict[str, str | None], streaming: bool, cache_dir: str | None,
                       num_proc: int | None = None) -> datasets.Dataset | datasets.IterableDataset:
    """The rows of `files`, for a task of one column of text (`kinds`); in memory named by the files' content."""
    if len(kinds) != 1 or next(iter(kinds.values())) not in ("text", None):
        raise DataError(f"{files[0]}: {ONLY_TEXT}; this task reads the columns {', '.join(kinds)}: give its data as "
                        f"a table (.jsonl, .csv, .parquet) or a saved dataset")
    for path in files:
        if path.stat().st_size == 0:
            raise EmptyDataFileError(f"{path}: the data file is empty")
        if compression(path) is not None:
            check_signature(path)
    gen_kwargs = {"files": [str(path) for path in files]}  # a list: a shard per file
    if streaming:
        return datasets.IterableDataset.from_generator(_rows, features=FEATURES, gen_kwargs=gen_kwargs)
    try:
        dataset = datasets.Dataset.from_generator(_rows, features=FEATURES, gen_kwargs=gen_kwargs,
                                                  cache_dir=cache_dir, num_proc=num_proc,
                                                  fingerprint=f"wikiextractor-1-{files_digest(files)}")
    except datasets.exceptions.DatasetGenerationError as error:
        cause = error.__cause__
        while cause is not None and not isinstance(cause, DataError):
            cause = cause.__cause__
        if cause is None:
            raise
        raise cause from None
    if len(dataset) == 0:
        raise EmptyDataFileError(f"{files[0]}{f' and {len(files) - 1} more' if len(files) > 1 else ''}: the "
                                 f"<doc> blocks hold no text")
    return dataset


__all__ = ["FEATURES", "FORMAT", "ONLY_TEXT", "documents", "is_wikiextractor", "load_wikiextractor"]
