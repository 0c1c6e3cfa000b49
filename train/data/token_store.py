"""A pretraining corpus tokenized once, in parallel, into a compact store that every later run reuses.

`prepared_store(dataset, tokenizer, layout, ...)` returns the `TokenStore` of `dataset`'s column under `tokenizer`,
opened from `cache_folder()/prepared/<key>/` when a run prepared it before, else written there first (in parallel,
through a staging folder renamed into place). Layouts: `documents` (GPT: each document's tokens and the end-of-text
token, end to end; blocks are slices, `CausalBlocks`) and `sentences` (BERT: every sentence, paired by an index of
token ranges, `SentencePairs`). A store whose files do not match its record raises `DamagedStoreError` and is
prepared again.
The user's view and `lineage prepare`: docs/training.md, "Pretraining corpora: prepared once"; figures:
docs/performance.md.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import multiprocessing
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import datasets
import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerBase

from train.data.encoders import ended_documents, nsp_features, nsp_pair_index, tokenize_documents
from train.data.staging import exclusive, staged, staging_name, sweep_stale
from train.data.tokenization import MissingSpecialTokenError, cache_folder
from train.data.workers import process_count

STORE_VERSION = 2  # 2: a document of no tokens adds no end-of-text token
LAYOUTS = ("documents", "sentences")
ROWS_PER_BATCH = 1000


class DamagedStoreError(OSError):
    """A prepared store whose files do not match its record: the message names the file and both sizes."""


def record_checksum(info: dict) -> str:
    """A hash of a store's record without its `checksum` field."""
    body = json.dumps({k: v for k, v in info.items() if k != "checksum"}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def checked_record(folder: Path) -> dict:
    """The record (store.json) of the store in `folder`, read once; `DamagedStoreError` when it is unreadable, lacks
    file sizes or its checksum, or a file is missing or of another size than recorded."""
    try:
        info = json.loads((folder / "store.json").read_text())
    except FileNotFoundError:
        info, damage = None, "store.json is missing"
    except (OSError, ValueError) as err:
        info, damage = None, f"store.json cannot be read ({err})"
    else:
        damage = _damage(folder, info)
    if damage is not None:
        raise DamagedStoreError(f"the prepared corpus in {folder} is damaged or partial: {damage}")
    return info


def _damage(folder: Path, info) -> str | None:
    if not isinstance(info, dict) or not isinstance(info.get("files"), dict) or "checksum" not in info:
        return "store.json lists no file sizes or no checksum (an earlier release's store, or a damaged record)"
    if info["checksum"] != record_checksum(info):
        return f"store.json does not match its checksum {info['checksum']} (it was edited or damaged)"
    for name, size in info["files"].items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing (its record says {size:,} bytes)"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size:,} bytes, its record says {size:,}"
    return None


class TokenStore:
    """A prepared corpus: `tokens` (memory-mapped ids), `items` (each item's start, and the end), `documents` (each
    document's first sentence, `sentences` layout) and its record `info`; opening it checks its files."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.info = checked_record(self.folder)
        self.tokens = np.memmap(self.folder / "tokens.bin", dtype=self.info["dtype"], mode="r",
                                shape=(self.info["tokens"],))
        self.items = np.load(self.folder / "items.npy", mmap_mode="r")
        self.documents = (np.load(self.folder / "documents.npy", mmap_mode="r")
                          if self.info["layout"] == "sentences" else None)

    def __len__(self) -> int:
        return len(self.items) - 1

    def describe(self) -> str:
        info = self.info
        sentences = f", {info['sentences']:,} sentences" if info["layout"] == "sentences" else ""
        return f"{info['documents']:,} documents{sentences}, {info['tokens']:,} tokens ({info['dtype']})"


def token_dtype(tokenizer: PreTrainedTokenizerBase) -> str:
    """The narrowest unsigned type that holds every id of `tokenizer`."""
    return "uint16" if len(tokenizer) <= 2**16 else "uint32"


def tokenizer_digest(tokenizer: PreTrainedTokenizerBase) -> str:
    """A hash of everything that decides `tokenizer`'s ids: its whole definition (vocabulary, merges, normalizer,
    added tokens) and its special tokens."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    definition = backend.to_str() if backend is not None else json.dumps(tokenizer.get_vocab(), sort_keys=True)
    specials = json.dumps([type(tokenizer).__name__, tokenizer.all_special_ids, tokenizer.eos_token_id])
    return hashlib.sha256(f"{definition}\n{specials}".encode()).hexdigest()


def data_key(dataset, columns: list[str]) -> str | None:
    """What identifies `dataset`'s `columns` without reading them: its fingerprint when loaded from files or the Hub
    (a file's content fingerprint, `files.load_text_dataset`); None for data made in memory and for a stream."""
    if isinstance(dataset, datasets.Dataset) and dataset.cache_files:
        return hashlib.sha256(f"{dataset._fingerprint} {columns}".encode()).hexdigest()
    return None


def corpus_digest(dataset: datasets.Dataset, columns: list[str]) -> str:
    """A hash of `dataset`'s `columns`: `data_key`, else the texts themselves."""
    key = data_key(dataset, columns)
    if key is not None:
        return key
    digest = hashlib.sha256(repr(columns).encode())
    for batch in dataset.select_columns(columns).iter(batch_size=ROWS_PER_BATCH):
        digest.update(json.dumps(batch, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _sentence_column(dataset: datasets.Dataset, sentences_column: str | None) -> str | None:
    return sentences_column if sentences_column and sentences_column in dataset.column_names else None


def prepared_store(dataset: datasets.Dataset, tokenizer: PreTrainedTokenizerBase, layout: str, *,
                   column: str = "text", sentences_column: str | None = "sentences", num_proc: int | None = None,
                   source: str = "the corpus") -> TokenStore:
    """The store of `dataset` under `tokenizer`, prepared with `num_proc` processes (None: one per core) unless a run
    prepared it before; prints what it reused or how long preparing took."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if layout == "documents" and tokenizer.eos_token_id is None:
        raise MissingSpecialTokenError("causal-LM packing needs an end-of-text token (eos_token)")
    sentences = _sentence_column(dataset, sentences_column) if layout == "sentences" else None
    columns = [sentences or column]
    key = hashlib.sha256(" ".join([str(STORE_VERSION), layout, *columns, corpus_digest(dataset, columns),
                                   tokenizer_digest(tokenizer)]).encode()).hexdigest()[:24]
    folder = cache_folder(writing=True) / "prepared" / key
    with exclusive(folder):  # one process prepares it, on this machine or any sharing the cache
        if folder.is_dir():
            try:
                store = TokenStore(folder)
            except DamagedStoreError as err:
                print(f"{source}: {err}; preparing it again", flush=True)
            else:
                print(f"{source}: prepared corpus reused from {folder}: {store.describe()}", flush=True)
                return store
        processes = process_count(num_proc, len(dataset), source)
        began = time.perf_counter()
        with staged(folder, sweep="*") as staging:  # every store's stale staging: the cache is ours alone
            counts = _write_parts(dataset, tokenizer, layout, columns[0], sentences is not None, staging, processes)
            _join_parts(staging, layout, len(counts), token_dtype(tokenizer))
            info = {"version": STORE_VERSION, "layout": layout, "dtype": token_dtype(tokenizer), "source": source,
                    "column": columns[0], "rows": len(dataset), "processes": processes,
                    "tokens": sum(c["tokens"] for c in counts), "documents": sum(c["documents"] for c in counts),
                    "characters": sum(c["characters"] for c in counts),
                    "seconds": round(time.perf_counter() - began, 3)}
            if layout == "sentences":
                info["sentences"] = sum(c["items"] for c in counts)
            info["files"] = {p.name: p.stat().st_size for p in sorted(staging.iterdir())}
            info["checksum"] = record_checksum(info)
            (staging / "store.json").write_text(json.dumps(info, indent=1))
    store = TokenStore(folder)
    rate = info["characters"] / 1e6 / max(info["seconds"], 1e-9)
    print(f"{source}: prepared {store.describe()} in {info['seconds']:.1f} s with {processes} "
          f"process{'es' if processes > 1 else ''} "
          f"({rate:.2f} MB of text per second), kept in {folder} for the next run on the same data", flush=True)
    return store


def _write_parts(dataset, tokenizer, layout: str, column: str, has_sentences: bool, staging: Path,
                 processes: int) -> list[dict]:
    jobs = [(dataset, tokenizer, layout, column, has_sentences, staging, index, processes)
            for index in range(processes)]
    if processes == 1:
        return [_write_part(jobs[0])]
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    previous = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # each process tokenizes on one core; no warning at the fork
    try:
        with context.Pool(processes) as pool:
            return pool.map(_write_part, jobs)
    finally:
        if previous is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = previous


def _write_part(job) -> dict:
    """Tokenize one contiguous part of the rows into `part-<i>.tokens` (ids), `part-<i>.items.npy` (each item's
    length) and, for sentences, `part-<i>.documents.npy` (each document's sentence count)."""
    dataset, tokenizer, layout, column, has_sentences, staging, index, parts = job
    part = dataset.shard(parts, index, contiguous=True) if parts > 1 else dataset
    dtype, eos, encode = token_dtype(tokenizer), tokenizer.eos_token_id, _encoder(tokenizer)
    lengths, documents, characters = [], [], 0
    with open(staging / f"part-{index}.tokens", "wb") as out:
        for batch in part.select_columns([column]).iter(batch_size=ROWS_PER_BATCH):
            rows = batch[column]
            if layout == "documents":
                characters += sum(map(len, rows))
                ids = list(ended_documents(encode(rows), eos))
            else:
                tokenized, read = tokenize_documents(rows, encode, split=not has_sentences)
                characters += read
                ids = [sentence for doc in tokenized for sentence in doc]
                documents.extend(len(doc) for doc in tokenized if doc)
            lengths.extend(map(len, ids))
            np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype).tofile(out)
    np.save(staging / f"part-{index}.items.npy", np.asarray(lengths, dtype=np.int64))
    if layout == "sentences":
        np.save(staging / f"part-{index}.documents.npy", np.asarray(documents, dtype=np.int64))
    return {"tokens": int(sum(lengths)), "items": len(lengths), "characters": characters,
            "documents": len(documents) if layout == "sentences" else len(lengths)}


def _encoder(tokenizer: PreTrainedTokenizerBase) -> Callable[[list[str]], list[list[int]]]:
    """`texts -> ids` as `tokenizer(texts, add_special_tokens=False)` gives them: for a fast tokenizer straight from
    a copy of its backend without offsets or truncation (`encode_batch_fast`: the same ids, less work per text)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "encode_batch_fast"):
        return lambda texts: tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"] if texts else []
    backend = Tokenizer.from_str(backend.to_str())
    backend.no_truncation()
    backend.no_padding()
    return lambda texts: [e.ids for e in backend.encode_batch_fast(texts, add_special_tokens=False)]


def _join_parts(staging: Path, layout: str, parts: int, dtype: str) -> None:
    """The parts, in order, as the store's files; the part files are removed as they are joined."""
    with open(staging / "tokens.bin", "wb") as out:
        for index in range(parts):
            with open(staging / f"part-{index}.tokens", "rb") as part:
                shutil.copyfileobj(part, out, 16 << 20)
            (staging / f"part-{index}.tokens").unlink()
    names = ("items", "documents") if layout == "sentences" else ("items",)
    for name in names:
        counts = [np.load(staging / f"part-{index}.{name}.npy") for index in range(parts)]
        np.save(staging / f"{name}.npy", np.concatenate([[0], np.cumsum(np.concatenate(counts))]).astype(np.int64))
        for index in range(parts):
            (staging / f"part-{index}.{name}.npy").unlink()


# ----------------------------------------------------------------------------- causal-LM blocks

class CausalBlocks(torch.utils.data.Dataset):
    """The store's token stream (`documents` layout) cut into `block_size` blocks, the last partial block dropped;
    with `pack_documents`, `position_ids` exactly as `encoders.pack_documents` gives them."""

    def __init__(self, store: TokenStore, block_size: int, pack_documents: bool, drop_last: bool = True):
        self.store, self.block_size, self.pack_documents = store, block_size, pack_documents
        self.blocks = (len(store.tokens) // block_size if drop_last else -(-len(store.tokens) // block_size))

    def __len__(self) -> int:
        return self.blocks

    @property
    def row_lengths(self) -> set[int]:
        """The lengths of the rows, known without reading one: `block_size`, and a kept last partial block's."""
        if not self.blocks:
            return set()
        last = min(self.block_size, len(self.store.tokens) - (self.blocks - 1) * self.block_size)
        return {self.block_size, last} if self.blocks > 1 else {last}

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        if not 0 <= index < len(self):
            raise IndexError(f"block {index} of {len(self)}")
        begin = index * self.block_size
        ids = self.store.tokens[begin:begin + self.block_size]
        row = {"input_ids": ids.tolist()}
        if self.pack_documents:
            starts = self.store.items
            first, last = np.searchsorted(starts, [begin, begin + len(ids)])
            offsets = np.asarray(starts[first:last]) - begin
            restart = np.zeros(len(ids), dtype=np.int64)
            restart[offsets] = offsets
            row["position_ids"] = (np.arange(len(ids)) - np.maximum.accumulate(restart)).tolist()
        return row


# ----------------------------------------------------------------------------- BERT's sentence pairs

def _pair_index(path: Path) -> np.ndarray | None:
    """The pair index kept at `path` (memory-mapped), or None when there is none or it is damaged (truncated: it is
    then built again, with a line saying why)."""
    if not path.is_file():
        return None
    try:
        pairs = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as err:
        print(f"{path}: the pair index is damaged ({err}); building it again", flush=True)
        return None
    return pairs


class SentencePairs(torch.utils.data.Dataset):
    """BERT's sentence pairs of a `sentences` store, their index (`nsp_pair_index`) kept in the store once per pairing
    recipe. `next_sentence` false drops the label (MLM only)."""

    def __init__(self, store: TokenStore, tokenizer: PreTrainedTokenizerBase, max_length: int, *, seed: int,
                 short_seq_prob: float = 0.1, dupe_factor: int = 1, next_sentence: bool = True):
        if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
            raise MissingSpecialTokenError("next-sentence examples need a tokenizer with [CLS] and [SEP]")
        self.store, self.next_sentence = store, next_sentence
        self.cls_id, self.sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
        settings = f"{max_length} {short_seq_prob} {seed} {dupe_factor}"
        path = store.folder / f"pairs-{hashlib.sha256(settings.encode()).hexdigest()[:16]}.npy"
        with exclusive(path):  # one process builds it, on this machine or any sharing the cache
            sweep_stale(store.folder, "pairs-*")  # of a process killed while it built an index
            self.pairs = _pair_index(path)
            if self.pairs is None:
                staging = path.with_name(f"{staging_name(path.name)}index.npy")
                try:
                    nsp_pair_index(store.items, store.documents, max_length, short_seq_prob, seed, dupe_factor,
                                   staging)
                    os.replace(staging, path)
                finally:
                    staging.unlink(missing_ok=True)
                self.pairs = np.load(path, mmap_mode="r")

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> dict:
        a0, a1, b0, b1, is_random = self.pairs[index].tolist()
        tokens = self.store.tokens
        row = nsp_features(tokens[a0:a1].tolist(), tokens[b0:b1].tolist(), bool(is_random), self.cls_id, self.sep_id)
        if not self.next_sentence:
            del row["next_sentence_label"]
        return row


__all__ = ["LAYOUTS", "CausalBlocks", "DamagedStoreError", "SentencePairs", "TokenStore", "corpus_digest", "data_key",
           "prepared_store", "record_checksum", "checked_record", "token_dtype", "tokenizer_digest"]
