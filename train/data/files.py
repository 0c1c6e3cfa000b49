"""Reading data through `datasets`: local files, the embedded corpus or a Hub dataset, checked before it is used.

`load_text_dataset` takes files (for token classification CoNLL files: `conll_files`), a folder, a `save_to_disk`
folder, a translation pair's two files by their shared prefix (`pair_files`), `"embedded:<task>"` or a Hub dataset name
(the only source that reaches the network), checks the files before the datasets cache is touched and every value of
the columns the task reads. Bad input raises a `DataError` or `DataFileNotFoundError` (`errors`) naming the file,
the line as an editor counts it (`table_files.row_location`), the column and the problem. docs/training.md, "Data".
"""

from __future__ import annotations

import csv
import functools
import glob
import json
import math
import reprlib
from collections.abc import Callable, Sequence
from pathlib import Path

import datasets
import pyarrow.compute as pc

from train.data import corpus
from train.data.errors import (
    DataError,
    DataFileNotFoundError,
    EmptyDataFileError,
    MalformedRowError,
    MissingColumnError,
    UnknownColumnError,
    UnknownSplitError,
)
from train.data.file_bytes import (
    FORMATS,
    check_signature,
    check_utf8,
    compression,
    first_line_advice,
    has_bom,
    has_paragraphs,
    once,
    suffix,
)
from train.data.fingerprints import files_digest
from train.data.folders import DOCUMENTATION, folder_files, folder_splits, is_saved
from train.data.pair_files import (
    is_language,
    listed_language,
    load_pair,
    pair_files,
    pair_hint,
    side_named,
)
from train.data.table_files import columns_of, find_bad_file, header_problem, row_location, text_problem
from train.data.wikiextractor import FORMAT as WIKIEXTRACTOR
from train.data.wikiextractor import ONLY_TEXT, is_wikiextractor, load_wikiextractor
from train.data.workers import process_count

CONLL_SUFFIXES = (".conll", ".iob", ".bio")  # listed in a folder where the task reads word lists, beside FORMATS


EMBEDDED_PREFIX = "embedded:"


TASKS = ("causal_lm", "mlm", "classification", "seq2seq", "token_classification", "qa")


TEXT_SAMPLE_BY = ("auto", "line", "paragraph", "document")


AnyDataset = datasets.Dataset | datasets.IterableDataset


Columns = Sequence[str | tuple[str, str]]


SQUAD_ANSWERS = "{'text': [strings], 'answer_start': [integers]}"  # a row's answers, as SQuAD holds them


def _answer_lists(value) -> bool:
    """Whether `value` is a dict of two lists, `text` and `answer_start` (of any length and items)."""
    return isinstance(value, dict) and isinstance(value.get("text"), list) and isinstance(value.get("answer_start"),
                                                                                          list)


def _is_answers(value) -> bool:
    return (_answer_lists(value) and len(value["text"]) == len(value["answer_start"])
            and all(isinstance(t, str) for t in value["text"])
            and all(isinstance(a, int) and not isinstance(a, bool) for a in value["answer_start"]))


# kind of column -> (what each value must be, as errors say it; the test of one value)
KINDS: dict[str, tuple[str, Callable[[object], bool]]] = {
    "text": ("a string", lambda v: isinstance(v, str)),
    "words": ("a list of strings (the words of one sentence)",
              lambda v: isinstance(v, list) and all(isinstance(w, str) for w in v)),
    "label": ("one class (an integer id or a string)", lambda v: not isinstance(v, (list, dict))),
    "score": ("one number (a score)", lambda v: not isinstance(v, (list, dict))),
    "tags": ("a list of classes, one per word", lambda v: isinstance(v, list)),
    "answers": (f"answers as in SQuAD: {SQUAD_ANSWERS}", _is_answers),
}


def _is_local(source: str) -> bool:
    path = Path(source).expanduser()
    return (path.exists() or _is_pattern(source) or source.startswith(("/", "./", "../", "~", "\\"))
            or suffix(path) in FORMATS)


def check_local_source(source: str, key: str, columns: Columns = ()) -> None:
    """Refuse, naming the recipe `key`, a path that names no local data (`names_local_data`; a Hub name is left to the
    loader): both splits' paths are checked before either is read."""
    if _is_local(source) and not names_local_data(source, columns):
        what = "the pattern matches no file" if _is_pattern(source) else "no such data file"
        raise DataFileNotFoundError(f"{source}: {what} (recipe key {key!r}){pair_hint(source, columns)}")


def names_local_data(source: str | Path, columns: Columns = ()) -> bool:
    """Whether `source` names local data: a file or folder, a glob pattern that matches a file, or the prefix of a
    translation pair's two files."""
    if (matched := pattern_files(source)) is not None:
        return bool(matched)
    return Path(source).expanduser().exists() or pair_files(source, columns) is not None


def _is_pattern(source: str | Path) -> bool:
    """Whether `source` is a glob pattern (`data/*.jsonl`, `shards/train-*.parquet`, `**` for any depth), as
    datasets' `data_files=` takes one, rather than a path that exists (a file named with a `[`)."""
    return isinstance(source, (str, Path)) and glob.has_magic(str(source)) and not Path(source).expanduser().exists()


def pattern_files(pattern: str | Path) -> list[Path] | None:
    """The files `pattern` matches as datasets' `data_files=` reads them (None: no pattern, `_is_pattern`)."""
    if not _is_pattern(pattern):
        return None
    return sorted(Path(p) for p in glob.glob(str(Path(pattern).expanduser()), recursive=True) if Path(p).is_file())


def resolve_files(source: str | Path | Sequence[str | Path], suffixes: Sequence[str] = tuple(FORMATS),
                  say: bool = False, languages: bool = False, split: str = "train") -> list[Path]:
    """The data files named by a path, a glob pattern (`_is_pattern`: the files it matches), a folder (its files of
    `suffixes`, and of `LANGUAGES` where `languages`, sorted, but its `DOCUMENTATION`, left out and, where `say`, said;
    where it holds none, its subfolders' at any depth; those of `split` in a folder of splits, `folder_splits`) or a
    list of these."""
    items = [source] if isinstance(source, (str, Path)) else list(source)
    files: list[Path] = []
    for item in items:
        path = Path(item).expanduser()
        if (found := pattern_files(item)) is not None:
            if not found:
                raise DataFileNotFoundError(f"{item}: the pattern matches no file")
            files.extend(found)
        elif path.is_dir():
            files.extend(_folder_files(path, suffixes, say, languages, split))
        elif path.is_file():
            files.append(path)
        else:
            raise DataFileNotFoundError(f"{path}: no such data file")
    return files


def _folder_files(path: Path, suffixes: Sequence[str], say: bool, languages: bool, split: str) -> list[Path]:
    """`resolve_files` of a folder."""
    languaged = languages and any(map(listed_language, path.iterdir()))
    splits, found, left = folder_files(path, suffixes, listed_language if languages else None,
                                       splits=not languaged and not is_saved(path))
    if split in splits:
        return splits[split]
    if splits:
        raise UnknownSplitError(f"{path}: its files name the splits {', '.join(splits)} (as datasets reads a "
                                f"folder), not {split!r}")
    names = ", ".join(str(p.relative_to(path)) for p in left)
    why = f"{names} left out: documentation by {'its' if len(left) == 1 else 'their'} name, not data"
    if left and say and found:
        print(f"{path}: {why} (name a file to read it)", flush=True)
    if not found:
        of = ", <prefix>.<language> (train.en)" if languages else ""
        inner = [d.name for d in sorted(path.iterdir()) if d.is_dir() and is_saved(d)]
        many = len(inner) > 1
        held = (f"; its folder{'s' if many else ''} {', '.join(inner)} hold{'' if many else 's'} data: name "
                f"{'one' if many else 'it'}" if inner else "")
        raise DataFileNotFoundError(f"{path}: folder holds no data files ({', '.join(suffixes)}{of})"
                                    f"{f'; {why}' if left else ''}{held}")
    return found


def _format_of(path: Path, data_format: str | None, text: bool) -> str | None:
    """`data_format`, else WikiExtractor's for `<doc>` blocks, its suffix's, or `text` for train.en where `text`."""
    fmt = data_format or FORMATS.get(suffix(path))
    if not data_format and fmt in (None, "text") and is_wikiextractor(path):
        return WIKIEXTRACTOR
    return fmt or ("text" if text and is_language(path) else None)


def _file_format(files: list[Path], data_format: str | None, text: bool = False) -> str:
    """The files' one format (`_format_of`)."""
    found = {f: _format_of(f, data_format, text) for f in files}
    formats = set(found.values())
    if None in formats:
        unknown = next(f for f, fmt in found.items() if fmt is None)
        language = (" (a file of a language, as train.en, is read as text lines where the task reads one column of "
                    "text: a tokenizer's or pretraining's)" if is_language(unknown) else "")
        advice = first_line_advice(unknown)
        raise DataError(f"{unknown}: unknown data file type{language}; " + (advice or (
            f"name the file with one of {', '.join(FORMATS)} at the end (plain text: .txt)"
            f"{', before its compression' if compression(unknown) else ''} (from Python: load_text_dataset's "
            "data_format)")))
    if len(formats) > 1:
        raise DataError(f"data files mix formats {sorted(formats)}; load each format separately")
    return formats.pop()


def _sample_by(files: list[Path], text_sample_by: str) -> str:
    """``text_sample_by`` with ``auto`` resolved: ``paragraph`` when a file has paragraphs, else ``line``."""
    if text_sample_by not in TEXT_SAMPLE_BY:
        raise ValueError(f"text_sample_by must be one of {', '.join(TEXT_SAMPLE_BY)}, got {text_sample_by!r}")
    if text_sample_by != "auto":
        return text_sample_by
    with_paragraphs = next((f for f in files if once(f, "paragraphs", functools.partial(has_paragraphs, f))), None)
    if with_paragraphs is None:
        return "line"
    every = (f" in each of the {len(files)} files (a file without empty lines is one document)" if len(files) > 1
             else "")
    print(f"{with_paragraphs}: empty lines separate its documents, so each row is a document of lines{every} "
          "(text_sample_by: auto; set line for one row per line)", flush=True)
    return "paragraph"


def validate_files(files: list[Path], fmt: str, columns: Sequence[str] = ()) -> None:
    """Every check that can fail before ``load_dataset`` writes to the cache."""
    for path in files:
        if path.stat().st_size == 0:
            raise EmptyDataFileError(f"{path}: the data file is empty")
        if fmt == "text" and is_wikiextractor(path):
            raise DataError(f"{path}: line 1 opens a <doc> block: {ONLY_TEXT}, not as lines of text")
        if compression(path) is not None:
            check_signature(path)
            continue
        if fmt != "parquet" and not once(path, "utf-8 text", functools.partial(check_utf8, path)):
            raise EmptyDataFileError(f"{path}: the data file holds only whitespace")
        found = columns_of(path, fmt)
        if fmt == "parquet" and _parquet_rows(path) == 0:
            raise EmptyDataFileError(f"{path}: the parquet file has no rows")
        missing = [c for c in columns if c not in found and c.split(".")[0] not in found]  # "translation.de"
        if missing and fmt == "csv" and (problem := header_problem(path, found, missing)):
            raise MalformedRowError(f"{path}: {problem}")
        if missing and fmt == "text":
            raise UnknownColumnError(f"{path}: {text_problem(path, missing[0])}", missing[0])  # evaluate's too
        if missing:
            where = "the header (line 1)" if fmt == "csv" else "line 1" if fmt == "json" else "the schema"
            raise UnknownColumnError(f"{path}: no column {missing[0]!r} in {where}; the file has columns {found}",
                                     missing[0])


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq
    return pq.read_metadata(path).num_rows


def column_kinds(columns: Columns) -> dict[str, str | None]:
    """``columns`` as name -> kind (``KINDS``; None for a bare name: a value of any type)."""
    kinds = dict((c, None) if isinstance(c, str) else c for c in columns)
    unknown = {name: kind for name, kind in kinds.items() if kind is not None and kind not in KINDS}
    if unknown:
        raise ValueError(f"columns: {unknown} names a kind that is not one of {', '.join(KINDS)}")
    return kinds


def _is_blank(value: object) -> bool:
    return value == [] or (isinstance(value, str) and not value.strip())


# kinds whose missing value (None, an empty or blank string) is no missing data but an unlabelled row, which the
# labels' check skips or refuses (train.data.labels, skip_unlabeled)
UNLABELLED_WHEN_MISSING = ("score", "label")


def is_bad(value: object, kind: str | None, records: bool) -> bool:
    """Whether a value of a column of ``kind`` is refused: missing (unless ``UNLABELLED_WHEN_MISSING``), of another
    type than the kind, or, in a file of records (``records``), an empty or blank string, or an empty list of text or
    words."""
    if value is None or (records and isinstance(value, str) and not value.strip()):
        return kind not in UNLABELLED_WHEN_MISSING
    if records and value == [] and kind in ("text", "words"):
        return True
    return kind is not None and not KINDS[kind][1](value)


def _first_bad(dataset: datasets.Dataset, column: str, kind: str | None, records: bool) -> tuple[int, object] | None:
    """``(row, value)`` of the first value of ``column`` that ``is_bad``, read through Arrow where the column has one
    type."""
    values, feature = dataset.data.column(column), dataset.features[column]
    refuse_missing = kind not in UNLABELLED_WHEN_MISSING
    if values.null_count and refuse_missing:
        return pc.index(pc.is_null(values), True).as_py(), None
    if isinstance(feature, (datasets.Value, datasets.ClassLabel)):  # Arrow gave the whole column one type
        strings = feature.dtype in ("string", "large_string")
        blank = strings and records and refuse_missing
        row = pc.index(pc.equal(pc.utf8_trim_whitespace(values), ""), True).as_py() if blank else -1
        if row < 0 and kind is not None and len(values) and not KINDS[kind][1](values[0].as_py()):
            row = 0  # then every row is of the wrong type
        return (row, values[row].as_py()) if row >= 0 else None
    return next(((row, v) for row, v in enumerate(dataset[column]) if is_bad(v, kind, records)), None)


def value_error(location: str, column: str, kind: str | None, value: object) -> DataError:
    """The error for a value ``is_bad`` refused, at ``location`` (``row_location``)."""
    if value is None or _is_blank(value):
        what = ("" if value is None else " (an empty list)" if value == [] else " (an empty string)" if value == ""
                else " (only whitespace)")
        return MissingColumnError(f"{location}: the row has no value for column {column!r}{what}; fill it in or "
                                  f"remove the row")
    if kind == "answers" and _answer_lists(value) and len(value["text"]) != len(value["answer_start"]):
        return DataError(f"{location}: the answers have {len(value['text'])} entries in 'text' but "
                         f"{len(value['answer_start'])} in 'answer_start' ({reprlib.repr(value)}): each answer text "
                         f"needs its start, so column {column!r} must hold two lists of the same length, as in SQuAD: "
                         f"{SQUAD_ANSWERS}")
    found_type = type(value).__name__
    hint = ("; for a sentence pair give each text its own column (text_column, text_pair_column)"
            if kind == "text" and isinstance(value, list) else
            "; a list or dict written as its text, as pandas' to_csv writes one: write the file as JSON Lines, "
            "df.to_json(path, orient='records', lines=True), or parquet, which keep them"
            if kind in ("words", "tags", "answers") and isinstance(value, str) and value.lstrip()[:1] in ("[", "{")
            else "")
    return DataError(f"{location}: the value is {'an' if found_type[0] in 'aeiou' else 'a'} {found_type} "
                     f"({reprlib.repr(value)}), but column {column!r} must hold {KINDS[kind][0]}{hint}")


Refuse = Callable[[int, str, object], DataError]  # (row as read, column, value) -> the error naming where it is


def _check_values(dataset: datasets.Dataset, kinds: dict[str, str | None], refuse: Refuse, records: bool) -> None:
    """Refuse the first row with a value that ``is_bad``: whatever the format, the same rows are refused."""
    for column, kind in kinds.items():
        found = _first_bad(dataset, column, kind, records)
        if found is not None:
            raise refuse(found[0], column, found[1])


def _check_rows(rows: dict[str, list], indices: list[int], kinds: dict[str, str | None], refuse: Refuse,
                records: bool) -> list[bool]:
    """``_check_values`` for one batch of a stream as it is read (``indices``: the rows' numbers)."""
    for column, kind in kinds.items():
        for index, value in zip(indices, rows.get(column, [None] * len(indices))):
            if is_bad(value, kind, records):
                raise refuse(index, column, value)
    return [True] * len(indices)


def _blanks_refused(records: bool, kinds: dict[str, str | None]) -> bool:
    """Whether the values of a file of records (``records``) are checked as such (``is_bad``): not a corpus's, one
    column of text (pretraining's, a tokenizer's), whose blank rows are blank lines, as a ``.txt`` file's and a Hub
    dataset's are (WikiText's empty rows)."""
    return records and list(kinds.values()) != ["text"]


def checked_values(dataset: AnyDataset, kinds: dict[str, str | None], refuse: Refuse, records: bool) -> AnyDataset:
    """``dataset`` with every value of ``kinds``' columns checked: at once in memory, as read in a stream."""
    if isinstance(dataset, datasets.Dataset):
        _check_values(dataset, kinds, refuse, records)
        return dataset
    return dataset.filter(_check_rows, batched=True, with_indices=True,
                          fn_kwargs={"kinds": kinds, "refuse": refuse, "records": records})


def _refuse_at(source: str | Path, kinds: dict[str, str | None], row: int, column: str, value: object) -> DataError:
    """The error for ``value`` at row ``row`` of ``source`` (``row_location``)."""
    return value_error(row_location(source, row, column), column, kinds[column], value)


def _refuse_in_files(files: list[Path], fmt: str, kwargs: dict, kinds: dict[str, str | None], records: bool,
                     row: int, column: str, value: object) -> DataError:
    """The error for the first refused value of ``column`` in ``files`` in order, read again (only once a value is
    refused) to name its file and line, whichever part of a stream met it (a lane of shards, a process)."""
    kind = kinds[column]
    for path in files:
        rows = datasets.load_dataset(fmt, data_files=[str(path)], split="train", streaming=True, **kwargs)
        for index, found in enumerate(value_of(r, column) for r in rows):
            if is_bad(found, kind, records):
                return value_error(row_location(path, index, column), column, kind, found)
    where = (row_location(files[0], row, column) if len(files) == 1
             else f"{len(files)} files starting with {files[0]}: row {row}, column {column!r}")
    return value_error(where, column, kind, value)  # a value the stream's reader reads otherwise (JSON array types)


def _refuse_in_saved(path: Path, saved: datasets.Dataset, kinds: dict[str, str | None], records: bool, row: int,
                     column: str, value: object) -> DataError:
    """The error for the first refused value of ``column`` in a saved dataset (memory-mapped, so found in place)."""
    found = _first_bad(saved, column, kinds[column], records) or (row, value)
    return value_error(row_location(path, found[0], column), column, kinds[column], found[1])


def saved_splits(source: str | Path) -> list[str]:
    """The splits of a folder ``DatasetDict.save_to_disk`` wrote, or of one whose files name them (`folder_splits`);
    none for any other source."""
    path = Path(source).expanduser() / "dataset_dict.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8")).get("splits", [])
    return list(folder_splits(source)) if isinstance(source, (str, Path)) else []


def _show_files(source: str | Path | Sequence[str | Path], files: list[Path]) -> None:
    """Print the files a folder or a pattern gave, in the order they are read."""
    items = [source] if isinstance(source, (str, Path)) else list(source)
    if any(Path(item).expanduser().is_dir() or _is_pattern(item) for item in items):
        names = [str(f) for f in files]
        shown = names if len(names) <= 20 else [*names[:10], f"... {len(names) - 15} more ...", *names[-5:]]
        print(f"{len(files)} data files, read in this order: {', '.join(shown)}", flush=True)


def _reader_kwargs(files: list[Path], fmt: str, kinds: dict[str, str | None], text_sample_by: str) -> dict:
    """What ``datasets.load_dataset`` is given to read ``files`` as Lineage reads them."""
    kwargs = {"sample_by": _sample_by(files, text_sample_by)} if fmt == "text" else {}
    if fmt == "csv":  # text as written ("007", "None"): only an empty field is no value
        kwargs.update(converters={c: str for c, kind in kinds.items() if kind == "text"}, keep_default_na=False,
                      na_values=[""])
        if suffix(files[0]) == ".tsv":
            kwargs.update(delimiter="\t", quoting=csv.QUOTE_NONE)  # TSV: a double quote is text (as GLUE's files)
    if fmt != "parquet" and any(has_bom(f) for f in files):
        kwargs["encoding"] = "utf-8-sig"  # the BOM is no part of the first column's name or the first line
    return kwargs


def load_text_dataset(source: str | Path | Sequence[str | Path], split: str = "train", *,
                      columns: Columns = ("text",), streaming: bool = False, data_format: str | None = None,
                      dataset_config: str | None = None, text_sample_by: str = "auto", cache_dir: str | None = None,
                      seed: int = 0, size: int | None = None, num_proc: int | None = None) -> AnyDataset:
    """Load one split of a local file set, a saved dataset, the embedded corpus or a Hub dataset.

    ``columns`` (names or ``(name, kind)`` pairs of ``KINDS``; ``()``: no check) must exist and are checked row by
    row. Local files form the one split returned (``split`` only names it); ``seed`` and ``size`` apply to the
    embedded corpus, ``text_sample_by`` to ``.txt`` files."""
    kinds = column_kinds(columns)
    if isinstance(source, str) and source.startswith(EMBEDDED_PREFIX):
        dataset = corpus.default_corpus(source[len(EMBEDDED_PREFIX):], split, seed, size)
        dataset = with_columns(dataset, list(kinds), source)
        return dataset.to_iterable_dataset() if streaming else dataset
    pair = pair_files(source, columns)
    if pair is not None:
        return load_pair(pair, split, kinds, streaming, cache_dir)
    if isinstance(source, (str, Path)) and is_saved(Path(source).expanduser()):
        return _load_saved(Path(source).expanduser(), split, kinds, streaming)
    if isinstance(source, (str, Path)) and not _is_local(str(source)):
        return _load_hub(str(source), split, kinds, streaming, dataset_config, cache_dir)
    files = _local_files(source, columns, say=True, split=split)
    if "words" in kinds.values() and not data_format and all(
            suffix(f) == ".tsv" or FORMATS.get(suffix(f), "text") == "text" and not is_wikiextractor(f) for f in files):
        from train.data.conll_files import load_conll  # which imports this module
        return load_conll(files, list(kinds), streaming, cache_dir)
    try:
        fmt = _file_format(files, data_format, list(kinds.values()) == ["text"])
    except DataError:
        if (refusal := side_named(files, kinds)) is None:
            raise
        raise DataError(refusal) from None
    from train.data.squad_files import load_data_files  # SQuAD's files (it imports this module)
    if fmt == "json" and (dataset := load_data_files(files, split, kinds, streaming, cache_dir)) is not None:
        return dataset
    if fmt != WIKIEXTRACTOR:
        validate_files(files, fmt, list(kinds))
    _show_files(source, files)
    processes = ({"num_proc": process_count(num_proc, len(files), str(source), "files")}
                 if num_proc and len(files) > 1 and not streaming else {})
    if fmt == WIKIEXTRACTOR:  # its own checks, before any document is read
        return with_columns(load_wikiextractor(files, kinds, streaming, cache_dir, **processes), list(kinds),
                            str(files[0]))
    kwargs = _reader_kwargs(files, fmt, kinds, text_sample_by)
    try:
        # named by the files' content: datasets keys its cache by path and mtime alone, so a kept mtime reused it
        dataset = datasets.load_dataset(fmt, f"content-{files_digest(files)}",
                                        data_files={split: [str(f) for f in files]}, split=split,
                                        streaming=streaming, cache_dir=cache_dir, **processes, **kwargs)
    except datasets.exceptions.DatasetGenerationError:
        find_bad_file(files, fmt)
        raise
    if streaming:
        _STREAMS.append((files, fmt))
    dataset = with_columns(dataset, list(kinds), str(files[0]))  # a compressed file's columns show only now
    if fmt == "csv":
        dataset = _csv_scores(dataset, [column for column, kind in kinds.items() if kind == "score"])
    if fmt == "text" and "encoding" in kwargs and any(compression(f) is not None for f in files):
        dataset = dataset.map(_without_bom, batched=True)  # datasets reads compressed text as UTF-8, whatever encoding
    records = _blanks_refused(fmt != "text", kinds)
    refuse = functools.partial(_refuse_in_files, files, fmt, kwargs, kinds, records)
    return checked_values(dataset, kinds, refuse, records)


def _local_files(source: str | Path | Sequence[str | Path], columns: Columns, say: bool = False,
                 split: str = "train") -> list[Path]:
    """The files named, or a folder's of the suffixes the task of `columns` reads (`resolve_files`: for word lists,
    CoNLL's too; in a folder of splits, `split`'s)."""
    kinds = column_kinds(columns)
    words = "words" in kinds.values()  # token classification: CoNLL, as its corpora ship
    try:
        return resolve_files(source, (*FORMATS, *CONLL_SUFFIXES) if words else tuple(FORMATS), say,
                             list(kinds.values()) == ["text"], split)
    except DataFileNotFoundError as error:
        raise DataFileNotFoundError(f"{error}{pair_hint(source, columns)}{_folder_hint(source, kinds)}") from None


def _folder_hint(source: str | Path | Sequence[str | Path], kinds: dict[str, str | None]) -> str:
    """How to read a folder's files that the task does not list there: for word lists a CoNLL file of another
    suffix (CoNLL-2003's eng.train), for a translation pair files of a language (train.en, train.de): name them."""
    folder = Path(source).expanduser() if isinstance(source, (str, Path)) else None
    other = sorted(p for p in folder.iterdir() if p.is_file() and not DOCUMENTATION.fullmatch(p.name)) if (
        folder is not None and folder.is_dir()) else []
    if "words" in kinds.values() and other:
        return f"; a CoNLL file of another suffix is read where it is named (a file per split): e.g. {other[0]}"
    unknown = next((p for p in sorted(folder.rglob("*")) if p.is_file() and not suffix(p)), None) if (
        folder is not None and folder.is_dir() and not any(map(listed_language, other))) else None
    if unknown is not None:  # WikiExtractor's text/AA/wiki_00, ...
        advice = first_line_advice(unknown)
        return f"; it holds files of no suffix, e.g. {unknown}{f': {advice}' if advice else ''}"
    languages: dict[str, set[str]] = {}  # prefix -> the languages of its files
    for path in filter(listed_language, other):
        languages.setdefault((path.stem if compression(path) else path.name).rpartition(".")[0], set()).add(
            suffix(path)[1:])
    if not languages or len(kinds) != 2 or set(kinds.values()) != {"text"}:
        return ""
    prefix = min(languages, key=lambda prefix: (not set(kinds) <= languages[prefix], prefix))  # of both columns
    return f"; a translation pair's two files of a language are named by their prefix: e.g. {folder / prefix}"


def data_files(source: str | Path | Sequence[str | Path], columns: Columns = ()) -> list[Path] | None:
    """The local files `load_text_dataset` reads for `source` and `columns` (what a checkpoint fingerprints): a
    translation pair's two, the files named or a folder's; None for no source, the embedded corpus, a saved dataset, a
    Hub name."""
    if not source or isinstance(source, str) and source.startswith(EMBEDDED_PREFIX):
        return None
    pair = pair_files(source, columns)
    if pair is not None:
        return list(pair)
    if isinstance(source, (str, Path)) and (is_saved(Path(source).expanduser()) or not _is_local(str(source))):
        return None
    return _local_files(source, columns)


def _csv_number(value: object) -> object:
    """A CSV field of scores as a finite number, None where blank; any other text (`NaN`, a word) as it is."""
    if not isinstance(value, str):
        return value
    if not value.strip():
        return None
    try:
        number = float(value)
    except ValueError:
        return value
    return number if math.isfinite(number) else value


def _csv_scores(dataset: AnyDataset, columns: list[str]) -> AnyDataset:
    """`dataset` with its score `columns` of CSV fields read as numbers where pandas read them as text for a field of
    whitespace (to pandas only an empty field is no value): such a field is a missing score, an unlabelled row. A
    column with a word in it stays text, for the labels' check to name the word."""
    if isinstance(dataset, datasets.IterableDataset):
        return dataset.map(lambda rows: {c: list(map(_csv_number, rows[c])) for c in columns},
                           batched=True) if columns else dataset
    for column in columns:
        if dataset.features[column] not in (datasets.Value("string"), datasets.Value("large_string")):
            continue
        values = list(map(_csv_number, dataset[column]))
        if not any(isinstance(value, str) for value in values):
            dataset = dataset.remove_columns(column).add_column(column, values).select_columns(dataset.column_names)
    return dataset


def _without_bom(rows: dict) -> dict:
    return {"text": [text.removeprefix("\ufeff") for text in rows["text"]]}


# the local files of the streams this process opened, newest last: a stream is read long after it is opened, and its
# reader's errors (a byte that is no UTF-8, a line that is no JSON, a row of extra fields) name no file
_STREAMS: list[tuple[list[Path], str]] = []


def stream_refusal(error: BaseException) -> DataError | None:
    """The `DataError` naming the file and line where a stream's reader failed with `error`, found by reading the
    streamed files again, newest first (only once one failed; then they are forgotten); None when `error` is no
    reader's or no bad line is found."""
    import pandas.errors
    import pyarrow

    if not isinstance(error, (UnicodeDecodeError, pyarrow.ArrowInvalid, pandas.errors.ParserError,
                              datasets.exceptions.DatasetGenerationError)):
        return None
    streams = _STREAMS[::-1]
    _STREAMS.clear()
    for files, fmt in streams:
        try:
            find_bad_file(files, fmt)
        except DataError as refusal:
            return refusal
    return None


def _load_saved(path: Path, split: str, kinds: dict[str, str | None], streaming: bool) -> AnyDataset:
    """A folder of ``save_to_disk`` (a ``DatasetDict``'s ``split``), memory-mapped; streamed through
    ``to_iterable_dataset`` with a shard per Arrow file."""
    saved = datasets.load_from_disk(str(path))
    if isinstance(saved, datasets.DatasetDict):
        if split not in saved:
            raise UnknownSplitError(f"{path}: the saved DatasetDict has no split {split!r}; its splits are "
                                    f"{', '.join(saved)}")
        saved = saved[split]
    if len(saved) == 0:
        raise EmptyDataFileError(f"{path}: the saved dataset has no rows")
    saved = with_columns(saved, list(kinds), str(path))
    records = _blanks_refused(True, kinds)
    refuse = functools.partial(_refuse_in_saved, path, saved, kinds, records)
    if not streaming:
        return checked_values(saved, kinds, refuse, records)
    stream = saved.to_iterable_dataset(num_shards=min(len(saved), max(1, len(saved.cache_files))))
    return checked_values(stream, kinds, refuse, records)


def _entry(value: object, key: str) -> object:
    return value.get(key) if isinstance(value, dict) else None


def value_of(row: dict, column: str) -> object:
    """``row``'s value of ``column``; a name ``outer.key`` the row lacks names the entry ``key`` of its dict ``outer``
    (the Hub's translation datasets hold a pair as ``{"translation": {"de": ..., "en": ...}}``)."""
    if column in row or "." not in column:
        return row.get(column)
    outer, key = column.split(".", 1)
    return _entry(row.get(outer), key)


def with_columns(dataset: AnyDataset, columns: Sequence[str], source: str) -> AnyDataset:
    """``dataset``, refused unless it has every one of ``columns``; a name ``outer.key`` that it lacks becomes a
    column of the entries ``key`` of its column ``outer`` (``value_of``; in memory, a view of the Arrow column),
    refused when the column's type holds no such entry."""
    found = dataset.column_names
    entries = {c: c.split(".", 1) for c in columns if found is not None and c not in found and "." in c
               and c.split(".", 1)[0] in found}
    for column, (outer, key) in entries.items():
        feature = dataset.features[outer] if dataset.features is not None else None
        keys = (feature.languages if isinstance(feature, datasets.Translation)
                else list(feature) if isinstance(feature, dict) else None)
        if keys is not None and key not in keys:
            raise UnknownColumnError(f"{source}: no column {column!r}; column {outer!r} holds the entries "
                                     f"{', '.join(f'{outer}.{k}' for k in keys)}")
        if keys is None and feature is not None and not isinstance(feature, datasets.Json):
            raise UnknownColumnError(f"{source}: no column {column!r}; column {outer!r} holds no named entries (its "
                                     f"type is {feature})")
    missing = [c for c in columns if found is not None and c not in found and c not in entries]
    if missing:
        raise UnknownColumnError(f"{source}: no column {missing[0]!r}; the dataset has columns {list(found)}",
                                 missing[0])
    structs = {c: parts for c, parts in entries.items() if isinstance(dataset, datasets.Dataset)
               and isinstance(dataset.features[parts[0]], (dict, datasets.Translation))}
    for column, (outer, key) in structs.items():
        dataset = dataset.add_column(column, pc.struct_field(dataset.data.column(outer), key))
    others = {c: parts for c, parts in entries.items() if c not in structs}  # JSON of mixed keys; a stream's rows
    if not others:
        return dataset
    memory = {"keep_in_memory": True} if isinstance(dataset, datasets.Dataset) else {}  # no file beside the user's
    return dataset.map(lambda rows: {column: [_entry(value, key) for value in rows[outer]]
                                     for column, (outer, key) in others.items()}, batched=True, **memory)


def _hub_error(name: str, split: str, dataset_config: str | None, err: BaseException, hint: str = "") -> DataError:
    return DataError(f"could not load {name!r} as a Hub dataset (config {dataset_config!r}, split {split!r}): {err}. "
                     f"A local path must exist{hint}; the Hub needs a network (HF_HUB_OFFLINE unset) or a cached copy")


def hub_splits(name: str, dataset_config: str | None) -> list[str] | None:
    """The splits of Hub dataset `name` (its metadata, or the cached copy's offline); None where neither says."""
    try:
        return datasets.get_dataset_split_names(name, dataset_config)
    except Exception:  # no network, no cached copy, a gated or missing repo: loading it says which
        return None


def _load_hub(name: str, split: str, kinds: dict[str, str | None], streaming: bool, dataset_config: str | None,
              cache_dir: str | None) -> AnyDataset:
    try:
        dataset = datasets.load_dataset(name, dataset_config, split=split, streaming=streaming, cache_dir=cache_dir)
    except ValueError as err:  # "Unknown split" in memory, "Bad split" streamed
        if "Unknown split" not in str(err) and "Bad split" not in str(err):
            raise _hub_error(name, split, dataset_config, err, pair_hint(name, list(kinds.items()))) from err
        raise UnknownSplitError(f"Hub dataset {name!r} (config {dataset_config!r}) has no split {split!r}: "
                                f"{str(err).rstrip('.')}") from None
    except (ConnectionError, OSError) as err:
        raise _hub_error(name, split, dataset_config, err, pair_hint(name, list(kinds.items()))) from err
    dataset = with_columns(dataset, list(kinds), f"Hub dataset {name!r}")
    # blank rows of a Hub dataset are its layout (wikitext's empty lines), not missing values
    return checked_values(dataset, kinds, functools.partial(_refuse_at, f"Hub dataset {name!r}", kinds), records=False)


__all__ = ["EMBEDDED_PREFIX", "TASKS", "TEXT_SAMPLE_BY", "check_local_source", "checked_values", "column_kinds",
           "data_files", "hub_splits", "is_bad", "load_text_dataset", "names_local_data", "pattern_files",
           "resolve_files", "saved_splits", "stream_refusal", "validate_files", "value_error", "value_of",
           "with_columns"]
