"""GLUE held as a folder, read as the Hub's `nyu-mll/glue` gives it: the Hub repository downloaded (`cola/train-00000-
of-00001.parquet`, read as it is) or GLUE's original distribution (`download_glue_data.py`'s `glue_data/`, the
`--data_dir` of BERT's `run_classifier.py`: `CoLA/train.tsv`, `MNLI/dev_matched.tsv`, ...), whose TSVs are read as
`nyu-mll/glue`'s own loading script read them (tabs, quoting off, `idx` the row's number, a row lacking a field left
out, labels by the Hub's class order) and written as its parquet files. docs/evaluation.md, "GLUE"."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import NamedTuple

from train.data.errors import DataError, DataFileNotFoundError
from train.data.folders import folder_splits


class TsvTask(NamedTuple):
    folder: str  # its folder in glue_data/
    files: dict[str, str]  # the Hub's split -> its file
    texts: dict[str, str]  # the Hub's text column -> the file's column
    label: str | None  # the file's label column; test files have none (the Hub's -1)
    classes: tuple[str, ...] | None  # the Hub's ClassLabel names in its order; None: a score (STS-B)
    headless: tuple[dict[str, int], int] | None = None  # texts and label by number in files of no header


def _splits(dev: str = "dev", test: str = "test") -> dict[str, str]:
    return {"train": "train.tsv", "validation": f"{dev}.tsv", "test": f"{test}.tsv"}


PAIR = {"sentence1": "sentence1", "sentence2": "sentence2"}
NLI = ("entailment", "neutral", "contradiction")
TSV_TASKS = {
    "cola": TsvTask("CoLA", _splits(), {"sentence": "sentence"}, None, ("unacceptable", "acceptable"),
                    ({"sentence": 3}, 1)),  # train.tsv and dev.tsv have no header, test.tsv has one
    "sst2": TsvTask("SST-2", _splits(), {"sentence": "sentence"}, "label", ("negative", "positive")),
    "mrpc": TsvTask("MRPC", _splits(), {"sentence1": "#1 String", "sentence2": "#2 String"}, "Quality",
                    ("not_equivalent", "equivalent")),
    "stsb": TsvTask("STS-B", _splits(), PAIR, "score", None),
    "qqp": TsvTask("QQP", _splits(), {"question1": "question1", "question2": "question2"}, "is_duplicate",
                   ("not_duplicate", "duplicate")),
    "mnli": TsvTask("MNLI", {"train": "train.tsv", "validation_matched": "dev_matched.tsv",
                             "validation_mismatched": "dev_mismatched.tsv", "test_matched": "test_matched.tsv",
                             "test_mismatched": "test_mismatched.tsv"},
                    {"premise": "sentence1", "hypothesis": "sentence2"}, "gold_label", NLI),
    "qnli": TsvTask("QNLI", _splits(), {"question": "question", "sentence": "sentence"}, "label",
                    ("entailment", "not_entailment")),
    "rte": TsvTask("RTE", _splits(), PAIR, "label", ("entailment", "not_entailment")),
    "wnli": TsvTask("WNLI", _splits(), PAIR, "label", ("not_entailment", "entailment")),
    "ax": TsvTask("diagnostic", {"test": "diagnostic.tsv"}, {"premise": "sentence1", "hypothesis": "sentence2"},
                  None, NLI),
}
EXPECTED = ("GLUE's original distribution, as download_glue_data.py writes glue_data/ (CoLA/train.tsv, dev.tsv, "
            "test.tsv; SST-2/, MRPC/, QQP/, STS-B/, MNLI/ with dev_matched.tsv and dev_mismatched.tsv, QNLI/, RTE/, "
            "WNLI/, diagnostic/), or the Hub's nyu-mll/glue as a folder, as `huggingface-cli download nyu-mll/glue "
            "--repo-type dataset --local-dir DIR` writes it (cola/train-00000-of-00001.parquet, mnli/validation_"
            "matched-00000-of-00001.parquet, ...)")


def layout(data_dir: Path) -> str:
    """`"tsv"` for GLUE's original distribution in `data_dir`, `"hub"` for the Hub repository's folders of parquet
    shards; a `DataError` naming both where it holds neither (or both)."""
    if not data_dir.is_dir():
        raise DataFileNotFoundError(f"--data_dir {data_dir}: no such folder; give a folder of {EXPECTED}")
    tsv = sorted(t.folder for t in TSV_TASKS.values() if any((data_dir / t.folder).glob("*.tsv")))
    hub = sorted(config for config in TSV_TASKS if any((data_dir / config).glob("*.parquet")))
    if bool(tsv) == bool(hub):
        held = f"both {', '.join(tsv)} and {', '.join(hub)}" if tsv else "neither"
        raise DataError(f"--data_dir {data_dir}: holds {held}; give a folder of {EXPECTED}")
    return "tsv" if tsv else "hub"


def missing(data_dir: Path, kind: str, config: str, splits: list[str]) -> str | None:
    """Why `config`'s `splits` cannot be read from `data_dir` of layout `kind` (its folder, or the splits it lacks,
    named), or None."""
    if kind == "hub":
        folder = data_dir / config
        if not folder.is_dir():
            return f"{folder}: no such folder (nyu-mll/glue's {config}/)"
        try:  # a folder of one split's shards is no folder of splits: its split is the shards' name
            have = set(folder_splits(folder)) or {shard.name.partition("-")[0] for shard in folder.glob("*.parquet")}
        except DataError as error:
            return str(error)
        lacking = [s for s in splits if s not in have]
        return (f"{folder} has no split {', '.join(lacking)} (no {lacking[0]}-00000-of-00001.parquet); it has "
                f"{', '.join(sorted(have)) or 'none'}") if lacking else None
    task = TSV_TASKS[config]
    folder = data_dir / task.folder
    if not folder.is_dir():
        return f"{folder}: no such folder (GLUE's {task.folder}/)"
    lacking = [f"{task.files[s]} (the split {s})" for s in splits if not (folder / task.files[s]).is_file()]
    return f"{folder} has no {', '.join(lacking)}" if lacking else None


def features(config: str):
    """The Hub's features of `config`: its text columns, `label` (a ClassLabel, or float32 for STS-B) and `idx`."""
    import datasets

    task = TSV_TASKS[config]
    label = datasets.ClassLabel(names=list(task.classes)) if task.classes else datasets.Value("float32")
    return datasets.Features({**{c: datasets.Value("string") for c in task.texts}, "label": label,
                              "idx": datasets.Value("int32")})


def _label(task: TsvTask, value: str | None, where: str) -> int | float | None:
    """A file's label as the Hub's: a class's number in its order (from its name, or a number as CoLA's files hold
    it), a score; None for an empty one (a row left out)."""
    if not value:
        return None
    if task.classes is None:
        try:
            return float(value)
        except ValueError:
            raise DataError(f"{where}: label {value!r} is no score") from None
    if value in task.classes:
        return task.classes.index(value)
    if value.isdigit() and int(value) < len(task.classes):
        return int(value)
    raise DataError(f"{where}: label {value!r} is none of {', '.join(task.classes)} (nor their numbers "
                    f"0-{len(task.classes) - 1})")


def read_split(data_dir: Path, config: str, split: str) -> tuple[dict[str, list], int]:
    """`config`'s `split` from its TSV as the Hub's columns, and how many rows lacked a field (left out, as the Hub's
    loading script left them out)."""
    task = TSV_TASKS[config]
    path = data_dir / task.folder / task.files[split]
    headless = task.headless is not None and not split.startswith("test")
    texts_at, label_at = task.headless if headless else (task.texts, task.label)
    columns: dict[str, list] = {c: [] for c in (*task.texts, "label", "idx")}
    left_out = 0
    with path.open(encoding="utf-8-sig", newline="") as file:  # MRPC's files open with a byte-order mark
        reader = csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = None if headless else next(reader, [])
        if header is not None and not set(texts_at.values()) <= set(header):
            raise DataError(f"{path}: its header holds {', '.join(header) or 'nothing'}, not GLUE's "
                            f"{', '.join(map(str, texts_at.values()))}: is it {task.folder}'s {task.files[split]}?")
        labelled = label_at is not None and (header is None or label_at in header)
        for number, fields in enumerate(reader):
            row = dict(enumerate(fields)) if header is None else dict(zip(header, fields))
            texts = {c: row.get(k) for c, k in texts_at.items()}
            label = _label(task, row.get(label_at), f"{path}, row {number + 1 + (header is not None)}") if (
                labelled) else -1
            if label is None or None in texts.values():
                left_out += 1
                continue
            for column, text in texts.items():
                columns[column].append(text)
            columns["label"].append(label)
            columns["idx"].append(number)
    return columns, left_out


def write_split(data_dir: Path, config: str, split: str, folder: Path) -> Path:
    """`config`'s `split` read from its TSV in `data_dir`, written into `folder` as the Hub's parquet shard."""
    import datasets

    if (why := missing(data_dir, "tsv", config, [split])) is not None:
        raise DataFileNotFoundError(why)
    columns, left_out = read_split(data_dir, config, split)
    folder.mkdir(parents=True, exist_ok=True)
    shard = folder / f"{split}-00000-of-00001.parquet"
    datasets.Dataset.from_dict(columns, features=features(config)).to_parquet(shard)
    source = data_dir / TSV_TASKS[config].folder / TSV_TASKS[config].files[split]
    dropped = (f"; {left_out} {'row' if left_out == 1 else 'rows'} lacking a field left out, as nyu-mll/glue leaves "
               f"them out") if left_out else ""
    print(f"glue: {source} read as nyu-mll/glue {config} {split} ({len(columns['idx'])} rows{dropped}) into "
          f"{shard}", flush=True)
    return shard


__all__ = ["EXPECTED", "TSV_TASKS", "features", "layout", "missing", "read_split", "write_split"]
