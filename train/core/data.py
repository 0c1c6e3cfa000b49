"""Loading data through `datasets` and tokenizing it for every Lineage task.

Sources ``load_text_dataset`` accepts (``source`` argument):

- a local file, a list of files or a folder of them: ``.txt`` / ``.text`` (one row per line, column
  ``text``; ``text_sample_by="paragraph"`` makes one row per blank-line-separated paragraph, the BERT
  pretraining layout of one sentence per line and a blank line between documents), ``.jsonl`` /
  ``.json`` (JSON Lines or a JSON array of objects), ``.csv`` / ``.tsv`` (header row) and ``.parquet``;
  compressed ``.gz`` / ``.bz2`` / ``.xz`` / ``.zst`` variants load too (without the UTF-8 pre-check);
- ``"embedded:<task>"``: the embedded corpus (``train.core.corpus``; tasks documents, translation,
  sentiment, nli, ner, qa), generated offline;
- anything else is a Hugging Face Hub dataset name (``"wikitext"``, ``"stanfordnlp/imdb"``), with an
  optional ``hub_config`` (``"wikitext-2-raw-v1"``). Only this reaches the network.

``columns`` names the columns the task needs; they are checked before anything is written to the
datasets cache. ``streaming=True`` returns an ``IterableDataset`` read lazily (corpora larger than
memory). Bad input raises a ``DataError`` (a ``ValueError``) or ``DataFileNotFoundError`` (a
``FileNotFoundError``) naming the file, the line or row, and the problem: missing or empty files,
missing columns, text that is not valid UTF-8, malformed JSON lines, CSV/TSV rows with more or fewer fields than the
header, rows without a value (``row_location``: the line as an editor counts it, the format and the column). A UTF-8
byte-order mark (Excel's "CSV UTF-8") is stripped.

Tokenization (``tokenize_dataset``) runs the batch encoders of ``train.core.examples`` through
``Dataset.map(batched=True)``: cached next to file-backed datasets (a second run with the same
tokenizer and arguments loads the cache), in ``num_proc`` processes when asked, lazily for streams.
``prepare_causal_lm_dataset`` packs documents into blocks; ``prepare_nsp_dataset`` builds BERT's
sentence pairs. Columns other than the model inputs are removed, so batches go straight to a collator.
"""

from __future__ import annotations

import codecs
import csv
import functools
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import datasets
from transformers import PreTrainedTokenizerBase

from train.core import corpus, examples
from train.core.tokenization import MissingSpecialTokenError

FORMATS = {".txt": "text", ".text": "text", ".jsonl": "json", ".json": "json", ".csv": "csv", ".tsv": "csv",
           ".parquet": "parquet"}
COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst")
EMBEDDED_PREFIX = "embedded:"
TASKS = ("causal_lm", "mlm", "classification", "seq2seq", "token_classification", "qa")
AnyDataset = datasets.Dataset | datasets.IterableDataset


class DataError(ValueError):
    """Bad data: the message names the file, the line or row, and the problem."""


class DataFileNotFoundError(FileNotFoundError):
    """A data file or folder that does not exist."""


class EmptyDataFileError(DataError):
    """A data file with no rows."""


class MissingColumnError(DataError):
    """A column the task needs is absent."""


class InvalidUTF8Error(DataError):
    """A text file that is not valid UTF-8."""


class MalformedRowError(DataError):
    """A row that cannot be parsed (e.g. a JSON line that is not a JSON object)."""


# ----------------------------------------------------------------------------- files

def _is_local(source: str) -> bool:
    path = Path(source).expanduser()
    return (path.exists() or source.startswith(("/", "./", "../", "~", "\\")) or _suffix(path) in FORMATS)


def _suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSIONS:
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def resolve_files(source: str | Path | Sequence[str | Path]) -> list[Path]:
    """The data files named by a path, a folder (its data files, sorted) or a list of paths."""
    items = [source] if isinstance(source, (str, Path)) else list(source)
    files: list[Path] = []
    for item in items:
        path = Path(item).expanduser()
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and _suffix(p) in FORMATS)
            if not found:
                raise DataFileNotFoundError(f"{path}: folder holds no data files ({', '.join(FORMATS)})")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise DataFileNotFoundError(f"{path}: no such data file")
    return files


def _file_format(files: list[Path], data_format: str | None) -> str:
    formats = {data_format or FORMATS.get(_suffix(f)) for f in files}
    if None in formats:
        unknown = next(f for f in files if FORMATS.get(_suffix(f)) is None)
        raise DataError(f"{unknown}: unknown data file type; use one of {', '.join(FORMATS)} or pass data_format")
    if len(formats) > 1:
        raise DataError(f"data files mix formats {sorted(formats)}; load each format separately")
    return formats.pop()


def check_utf8(path: Path, chunk_size: int = 1 << 20) -> bool:
    """Raise ``InvalidUTF8Error`` naming the line of the first invalid byte; return whether the file
    holds any non-whitespace text."""
    decoder, line, content = codecs.getincrementaldecoder("utf-8")(), 1, False
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            try:
                text = decoder.decode(chunk)
            except UnicodeDecodeError as err:
                at = min(err.start, len(chunk) - 1)  # the decoder may hold up to 3 bytes of the last chunk
                bad_line = line + chunk.count(b"\n", 0, at)
                raise InvalidUTF8Error(
                    f"{path}: line {bad_line}: not valid UTF-8 "
                    f"(byte 0x{chunk[at]:02x}: {err.reason}); re-encode the file as UTF-8") from None
            line += chunk.count(b"\n")
            content = content or bool(text.strip())
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise InvalidUTF8Error(f"{path}: line {line}: not valid UTF-8 (truncated character at the end)") from None
    return content


def _columns_of(path: Path, fmt: str) -> list[str]:
    """Column names read from the head of an uncompressed file, without loading it."""
    if fmt == "text":
        return ["text"]
    if fmt == "parquet":
        import pyarrow.parquet as pq
        return list(pq.read_schema(path).names)
    with open(path, encoding="utf-8-sig", newline="") as handle:  # -sig: a BOM (Excel's "CSV UTF-8") is no text
        if fmt == "csv":
            header = next(csv.reader(handle, **_csv_dialect(path)), [])
            if not next(handle, "").strip():
                raise EmptyDataFileError(f"{path}: has a header line but no rows")
            return header
        return _json_columns(path, handle)


def _json_columns(path: Path, handle) -> list[str]:
    for number, line in enumerate(handle, 1):
        if not line.strip():
            continue
        if line.lstrip().startswith("["):  # a JSON array, not JSON Lines
            handle.seek(0)
            rows = json.load(handle)
            if not rows:
                raise EmptyDataFileError(f"{path}: the JSON array is empty")
            return list(rows[0])
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise MalformedRowError(f"{path}: line {number}: not a JSON object ({err.msg})") from None
        if not isinstance(row, dict):
            raise MalformedRowError(f"{path}: line {number}: expected a JSON object, got {type(row).__name__}")
        return list(row)
    return []


def _find_bad_json_line(path: Path) -> None:
    with open(path, encoding="utf-8-sig") as handle:
        for number, line in enumerate(handle, 1):
            try:
                if line.strip() and not isinstance(json.loads(line), dict):
                    raise MalformedRowError(f"{path}: line {number}: expected a JSON object")
            except json.JSONDecodeError as err:
                raise MalformedRowError(f"{path}: line {number}: not valid JSON ({err.msg})") from None


def _csv_dialect(path: Path) -> dict:
    tsv = _suffix(path) == ".tsv"
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
    kind = "TSV" if _suffix(path) == ".tsv" else "CSV"
    records = _csv_records(path)
    _, header = next(records, (1, []))
    for line, fields in records:
        if fields and len(fields) != len(header):
            separator = "tabs" if kind == "TSV" else "commas"
            raise MalformedRowError(f"{path}: line {line}: {len(fields)} fields where the header (line 1) has "
                                    f"{len(header)} ({', '.join(header)}); {kind} rows are split by {separator}, so "
                                    f"one inside a value needs {'removing' if kind == 'TSV' else 'quotes'}")


def row_location(source: str | Path, row: int, column: str | None = None) -> str:
    """Where row `row` (0-based, as `datasets` counts) of a data file is, as the user's editor counts lines:
    "a.csv: line 3 (CSV, column 'label')"; a source that is no local CSV or JSON Lines file gets "row N"."""
    path = Path(source)
    fmt = FORMATS.get(_suffix(path)) if path.is_file() and Path(path).suffix.lower() not in COMPRESSIONS else None
    named = f", column {column!r}" if column else ""
    line = None
    if fmt == "csv":
        kind = "TSV" if _suffix(path) == ".tsv" else "CSV"
        records = _csv_records(path)
        next(records, None)  # the header
        line = next((start for index, (start, _) in enumerate(records) if index == row), None)
    elif fmt == "json":
        kind = "JSON Lines"
        with open(path, encoding="utf-8-sig") as handle:
            filled = (number for number, text in enumerate(handle, 1) if text.strip())
            line = next((number for index, number in enumerate(filled) if index == row), None)
            handle.seek(0)
            if handle.read(1) == "[":
                line, kind = None, "JSON"
    if line is None:
        return f"{source}: row {row}{named}"
    return f"{path}: line {line} ({kind}{named})"


def _has_bom(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(3) == codecs.BOM_UTF8


def validate_files(files: list[Path], fmt: str, columns: Sequence[str] = ()) -> None:
    """Every check that can fail before ``load_dataset`` writes to the cache."""
    for path in files:
        compressed = Path(path).suffix.lower() in COMPRESSIONS
        if path.stat().st_size == 0:
            raise EmptyDataFileError(f"{path}: the data file is empty")
        if compressed:
            continue
        if fmt != "parquet" and not check_utf8(path):
            raise EmptyDataFileError(f"{path}: the data file holds only whitespace")
        found = _columns_of(path, fmt)
        if fmt == "parquet" and _parquet_rows(path) == 0:
            raise EmptyDataFileError(f"{path}: the parquet file has no rows")
        missing = [c for c in columns if c not in found]
        if missing:
            where = "the header (line 1)" if fmt == "csv" else "line 1" if fmt == "json" else "the schema"
            raise MissingColumnError(f"{path}: no column {missing[0]!r} in {where}; the file has columns "
                                     f"{found}. Name the right one (e.g. text_column=...) or rename it")


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq
    return pq.read_metadata(path).num_rows


def _check_nulls(dataset: datasets.Dataset, columns: Sequence[str], files: list[Path]) -> None:
    """JSON Lines rows may omit a key that the first row had, CSV rows a field: name the first such row."""
    for column in columns:
        values = dataset.data.column(column)
        if values.null_count:
            row = next(i for i, v in enumerate(values.to_pylist()) if v is None)
            where = (row_location(files[0], row, column) if len(files) == 1
                     else f"{len(files)} files starting with {files[0]}: row {row}, column {column!r}")
            raise MissingColumnError(f"{where}: the row has no value for column {column!r}")


# ----------------------------------------------------------------------------- loading

def load_text_dataset(source: str | Path | Sequence[str | Path], split: str = "train", *,
                      columns: Sequence[str] = ("text",), streaming: bool = False, data_format: str | None = None,
                      hub_config: str | None = None, text_sample_by: str = "line", cache_dir: str | None = None,
                      seed: int = 0, size: int | None = None) -> AnyDataset:
    """Load one split of a local file set, the embedded corpus or a Hub dataset (module docstring).

    ``columns`` are required to exist (pass ``()`` to skip the check). For local files every file forms
    the one split returned (``split`` only names it); ``seed`` and ``size`` apply to the embedded corpus.
    """
    if isinstance(source, str) and source.startswith(EMBEDDED_PREFIX):
        dataset = corpus.default_corpus(source[len(EMBEDDED_PREFIX):], split, seed, size)
        _require_columns(dataset.column_names, columns, source)
        return dataset.to_iterable_dataset() if streaming else dataset
    if isinstance(source, (str, Path)) and not _is_local(str(source)):
        return _load_hub(str(source), split, columns, streaming, hub_config, cache_dir)
    files = resolve_files(source)
    fmt = _file_format(files, data_format)
    validate_files(files, fmt, columns)
    kwargs = {"sample_by": text_sample_by} if fmt == "text" else {}
    if fmt == "csv" and _suffix(files[0]) == ".tsv":
        kwargs.update(delimiter="\t", quoting=csv.QUOTE_NONE)  # TSV: a double quote is text (as GLUE's files)
    if fmt != "parquet" and any(_has_bom(f) for f in files if f.suffix.lower() not in COMPRESSIONS):
        kwargs["encoding"] = "utf-8-sig"  # the BOM is no part of the first column's name or the first line
    try:
        dataset = datasets.load_dataset(fmt, data_files={split: [str(f) for f in files]}, split=split,
                                        streaming=streaming, cache_dir=cache_dir, **kwargs)
    except datasets.exceptions.DatasetGenerationError:
        for path in files:
            if fmt == "json":
                _find_bad_json_line(path)
            elif fmt == "csv" and path.suffix.lower() not in COMPRESSIONS:
                _find_bad_csv_line(path)
        raise
    if not streaming:
        _check_nulls(dataset, columns, files)
    return dataset


def _require_columns(found: Sequence[str] | None, columns: Sequence[str], source: str) -> None:
    missing = [c for c in columns if found is not None and c not in found]
    if missing:
        raise MissingColumnError(f"{source}: no column {missing[0]!r}; the dataset has columns {list(found)}")


def _load_hub(name: str, split: str, columns: Sequence[str], streaming: bool, hub_config: str | None,
              cache_dir: str | None) -> AnyDataset:
    try:
        dataset = datasets.load_dataset(name, hub_config, split=split, streaming=streaming, cache_dir=cache_dir)
    except (ConnectionError, OSError, ValueError) as err:
        raise DataError(f"could not load {name!r} as a Hub dataset (config {hub_config!r}, split {split!r}): "
                        f"{err}. A local path must exist; the Hub needs a network (HF_HUB_OFFLINE unset) "
                        f"or a cached copy") from err
    _require_columns(dataset.column_names, columns, f"Hub dataset {name!r}")
    return dataset


# ----------------------------------------------------------------------------- tokenization

_ENCODERS = {"causal_lm": examples.encode_causal_lm, "mlm": examples.encode_classification,
             "classification": examples.encode_classification, "seq2seq": examples.encode_seq2seq,
             "token_classification": examples.encode_token_classification, "qa": examples.encode_qa}


def tokenize_dataset(dataset: AnyDataset, tokenizer: PreTrainedTokenizerBase, task: str, *,
                     num_proc: int | None = None, batch_size: int = 1000, load_from_cache_file: bool = True,
                     **encoder_kwargs) -> AnyDataset:
    """``dataset.map`` of the task's batch encoder (``train.core.examples.encode_*``), batched.

    ``encoder_kwargs`` go to the encoder: column names (``text_column``, ``text_pair_column``,
    ``label_column``, ``source_column``, ``target_column``, ``tokens_column``, ``tags_column``) and
    lengths (``max_length``, ``max_source_length``, ``max_target_length``, ``doc_stride``). Task
    ``mlm`` encodes single texts with the template and no labels (the collator masks them).
    """
    if task not in _ENCODERS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    if task == "mlm":
        encoder_kwargs = {"label_column": None, **encoder_kwargs}
    function = functools.partial(_ENCODERS[task], tokenizer=tokenizer, **encoder_kwargs)
    columns = dataset.column_names or list(next(iter(dataset)))  # a stream may not know its columns
    kwargs = {"batched": True, "batch_size": batch_size, "remove_columns": columns,
              "with_indices": task in ("qa", "token_classification")}
    if isinstance(dataset, datasets.Dataset):
        kwargs.update(num_proc=num_proc, load_from_cache_file=load_from_cache_file, desc=f"tokenizing ({task})")
    return dataset.map(_call_with_indices(function) if kwargs["with_indices"] else function, **kwargs)


def _call_with_indices(function):
    return functools.partial(_apply_with_indices, function=function)


def _apply_with_indices(rows: dict, indices: list[int], function) -> dict:
    return function(rows, indices=indices)


def prepare_causal_lm_dataset(dataset: AnyDataset, tokenizer: PreTrainedTokenizerBase, block_size: int, *,
                              text_column: str = "text", drop_last: bool = True, pack_documents: bool = False,
                              num_proc: int | None = None, batch_size: int = 1000,
                              cache_dir: str | None = None, source: str = "the corpus") -> AnyDataset:
    """Tokenize without templates and pack into ``block_size`` blocks joined by the end-of-text token
    (``tokenizer.eos_token``); column ``input_ids``, and with ``pack_documents`` ``position_ids`` restarting at
    each document (``examples.pack_documents``). Packing runs once over the whole stream, so no tail is lost
    between map batches; the packed Dataset is cached under ``cache_dir``. A corpus (``source`` names it in the error)
    shorter than one block is refused with both numbers."""
    if tokenizer.eos_token_id is None:
        raise MissingSpecialTokenError("causal-LM packing needs an end-of-text token (eos_token)")
    tokenized = tokenize_dataset(dataset, tokenizer, "causal_lm", text_column=text_column, num_proc=num_proc,
                                 batch_size=batch_size)
    gen_kwargs = {"tokenized": tokenized, "block_size": block_size, "separator_id": tokenizer.eos_token_id,
                  "drop_last": drop_last, "pack_documents": pack_documents}
    columns = ("input_ids", "position_ids") if pack_documents else ("input_ids",)
    features = datasets.Features({c: datasets.Sequence(datasets.Value("int32")) for c in columns})
    if isinstance(tokenized, datasets.IterableDataset):
        return datasets.IterableDataset.from_generator(_packed_blocks, features=features, gen_kwargs=gen_kwargs)
    if drop_last:
        tokens = sum(len(ids) + 1 for ids in tokenized["input_ids"])  # each document and its end-of-text token
        if tokens < block_size:
            raise DataError(f"{source}: the text yields {tokens} tokens (end-of-text tokens included), fewer than one "
                            f"block of {block_size} (max_seq_length): give more text or a smaller max_seq_length")
    fingerprint = datasets.fingerprint.Hasher.hash([tokenized._fingerprint, block_size,
                                                    tokenizer.eos_token_id, drop_last, pack_documents])
    return datasets.Dataset.from_generator(_packed_blocks, features=features, gen_kwargs=gen_kwargs,
                                           fingerprint=fingerprint, cache_dir=cache_dir)


def _packed_blocks(tokenized, block_size: int, separator_id: int, drop_last: bool, pack_documents: bool):
    rows = (row["input_ids"] for row in tokenized)
    if pack_documents:
        yield from examples.pack_documents(rows, block_size, separator_id, drop_last)
        return
    for block in examples.pack_sequences(rows, block_size, separator_id, drop_last):
        yield {"input_ids": block}


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """One sentence per line when the text has line breaks (BERT's layout), else split after . ! ?
    followed by a capital or digit."""
    parts = text.splitlines() if "\n" in text.strip() else _SENTENCE_END.split(text)
    return [p.strip() for p in parts if p.strip()]


def prepare_nsp_dataset(dataset: datasets.Dataset, tokenizer: PreTrainedTokenizerBase, max_length: int = 128, *,
                        sentences_column: str | None = "sentences", text_column: str = "text",
                        short_seq_prob: float = 0.1, seed: int = 0, dupe_factor: int = 1,
                        num_proc: int | None = None) -> datasets.Dataset:
    """BERT's sentence pairs (``input_ids``, ``token_type_ids``, ``next_sentence_label``) for MLM + NSP.

    Documents are rows: a list of sentences in ``sentences_column`` when the dataset has it, otherwise
    ``text_column`` split by ``split_sentences``. Holds all token ids in memory, as BERT's script did.
    """
    use_sentences = sentences_column is not None and sentences_column in dataset.column_names
    tokenized = dataset.map(_tokenize_sentences, batched=True, num_proc=num_proc,
                            fn_kwargs={"tokenizer": tokenizer, "column": sentences_column if use_sentences
                                       else text_column, "split": not use_sentences},
                            remove_columns=dataset.column_names, desc="tokenizing sentences")
    pairs = examples.create_nsp_examples(tokenized["sentence_ids"], tokenizer, max_length, short_seq_prob, seed,
                                         dupe_factor)
    return datasets.Dataset.from_list(pairs)


def _tokenize_sentences(rows: dict, tokenizer: PreTrainedTokenizerBase, column: str, split: bool) -> dict:
    documents = [split_sentences(t) for t in rows[column]] if split else rows[column]
    flat = [s for doc in documents for s in doc]
    # a sentence may be longer than the model: create_nsp_examples truncates each pair, so no length warning
    ids = tokenizer(flat, add_special_tokens=False, verbose=False)["input_ids"] if flat else []
    out, start = [], 0
    for doc in documents:
        out.append(ids[start:start + len(doc)])
        start += len(doc)
    return {"sentence_ids": out}


__all__ = ["FORMATS", "EMBEDDED_PREFIX", "TASKS", "DataError", "DataFileNotFoundError", "EmptyDataFileError",
           "MissingColumnError", "InvalidUTF8Error", "MalformedRowError", "resolve_files", "check_utf8",
           "validate_files", "load_text_dataset", "row_location", "tokenize_dataset", "prepare_causal_lm_dataset",
           "prepare_nsp_dataset", "split_sentences"]
