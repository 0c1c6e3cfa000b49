"""What a data folder holds: its data files (of a known suffix, or WikiExtractor's `wiki_00` of none, known by its
first line) apart from its documentation, its own or at any depth (`listed`), whether `save_to_disk` wrote it
(`is_saved`), and the splits its files' names say, as datasets' `load_dataset(folder)` reads them (`folder_splits`).
docs/training.md, "Data"."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

from train.data.errors import DataError
from train.data.file_bytes import FORMATS, suffix
from train.data.wikiextractor import is_wikiextractor

# a folder's files that its documentation names (README.txt, LICENSE.txt beside CoNLL-2003's or a corpus's files)
DOCUMENTATION = re.compile(r"(readme|licen[cs]e|copying|changelog|citation)([._-].*)?", re.IGNORECASE)


def listed(folder: Path, suffixes: Sequence[str], also: Callable[[Path], bool] | None = None, deep: bool = False
           ) -> tuple[list[Path], list[Path]]:
    """`(data, documentation)`: a folder's files of `suffixes` (and those `also` takes, and WikiExtractor's of no
    suffix), in sorted path order, apart from those its `DOCUMENTATION` names; `deep`: its subfolders' too, at any
    depth, but those in a hidden folder (`.cache/`, where `huggingface-cli download` keeps its records)."""
    paths = folder.rglob("*") if deep else folder.iterdir()
    files = sorted(p for p in paths if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(folder).parts[:-1]) and (
        suffix(p) in suffixes or (also and also(p)) or (not suffix(p) and is_wikiextractor(p))))
    return ([p for p in files if not DOCUMENTATION.fullmatch(p.name)],
            [p for p in files if DOCUMENTATION.fullmatch(p.name)])


def is_saved(path: Path) -> bool:
    """Whether ``path`` is a folder written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``."""
    return (path / "state.json").is_file() or (path / "dataset_dict.json").is_file()


# the splits datasets reads from a folder, and the words of a file's or folder's name that say one
# (datasets.data_files.SPLIT_KEYWORDS: dev.csv is validation, eval.csv test), between `-._ 0-9` or the name's ends
SPLIT_WORDS = {"train": ("training", "train"), "validation": ("validation", "valid", "dev", "val"),
               "test": ("testing", "test", "evaluation", "eval")}
_SPLIT_WORD = re.compile(r"(?:^|[-._ 0-9])(" + "|".join(w for ws in SPLIT_WORDS.values() for w in ws)
                         + r")(?=[-._ 0-9]|$)")


# the Hub's shards, named by a split of any name: validation_matched-00000-of-00001.parquet
_SHARD = re.compile(r"(?P<split>\w+)-\d{5}-of-\d{5}(\..*)?")


def _named_splits(name: str) -> set[str]:
    """The splits a file's or folder's name says: a Hub shard's its own (any name, as datasets reads one), else those
    of `SPLIT_WORDS` in it."""
    if shard := _SHARD.fullmatch(name):
        return {shard["split"]}
    return {split for word in _SPLIT_WORD.findall(name) for split, words in SPLIT_WORDS.items() if word in words}


def _split_of(relative: Path) -> tuple[Path, set[str]]:
    """The splits the first part of a file's path that names any names (`_named_splits`), and the folder above it."""
    for index, part in enumerate(relative.parts):
        if splits := _named_splits(part):
            return Path(*relative.parts[:index]), splits
    return Path(), set()


def folder_splits(folder: str | Path, suffixes: Sequence[str] = tuple(FORMATS),
                  also: Callable[[Path], bool] | None = None) -> dict[str, list[Path]]:
    """{split: its files} of a folder whose data files name two splits or more as datasets reads them (`SPLIT_WORDS`):
    its own files (train.csv, dev.csv) and those in its folders named by a split (train/, validation/, at any depth;
    The Pile's train/ beside val.jsonl.zst), or, where it has neither, its subfolders' at any depth by their paths (a
    Hub repository's data/train-00000-of-00001.parquet); {} for a folder of another layout, whose files are one
    split. Refused, naming them: a file that names no split, or two, beside files of splits, and subfolders that each
    hold splits (a repository of WikiText's configurations)."""
    folder = Path(folder).expanduser()
    if not folder.is_dir() or is_saved(folder):
        return {}
    return folder_files(folder, suffixes, also)[0]


def folder_files(folder: Path, suffixes: Sequence[str], also: Callable[[Path], bool] | None = None,
                 splits: bool = True) -> tuple[dict[str, list[Path]], list[Path], list[Path]]:
    """`(splits, data, documentation)` of a folder walked once: `folder_splits`' (where `splits`), else `listed`'s,
    its own or, where it holds none, its subfolders' at any depth (FineWeb's data/CC-MAIN-*/)."""
    own = listed(folder, suffixes, also)
    named = {d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith(".") and _named_splits(d.name)}
    deep = listed(folder, suffixes, also, deep=True) if not own[0] or (splits and named) else None
    under = [f for f in deep[0] if f.relative_to(folder).parts[0] in named] if splits and named else []
    found = _named_files(folder, own[0] + under or deep[0]) if splits else {}
    return (found, [], []) if found else ({}, *(own if own[0] else deep))


def _named_files(folder: Path, files: list[Path]) -> dict[str, list[Path]]:
    """{split: its files} of `files` in `folder` where they name two splits or more (`folder_splits`), else {}."""
    named = {f: _split_of(f.relative_to(folder)) for f in files}
    if len(set().union(*(splits for _, splits in named.values()))) < 2:
        return {}
    odd = next((f for f, (_, splits) in named.items() if len(splits) != 1), None)
    if odd is not None:
        said = ", ".join(f"{f.relative_to(folder)}: {next(iter(s))}" for f, (_, s) in named.items() if len(s) == 1)
        names = " and ".join(sorted(named[odd][1])) or "none"
        raise DataError(f"{folder}: its files name their splits, as datasets reads a folder ({said}), but "
                        f"{odd.relative_to(folder)} names {names}: give each file a name of one split (train, "
                        f"validation or dev, test), or move it out")
    holders = {above for above, _ in named.values()}
    if len(holders) > 1:  # named by the folders under `folder` that hold them (cola, sst2 of glue/cola/data/...)
        tops = {above.parts[0] for above in holders}
        names = sorted(map(str, tops if len(tops) == len(holders) else holders))
        raise DataError(f"{folder}: its folders {', '.join(names)} each hold files named by their splits (as "
                        f"datasets reads a folder): read as one, their splits would train and evaluate together; "
                        f"name one of them, e.g. {folder / names[0]}")
    splits: dict[str, list[Path]] = {}
    for file, (_, split) in named.items():
        splits.setdefault(next(iter(split)), []).append(file)
    return splits


__all__ = ["DOCUMENTATION", "SPLIT_WORDS", "folder_files", "folder_splits", "is_saved", "listed"]
