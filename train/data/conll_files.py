"""CoNLL files for token classification: a token per line, its word and tags in columns separated by spaces (or
tabs, where the first token line has one), a blank line after each sentence, `-DOCSTART-` lines skipped (as the Hub's
conll2003 script does). A sentence is a row of the Hub's conll2003 columns, tags as strings: `id`, `tokens` (the first
column), `pos_tags` and `chunk_tags` (four columns; `pos_tags` alone of three, `tags_<n>` of five or more) and
`ner_tags` (the last). Read whole before anything is kept, bad lines refused naming the file and line; in memory
through datasets' cache keyed by the files' content, streamed a shard per file. docs/training.md, "CoNLL files".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import datasets

from train.data.files import DataError, EmptyDataFileError, UnknownColumnError, text_lines, validate_files
from train.data.fingerprints import files_digest

DOCSTART = "-DOCSTART-"
LAYOUT = ("a CoNLL file holds a token per line: its word, then its tags (the last one the label), in the same "
          "columns on every line, and a blank line after each sentence")
READ: set[Path] = set()  # the files this process read as CoNLL, whose rows `location` names by line


def column_names(width: int) -> list[str]:
    middle = {3: ["pos_tags"], 4: ["pos_tags", "chunk_tags"]}.get(width, [f"tags_{n}" for n in range(2, width)])
    return ["tokens", *middle, "ner_tags"]


def _sentences(path: Path) -> Iterator[tuple[int, list[list[str]] | None]]:
    """`(line, its columns per token)` of each sentence, `(line, None)` of each -DOCSTART- line."""
    width, sentence, start, first, tabs = 0, [], 0, 0, False
    for number, line in enumerate(text_lines(path), 1):
        text = line.strip()
        if not text or text.startswith(DOCSTART):
            if sentence:
                yield start, sentence
            if text:
                yield number, None
            sentence = []
            continue
        if not width:
            first, tabs = number, "\t" in text
        fields = [field.strip() for field in line.split("\t")] if tabs else text.split()
        width = width or len(fields)
        if width == 1:
            raise DataError(f"{path}: line {number}: one column ({text!r}), no tag; {LAYOUT}")
        if len(fields) != width:
            raise DataError(f"{path}: line {number}: {len(fields)} column{'s' * (len(fields) > 1)} where line {first}, "
                            f"the first token line, has {width} (split at {'tabs' if tabs else 'spaces'}); {LAYOUT}")
        if "" in fields:
            raise DataError(f"{path}: line {number}: column {fields.index('') + 1} is empty; {LAYOUT}")
        start = start if sentence else number
        sentence.append(fields)
    if sentence:
        yield start, sentence


def _layout(path: Path) -> tuple[int, int, int]:
    """`(columns, sentences, -DOCSTART- lines)` of a file, read whole."""
    width = sentences = documents = 0
    for _, tokens in _sentences(path):
        documents += tokens is None
        sentences += tokens is not None
        width = width or (len(tokens[0]) if tokens else 0)
    if not sentences:
        raise EmptyDataFileError(f"{path}: no sentence, only -DOCSTART- lines; {LAYOUT}")
    return width, sentences, documents


def _rows(files: list[str]) -> Iterator[dict]:
    for file in files:
        sentences = (tokens for _, tokens in _sentences(Path(file)) if tokens is not None)
        for index, tokens in enumerate(sentences):
            yield {"id": str(index), **dict(zip(column_names(len(tokens[0])), map(list, zip(*tokens))))}


def load_conll(files: list[Path], columns: list[str], streaming: bool, cache_dir: str | None):
    """The sentences of `files` as rows (module docstring), refused where a file lacks one of `columns`."""
    validate_files(files, "text")
    layouts = [_layout(path) for path in files]
    width = layouts[0][0]
    for path, (other, _, _) in zip(files, layouts):
        if other != width:
            raise DataError(f"{path} has {other} columns but {files[0]} has {width}: read together, the files must "
                            f"have the same columns")
    names = column_names(width)
    missing = next((column for column in columns if column not in names), None)
    if missing:
        raise UnknownColumnError(f"{files[0]}: no column {missing!r}; read as CoNLL ({width} columns), the file has "
                                 f"the columns {', '.join(names)}")
    for path, (_, sentences, documents) in zip(files, layouts):
        skipped = f" ({documents} -DOCSTART- line{'s' * (documents > 1)} skipped)" if documents else ""
        print(f"{path}: CoNLL layout, {width} columns ({', '.join(names)}), {sentences} sentence"
              f"{'s' * (sentences > 1)}{skipped}", flush=True)
    READ.update(path.resolve() for path in files)
    words = datasets.List(datasets.Value("string"))
    features = datasets.Features({"id": datasets.Value("string"), **dict.fromkeys(names, words)})
    gen_kwargs = {"files": [str(path) for path in files]}  # a list: a shard per file
    if streaming:
        return datasets.IterableDataset.from_generator(_rows, features=features, gen_kwargs=gen_kwargs)
    return datasets.Dataset.from_generator(_rows, features=features, gen_kwargs=gen_kwargs, cache_dir=cache_dir,
                                           fingerprint=f"conll-{files_digest(files)}")


def location(path: Path, row: int, column: str | None) -> str:
    """Where sentence `row` (0-based) of a CoNLL file starts, as `files.row_location` says it."""
    starts = (line for line, tokens in _sentences(path) if tokens is not None)
    line = next((line for index, line in enumerate(starts) if index == row), None)
    return f"{path}: line {line} (CoNLL sentence {row + 1}{f', column {column!r}' if column else ''})"


__all__ = ["DOCSTART", "READ", "column_names", "load_conll", "location"]
