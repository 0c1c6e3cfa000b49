"""CoNLL files for token classification: a token per line, its word and tags in columns separated by spaces (or
tabs, where the first token line has one), a blank line after each sentence, `-DOCSTART-` lines skipped (as the Hub's
conll2003 script does). A sentence is a row of the Hub's conll2003 columns, tags as strings: `id`, `tokens` (the first
column), `pos_tags` and `chunk_tags` (four columns; `pos_tags` alone of three, `tags_<n>` of five or more) and
`ner_tags` (the last); a first line that names the columns (`token<TAB>pos<TAB>ner`, a spreadsheet's header) names
them instead (`HEADER`). Read whole before anything is kept, bad lines refused naming the file and line; in memory
through datasets' cache keyed by the files' content, streamed a shard per file. docs/training.md, "CoNLL files".
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import datasets

from train.data.errors import DataError, EmptyDataFileError, UnknownColumnError
from train.data.file_bytes import text_lines
from train.data.files import validate_files
from train.data.fingerprints import files_digest

DOCSTART = "-DOCSTART-"
LAYOUT = ("a CoNLL file holds a token per line: its word, then its tags (the last one the label), in the same "
          "columns on every line, and a blank line after each sentence")
READ: set[Path] = set()  # the files this process read as CoNLL, whose rows `location` names by line


# a header's spellings of the columns the reader names (any case): a first line whose first field names the words
# and whose last names tags is a header, its other fields named as written
HEADER = {"tokens": ("token", "tokens", "word", "words", "form"), "pos_tags": ("pos", "pos_tag", "pos_tags", "upos"),
          "chunk_tags": ("chunk", "chunk_tag", "chunk_tags"),
          "ner_tags": ("ner", "ner_tag", "ner_tags", "tag", "tags", "label", "labels")}
SPELLINGS = {spelling: name for name, spellings in HEADER.items() for spelling in spellings}


def column_names(width: int) -> list[str]:
    middle = {3: ["pos_tags"], 4: ["pos_tags", "chunk_tags"]}.get(width, [f"tags_{n}" for n in range(2, width)])
    return ["tokens", *middle, "ner_tags"]


def _header(path: Path, number: int, fields: list[str]) -> list[str] | None:
    """The columns `fields`, a file's first token line, name where it is a header (`HEADER`); None for a token line.
    Refused: a header after an unnamed column (pandas' index), a name twice."""
    spelt = [field.lower() for field in fields]
    if spelt[0] == "" and len(spelt) > 2 and SPELLINGS.get(spelt[1]) == "tokens" and spelt[-1] in SPELLINGS:
        raise DataError(f"{path}: line {number}: a header ({', '.join(fields[1:])}) after an unnamed first column, "
                        f"as pandas' to_csv writes the index of a DataFrame; write the file without it: "
                        f"df.to_csv(path, sep='\\t', index=False) (a row of empty fields between sentences); {LAYOUT}")
    if len(spelt) < 2 or SPELLINGS.get(spelt[0]) != "tokens" or SPELLINGS.get(spelt[-1], "tokens") == "tokens":
        return None
    names = [SPELLINGS.get(spelling, field) for spelling, field in zip(spelt, fields)]
    twice = next((name for i, name in enumerate(names) if name in (*names[:i], "id")), None)
    if twice is not None:
        raise DataError(f"{path}: line {number}: the header ({', '.join(fields)}) names the column {twice!r} twice "
                        f"('id' is each sentence's number); name each column once")
    return names


def _lists(path: Path, number: int, fields: list[str]) -> None:
    """Refuse a first token line whose fields are lists: a sentence per line, as pandas writes word lists."""
    try:
        lists = all(f[:1] + f[-1:] == "[]" for f in fields) and isinstance(ast.literal_eval(fields[0]), list)
    except (ValueError, SyntaxError):
        lists = False
    if lists:
        raise DataError(f"{path}: line {number}: each column holds a list ({fields[0][:40]!r}...), a sentence per line "
                        f"as pandas writes a DataFrame of word lists; write it as JSON Lines instead, "
                        f"df.to_json(path, orient='records', lines=True), or a token per line; {LAYOUT}")


def _fields(line: str, tabs: bool) -> list[str]:
    return [field.strip() for field in line.split("\t")] if tabs else line.split()


def _names(path: Path) -> tuple[list[str], list[str] | None]:
    """`(the file's column names, the fields of its header or None)`, from its first token line."""
    for number, line in enumerate(text_lines(path), 1):
        text = line.strip()
        if text and not text.startswith(DOCSTART):
            fields = _fields(line, "\t" in text)
            names = _header(path, number, fields)
            return (names, fields) if names else (column_names(len(fields)), None)
    return [], None


def _sentences(path: Path) -> Iterator[tuple[int, list[list[str]] | None]]:
    """`(line, its columns per token)` of each sentence, `(line, None)` of each -DOCSTART- line; a header skipped."""
    width, sentence, start, first, tabs, header = 0, [], 0, 0, False, False
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
        fields = _fields(line, tabs)
        if not width and _header(path, number, fields):
            width, header = len(fields), True
            continue
        if not start:
            _lists(path, number, fields)
        width = width or len(fields)
        if width == 1:
            raise DataError(f"{path}: line {number}: one column ({text!r}), no tag; {LAYOUT}")
        if len(fields) != width:
            where = "the header" if header else "the first token line"
            raise DataError(f"{path}: line {number}: {len(fields)} column{'s' * (len(fields) > 1)} where line {first}, "
                            f"{where}, has {width} (split at {'tabs' if tabs else 'spaces'}); {LAYOUT}")
        if "" in fields:
            raise DataError(f"{path}: line {number}: column {fields.index('') + 1} is empty; {LAYOUT}")
        start = start if sentence else number
        sentence.append(fields)
    if sentence:
        yield start, sentence


def _layout(path: Path) -> tuple[int, int]:
    """`(sentences, -DOCSTART- lines)` of a file, read whole."""
    sentences = documents = 0
    for _, tokens in _sentences(path):
        documents += tokens is None
        sentences += tokens is not None
    if not sentences:
        raise EmptyDataFileError(f"{path}: no sentence, only -DOCSTART- lines; {LAYOUT}")
    return sentences, documents


def _rows(files: list[str]) -> Iterator[dict]:
    for file in files:
        names = _names(Path(file))[0]
        sentences = (tokens for _, tokens in _sentences(Path(file)) if tokens is not None)
        for index, tokens in enumerate(sentences):
            yield {"id": str(index), **dict(zip(names, map(list, zip(*tokens))))}


def load_conll(files: list[Path], columns: list[str], streaming: bool, cache_dir: str | None):
    """The sentences of `files` as rows (module docstring), refused where a file lacks one of `columns`."""
    validate_files(files, "text")
    layouts = [_layout(path) for path in files]
    heads = [_names(path) for path in files]
    names = heads[0][0]
    for path, (other, _) in zip(files, heads):
        if other != names:
            count = f"{len(other)} columns but {files[0]} has {len(names)}" if len(other) != len(names) else (
                f"the columns {', '.join(other)} but {files[0]} has {', '.join(names)}")
            raise DataError(f"{path} has {count}: read together, the files must have the same columns")
    missing = next((column for column in columns if column not in names), None)
    if missing:
        header = f", named by its header: {', '.join(heads[0][1])}" if heads[0][1] else ""
        raise UnknownColumnError(f"{files[0]}: no column {missing!r}; read as CoNLL ({len(names)} columns{header}), "
                                 f"the file has the columns {', '.join(names)}")
    for path, (sentences, documents), (_, header) in zip(files, layouts, heads):
        skipped = f" ({documents} -DOCSTART- line{'s' * (documents > 1)} skipped)" if documents else ""
        heading = f" named by its header ({', '.join(header)})" if header else ""
        print(f"{path}: CoNLL layout, {len(names)} columns ({', '.join(names)}){heading}, {sentences} sentence"
              f"{'s' * (sentences > 1)}{skipped}", flush=True)
    READ.update(path.resolve() for path in files)
    words = datasets.List(datasets.Value("string"))
    features = datasets.Features({"id": datasets.Value("string"), **dict.fromkeys(names, words)})
    gen_kwargs = {"files": [str(path) for path in files]}  # a list: a shard per file
    if streaming:
        return datasets.IterableDataset.from_generator(_rows, features=features, gen_kwargs=gen_kwargs)
    return datasets.Dataset.from_generator(_rows, features=features, gen_kwargs=gen_kwargs, cache_dir=cache_dir,
                                           fingerprint=f"conll-2-{files_digest(files)}")  # 2: a header read as names


def location(path: Path, row: int, column: str | None) -> str:
    """Where sentence `row` (0-based) of a CoNLL file starts, as `table_files.row_location` says it."""
    starts = (line for line, tokens in _sentences(path) if tokens is not None)
    line = next((line for index, line in enumerate(starts) if index == row), None)
    return f"{path}: line {line} (CoNLL sentence {row + 1}{f', column {column!r}' if column else ''})"


__all__ = ["DOCSTART", "READ", "column_names", "load_conll", "location"]
