"""Tables in data files, read as datasets reads them: a CSV's dialect and records, JSON Lines or a JSON array (a
whole table in one JSON object, as pandas writes it, refused naming the call that writes rows), the columns of a
file's head (why a CSV's first line or a text file names none: `header_problem`, `text_problem`), the first line
datasets could not read, and the line an editor shows a row on (`row_location`)."""

from __future__ import annotations

import csv
import json
import re
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from train.data.errors import EmptyDataFileError, MalformedRowError
from train.data.file_bytes import FORMATS, check_utf8, compression, suffix, text_lines


def columns_of(path: Path, fmt: str) -> list[str]:
    """Column names read from the head of an uncompressed file, without loading it."""
    if fmt == "text":
        return ["text"]
    if fmt == "parquet":
        import pyarrow.parquet as pq
        return list(pq.read_schema(path).names)
    with open(path, encoding="utf-8-sig", newline="") as handle:  # -sig: a BOM (Excel's "CSV UTF-8") is no text
        if fmt == "csv":
            header = next(csv.reader(handle, **_csv_dialect(path)), [])
            twice = next((name for i, name in enumerate(header) if name in header[:i]), None)
            if twice is not None:
                first, second = [i + 1 for i, name in enumerate(header) if name == twice][:2]
                raise MalformedRowError(f"{path}: line 1 (the header): column {twice!r} appears twice (fields {first} "
                                        f"and {second}); give every column its own name")
            if not next(handle, "").strip():
                raise EmptyDataFileError(f"{path}: has a header line but no rows")
            return header
        return _json_columns(path, handle)


# separators a CSV may have been written with, and their names in messages
_SEPARATORS = {";": "semicolons", "\t": "tabs", ",": "commas", "|": "vertical bars"}


def _is_number(field: str) -> bool:
    try:
        float(field)
    except ValueError:
        return False
    return field.strip() != "" and field.strip().lower() not in ("nan", "inf", "-inf", "infinity")


def header_problem(path: Path, header: list[str], missing: list[str]) -> str | None:
    """Why the first line of a CSV or TSV file, which lacks the columns `missing` that the task reads, names no
    columns: one field that another separator divides (Excel's semicolons, where a comma is the decimal separator; a
    TSV named .csv), or a row of data (a number among its fields: GLUE's CoLA files have no header), with the header
    line to add; None where it reads as a header."""
    ours = "tabs" if suffix(path) == ".tsv" else "commas"
    if len(header) == 1:
        for separator, name in _SEPARATORS.items():
            parts = header[0].split(separator)
            if name != ours and len(parts) > 1 and all(p.strip() for p in parts):
                way = ("name the file .tsv" if separator == "\t" else "name the file .csv" if separator == "," else
                       "write it with commas (pandas: df.to_csv(path, index=False); a spreadsheet: CSV, comma "
                       "delimited)")
                return (f"line 1 (the header) is one field, {header[0]!r}: a {suffix(path)} file is split at {ours}, "
                        f"and {name} divide it into {', '.join(map(repr, parts))}; {way}")
    number = next(((i, f) for i, f in enumerate(header, 1) if _is_number(f)), None)
    if number is None:
        return None
    line = ("\t" if ours == "tabs" else ",").join(header)
    names = ("\\t" if ours == "tabs" else ",").join(_guessed_header(header, number[0] - 1, missing))  # for printf
    named = path.with_name(f"{path.stem}-named{path.suffix}")
    return (f"line 1, {line[:60]!r}{'...' * (len(line) > 60)}, was read as the header naming the columns, but it "
            f"reads as a row of data: its field {number[0]}, {number[1]!r}, is a number (GLUE's CoLA files, for one, "
            f"have no header); add a first line naming its {len(header)} columns, split at {ours} as the rows are, "
            f"{', '.join(map(repr, missing))} among them (the columns read here; a column flag or recipe key names "
            f"others), e.g. (printf '{names}\\n'; cat {shlex.quote(str(path))}) > {shlex.quote(str(named))}")


def _guessed_header(fields: list[str], number: int, missing: list[str]) -> list[str]:
    """Names for a first line of data `fields`: of two `missing` names or more, the last over its number (at
    `number`: a label), the others over its longest other fields (texts), in order; one name (a task of one text
    column) over its longest field other than the number; `column<i>` over the rest."""
    names = [f"column{i}" for i in range(1, len(fields) + 1)]
    texts = missing[:-1] if len(missing) > 1 else missing
    if len(missing) > 1:
        names[number] = missing[-1]
    at = sorted(sorted((i for i in range(len(fields)) if i != number), key=lambda i: -len(fields[i]))[:len(texts)])
    for i, name in zip(at, texts):
        names[i] = name
    return names


def text_problem(path: Path, column: str) -> str:
    """Why a plain-text file has no `column`: its rows are its lines, the one column `text`; where they hold tabs (a
    table, as ManyThings' Tatoeba pairs `deu.txt`), how it reads as one."""
    first = next((line for line in text_lines(path) if line.strip()), "")
    table = (f"; its lines hold tabs, as a table's (line 1: {first[:60]!r}): name the file .tsv, with a first line "
             f"naming its columns, split at tabs" if "\t" in first else "")
    return (f"no column {column!r}: a {suffix(path)} file is read as text, its lines (or paragraphs) the one column "
            f"'text'{table}")


def _json_columns(path: Path, handle: IO[str]) -> list[str]:
    if _is_json_array(handle):
        try:
            rows = json.load(handle)
        except json.JSONDecodeError as err:
            raise MalformedRowError(f"{path}: line {err.lineno}: not valid JSON ({err.msg})") from None
        if not rows:
            raise EmptyDataFileError(f"{path}: the JSON array is empty")
        if not isinstance(rows[0], dict):
            raise MalformedRowError(f"{path}: the JSON array holds a {type(rows[0]).__name__}, not objects")
        return list(rows[0])
    for number, line in enumerate(handle, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            whole = _whole_object(handle) if line.lstrip().startswith("{") else None  # written with indent=
            if whole is not None and _pandas_orient(whole) is not None:
                raise _pandas_table(path, number, _pandas_orient(whole)) from None
            raise MalformedRowError(f"{path}: line {number}: not a JSON object ({err.msg})") from None
        if not isinstance(row, dict):
            raise MalformedRowError(f"{path}: line {number}: expected a JSON object, got {type(row).__name__}")
        orient = _pandas_orient(row)
        if orient is not None and not any(rest.strip() for rest in handle):
            raise _pandas_table(path, number, orient)
        return list(row)
    return []


def _whole_object(handle: IO[str]) -> dict | None:
    """The file read whole as one JSON object; None where it is none."""
    handle.seek(0)
    try:
        whole = json.load(handle)
    except json.JSONDecodeError:
        return None
    return whole if isinstance(whole, dict) else None


def _pandas_table(path: Path, line: int, orient: str) -> MalformedRowError:
    shape, written = PANDAS_ORIENTS[orient]
    return MalformedRowError(f"{path}: line {line}: one JSON object holds the whole table, {shape}, as pandas' "
                             f"{written} writes it; Lineage reads a row per JSON object: write the file with "
                             f"df.to_json(path, orient='records', lines=True) (JSON Lines), or orient='records' (a "
                             f"JSON array)")


# the layouts of a whole table in one JSON object that pandas' DataFrame.to_json writes: (the shape, the call)
PANDAS_ORIENTS = {"columns": ("each column an object of row labels to values",
                              "df.to_json(path) (orient='columns', its default)"),
                  "index": ("each row an object of its values under its row label", "df.to_json(path, orient='index')"),
                  "split": ("its column names, row labels and rows of values in lists under 'columns', 'index' and "
                            "'data'", "df.to_json(path, orient='split')"),
                  "table": ("a Table Schema under 'schema' and the rows under 'data'",
                            "df.to_json(path, orient='table')")}


def _is_split(row: dict) -> bool:  # {"columns": [names], "index": [labels] (optional), "data": [[values], ...]}
    columns, data, index = row.get("columns"), row.get("data"), row.get("index", row.get("data"))
    return (row.keys() - {"index"} == {"columns", "data"} and isinstance(columns, list) and isinstance(data, list)
            and isinstance(index, list) and len(index) == len(data)
            and all(isinstance(values, list) and len(values) == len(columns) for values in data))


def _is_table(row: dict) -> bool:  # {"schema": {"fields": [...], ...}, "data": [{row}, ...]}
    schema, data = row.get("schema"), row.get("data")
    return (row.keys() == {"schema", "data"} and isinstance(schema, dict) and isinstance(schema.get("fields"), list)
            and isinstance(data, list) and all(isinstance(values, dict) for values in data))


def _pandas_orient(row: dict) -> str | None:
    """The `PANDAS_ORIENTS` layout `row`, a file's first JSON object, has (None: a row): `split`, `table`, or every
    value an object of the same keys, with the row labels of a DataFrame's default index (integers) inside (`columns`)
    or outside (`index`)."""
    if _is_split(row):
        return "split"
    if _is_table(row):
        return "table"
    inner = list(row.values())
    if not inner or any(not isinstance(v, dict) or not v or v.keys() != inner[0].keys() for v in inner):
        return None
    labels = {"columns": inner[0], "index": row}
    return next((orient for orient, keys in labels.items() if all(k.lstrip("-").isdigit() for k in keys)), None)


def _is_json_array(handle: IO[str]) -> bool:
    """Whether the JSON file starts with ``[`` (a JSON array, not JSON Lines); the handle is rewound."""
    first = next((line for line in handle if line.strip()), "")
    handle.seek(0)
    return first.lstrip().startswith("[")


def _find_bad_json_line(path: Path) -> None:
    with open(path, encoding="utf-8-sig") as handle:
        for number, line in enumerate(handle, 1):
            try:
                if line.strip() and not isinstance(json.loads(line), dict):
                    raise MalformedRowError(f"{path}: line {number}: expected a JSON object")
            except json.JSONDecodeError as err:
                raise MalformedRowError(f"{path}: line {number}: not valid JSON ({err.msg})") from None


def _csv_dialect(path: Path) -> dict:
    tsv = suffix(path) == ".tsv"
    return {"delimiter": "\t" if tsv else ",", "quoting": csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL}


def _csv_records(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(the line an editor shows the record starting on, its fields) of every record, the header first; a quoted
    value may span lines."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, **_csv_dialect(path))
        start = 1
        for fields in reader:
            yield start, fields
            start = reader.line_num + 1


def _find_bad_csv_line(path: Path) -> None:
    """The first row whose number of fields differs from the header's (a stray tab or comma)."""
    kind = "TSV" if suffix(path) == ".tsv" else "CSV"
    records = _csv_records(path)
    _, header = next(records, (1, []))
    for line, fields in records:
        if fields and len(fields) != len(header):
            separator = "tabs" if kind == "TSV" else "commas"
            raise MalformedRowError(f"{path}: line {line}: {len(fields)} fields where the header (line 1) has "
                                    f"{len(header)} ({', '.join(header)}); {kind} rows are split by {separator}, so "
                                    f"one inside a value needs {'removing' if kind == 'TSV' else 'quotes'}")


_BETWEEN_OBJECTS = re.compile(r"[\s,]*")


def _json_array_line(text: str, row: int) -> int | None:
    """The line on which object `row` of the JSON array `text` starts."""
    decoder, at = json.JSONDecoder(), text.index("[") + 1
    try:
        for _ in range(row):
            at = decoder.raw_decode(text, _BETWEEN_OBJECTS.match(text, at).end())[1]
    except json.JSONDecodeError:
        return None
    at = _BETWEEN_OBJECTS.match(text, at).end()
    return text.count("\n", 0, at) + 1 if at < len(text) and text[at] != "]" else None


class FileRows(str):
    """The name messages give a part of a data file (`a.csv (train[:20])`, rows held out to evaluate on, or `a.csv`, the
    rows left to train on), knowing the file's row of each of its rows (`row_of`), so that `row_location` names the
    file's line, not the part's row."""

    def __new__(cls, name: str, file: str, row_of: Callable[[int], int]) -> FileRows:
        text = super().__new__(cls, name)
        text.file, text.row_of = file, row_of
        return text

    def __getnewargs__(self) -> tuple:  # pickled (datasets' workers, fingerprints) with what it knows
        return str(self), self.file, self.row_of


def row_location(source: str | Path, row: int, column: str | None = None) -> str:
    """Where row `row` (0-based) of a data file is, as the user's editor counts lines: "a.csv: line 3 (CSV, column
    'label')"; a source that is no local uncompressed CSV or JSON file gets "row N". Of a `FileRows`, the file's row."""
    if isinstance(source, FileRows):
        return row_location(source.file, source.row_of(row), column)
    path = Path(source)
    from train.data import conll_files  # which imports files, and so this module
    if path.resolve() in conll_files.READ:
        return conll_files.location(path, row, column)
    from train.data.squad_files import question_location
    if path.is_file() and FORMATS.get(suffix(path)) == "json" and (where := question_location(path, row, column)):
        return where
    fmt = FORMATS.get(suffix(path)) if path.is_file() and compression(path) is None else None
    named = f", column {column!r}" if column else ""
    line = None
    if fmt == "csv":
        kind = "TSV" if suffix(path) == ".tsv" else "CSV"
        records = _csv_records(path)
        next(records, None)  # the header
        line = next((start for index, (start, _) in enumerate(records) if index == row), None)
    elif fmt == "json":
        with open(path, encoding="utf-8-sig") as handle:
            if _is_json_array(handle):
                kind, line = "JSON array", _json_array_line(handle.read(), row)
            else:
                kind = "JSON Lines"
                filled = (number for number, text in enumerate(handle, 1) if text.strip())
                line = next((number for index, number in enumerate(filled) if index == row), None)
    if line is None:
        return f"{source}: row {row}{named}"
    return f"{path}: line {line} ({kind}{named})"


def find_bad_file(files: list[Path], fmt: str) -> None:
    """Raise the ``DataError`` naming the file and line that ``datasets`` could not read, where one is found."""
    for path in files:
        if compression(path) is not None:
            check_utf8(path)  # a truncated or corrupt file, or text that is no UTF-8
        elif fmt == "json":
            _find_bad_json_line(path)
        elif fmt == "csv":
            _find_bad_csv_line(path)


__all__ = ["FileRows", "columns_of", "find_bad_file", "header_problem", "row_location", "text_problem"]
