"""What a data folder holds: its data files apart from its documentation (`listed`), whether `save_to_disk` wrote
it (`is_saved`), and the splits its files' names say, as datasets' `load_dataset(folder)` reads them
(`folder_splits`). docs/training.md, "Data"."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

from train.data.errors import DataError
from train.data.file_bytes import FORMATS, suffix

# a folder's files that its documentation names (README.txt, LICENSE.txt beside CoNLL-2003's or a corpus's files)
DOCUMENTATION = re.compile(r"(readme|licen[cs]e|copying|changelog|citation)([._-].*)?", re.IGNORECASE)


def listed(folder: Path, suffixes: Sequence[str], also: Callable[[Path], bool] | None = None
           ) -> tuple[list[Path], list[Path]]:
    """`(data, documentation)`: a folder's files of `suffixes` (and those `also` takes), sorted, apart from those its
    `DOCUMENTATION` names."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and (suffix(p) in suffixes or (also and also(p))))
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


def folder_splits(folder: str | Path, suffixes: Sequence[str] = tuple(FORMATS)) -> dict[str, list[Path]]:
    """{split: its files} of a folder whose data files name their splits as datasets reads them (`SPLIT_WORDS`):
    files of two splits or more (train.csv, dev.csv), or, where the folder holds none, the files in its `data`
    folder (a Hub repository's data/train-00000-of-00001.parquet) or in folders named by a split (train/,
    validation/); {} for a folder of another layout, whose files are one split. A file that names no split, or two,
    beside files of splits is refused, naming it."""
    folder = Path(folder).expanduser()
    if not folder.is_dir() or is_saved(folder):
        return {}
    files = listed(folder, suffixes)[0]
    if files:
        named = {f: _named_splits(f.name) for f in files}
        if len(set().union(*named.values())) < 2:
            return {}
    else:
        inner = folder / "data"
        folders = [d for d in sorted(folder.iterdir()) if d.is_dir() and _named_splits(d.name)]
        if inner.is_dir() and not folders:
            named = {f: _named_splits(f.name) for f in listed(inner, suffixes)[0]}
        else:
            named = {f: _named_splits(d.name) for d in folders for f in listed(d, suffixes)[0]}
    odd = next((f for f, splits in named.items() if len(splits) != 1), None)
    if odd is not None:
        said = ", ".join(f"{f.relative_to(folder)}: {next(iter(s))}" for f, s in named.items() if len(s) == 1)
        names = " and ".join(sorted(named[odd])) or "none"
        raise DataError(f"{folder}: its files name their splits, as datasets reads a folder ({said}), but "
                        f"{odd.relative_to(folder)} names {names}: give each file a name of one split (train, "
                        f"validation or dev, test), or move it out")
    splits: dict[str, list[Path]] = {}
    for file, split in named.items():
        splits.setdefault(next(iter(split)), []).append(file)
    return splits


__all__ = ["DOCUMENTATION", "SPLIT_WORDS", "folder_splits", "is_saved", "listed"]
