"""A translation pair as two plain-text files of a sentence per line (fairseq's, Moses', sacreBLEU's train.en and
train.de), named by their shared prefix (`pair_files`), each plain or compressed: what names them, the hints for a
path that would have named one or for one side named alone, the files of a language a folder lists (`LANGUAGES`), and
their rows read side by side, in memory or in lockstep as one stream (`load_pair`, called by
`files.load_text_dataset`, which imports this module). docs/training.md, "Data".
"""

from __future__ import annotations

import functools
import glob
import itertools
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import datasets

from train.data.errors import DataError, DataFileNotFoundError
from train.data.file_bytes import COMPRESSIONS, FORMATS, compression, suffix, text_lines

if TYPE_CHECKING:
    from train.data.files import AnyDataset, Columns


def pair_columns(source_column: str | None = None, target_column: str | None = None) -> tuple[tuple[str, str], ...]:
    """A translation pair's columns, checked as text: `source_column` and `target_column` (None: source, target)."""
    return (source_column or "source", "text"), (target_column or "target", "text")


PAIR_LINES = "line i of each holds a sentence and its translation"  # a translation pair's two files


def _pair_names(source: str | Path | Sequence, columns: Columns) -> list[str] | None:
    """The two text columns of a pair whose files `source`, a path that names nothing, could be the prefix of."""
    from train.data.files import column_kinds  # which imports this module
    if not isinstance(source, (str, Path)) or Path(source).expanduser().exists():
        return None
    kinds = column_kinds(columns)
    return list(kinds) if len(kinds) == 2 and set(kinds.values()) == {"text"} else None


def _language_file(prefix: str, column: str) -> Path | None:
    """`<prefix>.<column>`, or the same compressed (`.gz`, ...), where one is a file; two are refused, naming both."""
    plain = Path(f"{prefix}.{column}").expanduser()
    found = [p for p in (plain, *(Path(f"{plain}{s}") for s in COMPRESSIONS)) if p.is_file()]
    if len(found) > 1:
        raise DataError(f"{found[0]} and {found[1]} are both files: a translation pair named {prefix} reads one file "
                        f"of its column {column!r}, plain or compressed; remove or rename one")
    return found[0] if found else None


def pair_files(source: str | Path | Sequence, columns: Columns) -> tuple[Path, Path] | None:
    """`(<source>.<source column>, <source>.<target column>)`, each plain or compressed: a translation pair as two
    plain-text files of a sentence per line (fairseq's, Moses', sacreBLEU's), read where `source` names no file or
    folder and `columns` are a pair's (two text columns). One of the two without the other is refused, naming it."""
    names = _pair_names(source, columns)
    found = [_language_file(str(source), name) for name in names] if names else [None, None]
    if None not in found:
        return found[0], found[1]
    if found == [None, None]:
        return None
    missing = names[found.index(None)]
    raise DataFileNotFoundError(f"{source}.{missing}: no such data file, but {next(f for f in found if f)} is: a "
                                f"translation pair named {source} is read from {source}.{names[0]} and "
                                f"{source}.{names[1]} (plain or compressed, .gz), {PAIR_LINES}; give both")


def pair_hint(source: str | Path | Sequence, columns: Columns) -> str:
    """What a `source` that names nothing would have been read as with the files of a translation pair; for one text
    column, the `<source>.<language>` files to name instead."""
    from train.data.files import column_kinds  # which imports this module
    names = _pair_names(source, columns)
    if names:
        return (f"; a translation pair named so is read from {source}.{names[0]} and {source}.{names[1]} "
                f"({PAIR_LINES}), which do not exist either")
    kinds = column_kinds(columns)
    if not isinstance(source, (str, Path)) or list(kinds.values()) != ["text"] or Path(source).expanduser().exists():
        return ""
    prefix = Path(source).expanduser()
    found = sorted(p for p in prefix.parent.glob(f"{glob.escape(prefix.name)}.*")
                   if is_language(p) and (p.stem if compression(p) else p.name).rpartition(".")[0] == prefix.name)
    named = next((p for p in found if suffix(p) == f".{next(iter(kinds))}"), found[0] if found else None)
    one = len(found) == 1
    return (f"; {' and '.join(map(str, found))} {'is a text file' if one else 'are text files'} of a language, named "
            f"as a translation pair's sides are: name {'it' if one else 'one'} as the data, e.g. {named}, to read its "
            f"lines as the column 'text'" if found else "")


# ISO 639-1's codes: the suffixes of a folder's files of a language (a file named alone may have any two letters)
LANGUAGES = frozenset("""
aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de dv dz ee el en eo
es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id ie ig ii ik io is it iu ja jv ka kg
ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na nb nd ne ng nl nn
no nr nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so sq sr ss st su sv sw ta
te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu
""".split())


def is_language(path: Path) -> bool:
    """Whether `path` is a file named `<prefix>.<language>` (train.en, plain or compressed), a text of a line per
    sentence as translation corpora ship."""
    return path.is_file() and re.fullmatch(r"\.[a-z]{2}", suffix(path)) is not None


def listed_language(path: Path) -> bool:
    """Whether a folder lists `path` as a file of a language: its suffix one of `LANGUAGES`."""
    return is_language(path) and suffix(path)[1:] in LANGUAGES


def side_named(files: list[Path], kinds: dict[str, str | None]) -> str | None:
    """For a task that reads a translation pair, the refusal of one side's file named as the data (test.en), naming
    the prefix that names the pair, with its languages as the columns."""
    side = next((f for f in files if FORMATS.get(suffix(f)) is None and is_language(f)), None)
    if side is None or len(kinds) != 2 or set(kinds.values()) != {"text"}:
        return None
    prefix = side.parent / (side.stem if compression(side) else side.name).rpartition(".")[0]
    others = sorted(p for p in side.parent.glob(f"{glob.escape(prefix.name)}.*") if is_language(p) and p != side
                    and (p.stem if compression(p) else p.name).rpartition(".")[0] == prefix.name)
    languages = [suffix(side)[1:], *(suffix(p)[1:] for p in others[:1])]
    return (f"{side}: one side of a translation pair, named alone; a pair's two files ({PAIR_LINES}) are named by "
            f"their prefix: give {prefix}, with source_column and target_column naming their languages "
            f"({' and '.join(languages)}{', ...' if len(languages) < 2 else ''})")


UNEVEN = "the two files of a translation pair must have the same number of lines, as " + PAIR_LINES


def load_pair(files: tuple[Path, Path], split: str, kinds: dict[str, str | None], streaming: bool,
               cache_dir: str | None) -> AnyDataset:
    """A translation pair's two files (`pair_files`) as `kinds`' columns: in memory each read by datasets' `text`
    reader and set side by side (Arrow, nothing copied); streamed, read line by line in lockstep as one shard."""
    from train.data.files import checked_values, load_text_dataset, validate_files  # which imports this module
    names = list(kinds)
    validate_files(list(files), "text")
    refuse = functools.partial(_refuse_in_pair, files, names, kinds)
    if streaming:
        stream = datasets.IterableDataset.from_generator(
            _pair_rows, features=datasets.Features({name: datasets.Value("string") for name in names}),
            gen_kwargs={"pairs": [(files, names)]})  # a list of one: one shard
        return checked_values(stream, kinds, refuse, records=True)
    sides = [load_text_dataset(path, split, columns=(), data_format="text", text_sample_by="line",
                               cache_dir=cache_dir).rename_column("text", name) for path, name in zip(files, names)]
    if len(sides[0]) != len(sides[1]):
        raise DataError(f"{files[0]} has {len(sides[0])} lines and {files[1]} has {len(sides[1])}: {UNEVEN}")
    return checked_values(datasets.concatenate_datasets(sides, axis=1), kinds, refuse, records=True)


def _pair_rows(pairs: list[tuple[tuple[Path, Path], list[str]]]) -> Iterator[dict[str, str]]:
    """The rows of each pair of files, `((source file, target file), [source column, target column])`, their lines
    read in lockstep; a file that ends before the other is refused there."""
    for files, names in pairs:
        for number, texts in enumerate(itertools.zip_longest(*map(text_lines, files)), 1):
            if None in texts:
                short = texts.index(None)
                raise DataError(f"{files[short]} ends at line {number - 1}, but {files[1 - short]} goes on at line "
                                f"{number}: {UNEVEN}")
            yield dict(zip(names, texts))


def _refuse_in_pair(files: tuple[Path, Path], names: list[str], kinds: dict[str, str | None], row: int, column: str,
                    value: object) -> DataError:
    """The error for ``value`` at row ``row`` of a translation pair: its line in the file of its column."""
    from train.data.files import value_error  # which imports this module
    side = names.index(column)
    location = f"{files[side]}: line {row + 1} (column {column!r}, paired with line {row + 1} of {files[1 - side]})"
    return value_error(location, column, kinds[column], value)


__all__ = ["LANGUAGES", "PAIR_LINES", "UNEVEN", "is_language", "listed_language", "load_pair", "pair_columns",
           "pair_files", "pair_hint", "side_named"]
