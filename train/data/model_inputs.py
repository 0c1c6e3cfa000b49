"""Tokenizing loaded data for a task: `Dataset.map` over the batch encoders of `train.data.encoders`.

`tokenize_dataset(dataset, tokenizer, task)` runs the task's encoder batched, cached next to file-backed datasets (a
second run with the same tokenizer and arguments loads the cache), in `num_proc` processes when asked, lazily for
streams; columns other than the model inputs are removed, so batches go straight to a collator.
`prepare_causal_lm_dataset` packs documents into causal-LM blocks and `prepare_nsp_dataset` builds BERT's sentence
pairs, from a prepared store (`train.data.token_store`) or, for a stream, a thousand documents at a time;
`check_documents` counts documents and sentences and refuses data that gives no pair; `count_cut_questions` says how
many questions question answering cuts to `max_query_length` tokens. How a pretraining corpus is prepared:
docs/training.md, "Pretraining corpora: prepared once".
"""

from __future__ import annotations

import functools
import json
import zlib

import datasets
from transformers import PreTrainedTokenizerBase

from train.data import encoders, token_store
from train.data.encoders import split_sentences, tokenize_documents
from train.data.errors import DataError
from train.data.files import TASKS, AnyDataset
from train.data.tokenization import MissingSpecialTokenError
from train.data.workers import process_count

_ENCODERS = {"causal_lm": encoders.encode_causal_lm, "mlm": encoders.encode_classification,
             "classification": encoders.encode_classification, "seq2seq": encoders.encode_seq2seq,
             "token_classification": encoders.encode_token_classification, "qa": encoders.encode_qa}


def tokenize_dataset(dataset: AnyDataset, tokenizer: PreTrainedTokenizerBase, task: str, *,
                     num_proc: int | None = None, batch_size: int = 1000, load_from_cache_file: bool = True,
                     name: str | None = None, **encoder_kwargs) -> AnyDataset:
    """``dataset.map`` of the task's batch encoder (``train.data.encoders.encode_*``), given ``encoder_kwargs``. Task
    ``mlm`` encodes single texts with the template and no labels (the collator masks them). ``name``: the task the
    progress bar names, where a run's task has an encoder of another name (``regression``'s is ``classification``)."""
    if task not in _ENCODERS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    if task == "mlm":
        encoder_kwargs = {"label_column": None, **encoder_kwargs}
    function = functools.partial(_ENCODERS[task], tokenizer=tokenizer, **encoder_kwargs)
    kwargs = {"batched": True, "batch_size": batch_size, "remove_columns": input_columns(dataset),
              "with_indices": task in ("qa", "token_classification")}
    if isinstance(dataset, datasets.Dataset):
        what = f"tokenizing ({name or task})"
        processes = None if num_proc is None else process_count(num_proc, len(dataset), what)
        kwargs.update(num_proc=processes, load_from_cache_file=load_from_cache_file, desc=what)
    return dataset.map(_call_with_indices(function) if kwargs["with_indices"] else function, **kwargs)


def count_cut_questions(dataset: AnyDataset, tokenizer: PreTrainedTokenizerBase, max_query_length: int,
                        source: str) -> int | None:
    """How many questions of `dataset` question answering's encoder cuts to their first `max_query_length` tokens
    (`encoders.cut_questions`), said once where it cuts any; None for a stream, which nothing counts ahead."""
    if isinstance(dataset, datasets.IterableDataset):
        return None
    cut = sum(encoders.questions_cut(batch["question"], tokenizer, max_query_length)
              for batch in dataset.select_columns(["question"]).iter(batch_size=token_store.ROWS_PER_BATCH))
    if cut:
        print(f"{source}: cut {cut} of {len(dataset)} questions to their first {max_query_length} tokens "
              f"(max_query_length)", flush=True)
    return cut


def input_columns(dataset: AnyDataset) -> list[str]:
    """The columns a ``map`` that builds new rows removes: the dataset's own, or a stream's first row's keys."""
    if dataset.column_names is not None:
        return list(dataset.column_names)
    return list(next(iter(dataset), {}))


def _call_with_indices(function):
    return functools.partial(_apply_with_indices, function=function)


def _apply_with_indices(rows: dict, indices: list[int], function) -> dict:
    return function(rows, indices=indices)


def prepare_causal_lm_dataset(dataset: AnyDataset, tokenizer: PreTrainedTokenizerBase, block_size: int, *,
                              text_column: str = "text", drop_last: bool = True, pack_documents: bool = False,
                              num_proc: int | None = None, source: str = "the corpus"):
    """Documents tokenized without templates and packed into ``block_size`` blocks joined by the end-of-text token
    (``tokenizer.eos_token``): rows of ``input_ids``, and with ``pack_documents`` ``position_ids`` restarting at each
    document. A ``Dataset`` shorter than a block is refused; a stream is packed ``token_store.ROWS_PER_BATCH``
    documents at a time, the tail of each group that fills no block dropped (as transformers' ``run_clm.py``)."""
    if tokenizer.eos_token_id is None:
        raise MissingSpecialTokenError("causal-LM packing needs an end-of-text token (eos_token)")
    if isinstance(dataset, datasets.IterableDataset):
        return dataset.map(_packed_blocks, batched=True, batch_size=token_store.ROWS_PER_BATCH,
                           remove_columns=input_columns(dataset), fn_kwargs={
                               "tokenizer": tokenizer, "column": text_column, "block_size": block_size,
                               "drop_last": drop_last, "pack_documents": pack_documents})
    store = token_store.prepared_store(dataset, tokenizer, "documents", column=text_column, num_proc=num_proc,
                                    source=source)
    if drop_last and store.info["tokens"] < block_size:
        raise DataError(f"{source}: the text yields {store.info['tokens']} tokens (end-of-text tokens included), fewer "
                        f"than one block of {block_size} (max_seq_length): give more text or a smaller max_seq_length")
    return token_store.CausalBlocks(store, block_size, pack_documents, drop_last=drop_last)


def _packed_blocks(rows: dict, tokenizer: PreTrainedTokenizerBase, column: str, block_size: int, drop_last: bool,
                   pack_documents: bool) -> dict[str, list]:
    """One group of a stream's documents as packed blocks (``prepare_causal_lm_dataset``)."""
    ids = encoders.encode_causal_lm(rows, tokenizer, column)["input_ids"]
    if pack_documents:
        blocks = list(encoders.pack_documents(ids, block_size, tokenizer.eos_token_id, drop_last))
        return {"input_ids": [b["input_ids"] for b in blocks], "position_ids": [b["position_ids"] for b in blocks]}
    return {"input_ids": list(encoders.pack_sequences(ids, block_size, tokenizer.eos_token_id, drop_last))}


def check_documents(dataset: AnyDataset, source: str, sentences_column: str | None = "sentences",
                    text_column: str = "text") -> None:
    """Refuse ``source`` when it gives no sentence pair (rows read as ``prepare_nsp_dataset`` reads them): fewer than
    two documents, or no document of two sentences. Rows are read only until both are found; a stream is checked on
    its first ``token_store.ROWS_PER_BATCH`` rows."""
    use_sentences = sentences_column is not None and sentences_column in input_columns(dataset)
    rows = dataset.take(token_store.ROWS_PER_BATCH) if isinstance(dataset, datasets.IterableDataset) else dataset
    documents = sentences = 0
    paired = False
    for batch in rows.iter(batch_size=token_store.ROWS_PER_BATCH):
        for doc in (batch[sentences_column] if use_sentences else map(split_sentences, batch[text_column])):
            count = sum(1 for s in doc if s.strip())
            documents, sentences, paired = documents + (count > 0), sentences + count, paired or count >= 2
            if paired and documents >= 2:
                return
    read = "in its first rows" if isinstance(dataset, datasets.IterableDataset) else ""
    counts = f"{source}: {documents} documents, {sentences} sentences{read and ' ' + read}"
    problem = "fewer than two documents" if documents < 2 else "no document has two sentences"
    raise DataError(f"{counts}: {problem}, so there is no sentence pair to train on. BERT's layout is one sentence "
                    f"per line and a blank line between documents (a .txt file with text_sample_by auto or "
                    f"paragraph), or a {sentences_column!r} column holding each document's sentences; a folder of a "
                    f"file per document, a sentence per line (BookCorpus' books), is a document per file with "
                    f"text_sample_by document")


def prepare_nsp_dataset(dataset: AnyDataset, tokenizer: PreTrainedTokenizerBase, max_length: int = 128, *,
                        sentences_column: str | None = "sentences", text_column: str = "text",
                        short_seq_prob: float = 0.1, seed: int = 0, dupe_factor: int = 1, next_sentence: bool = True,
                        num_proc: int | None = None, source: str = "the corpus"):
    """BERT's sentence pairs (``input_ids``, ``token_type_ids`` and, with ``next_sentence``, ``next_sentence_label``)
    for MLM + NSP (``encoders.nsp_pair_index``). Documents are rows: a list of sentences in ``sentences_column`` when
    the dataset has it, otherwise ``text_column`` split by ``split_sentences``. A stream is paired
    ``token_store.ROWS_PER_BATCH`` documents at a time, the random next sentences drawn from the same group."""
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise MissingSpecialTokenError("next-sentence examples need a tokenizer with [CLS] and [SEP]")
    if isinstance(dataset, datasets.IterableDataset):
        columns = input_columns(dataset)
        use_sentences = sentences_column is not None and sentences_column in columns
        return dataset.map(_window_pairs, batched=True, batch_size=token_store.ROWS_PER_BATCH,
                           remove_columns=columns, fn_kwargs={
                               "tokenizer": tokenizer, "column": sentences_column if use_sentences else text_column,
                               "split": not use_sentences, "max_length": max_length, "short_seq_prob": short_seq_prob,
                               "seed": seed, "dupe_factor": dupe_factor, "next_sentence": next_sentence})
    store = token_store.prepared_store(dataset, tokenizer, "sentences", column=text_column,
                                    sentences_column=sentences_column, num_proc=num_proc, source=source)
    print(f"{source}: {store.info['documents']} documents, {store.info['sentences']} sentences", flush=True)
    return token_store.SentencePairs(store, tokenizer, max_length, seed=seed, short_seq_prob=short_seq_prob,
                                  dupe_factor=dupe_factor, next_sentence=next_sentence)


def _window_pairs(rows: dict, tokenizer: PreTrainedTokenizerBase, column: str, split: bool, max_length: int,
                  short_seq_prob: float, seed: int, dupe_factor: int, next_sentence: bool) -> dict[str, list]:
    """The sentence pairs of one group of a stream's documents (`group_seed`); fewer than two documents give none."""
    tokenized, _ = tokenize_documents(rows[column], tokenizer, split)
    columns = ("input_ids", "token_type_ids", "next_sentence_label")[:3 if next_sentence else 2]
    if sum(1 for doc in tokenized if doc) < 2:
        return {c: [] for c in columns}
    pairs = encoders.create_nsp_examples(tokenized, tokenizer, max_length, short_seq_prob,
                                         group_seed(seed, rows[column][0]), dupe_factor)
    return {c: [p[c] for p in pairs] for c in columns}


def group_seed(seed: int, first_document: str | list[str]) -> int:
    """The seed of the pairs of one group of a stream's documents: the run's ``seed`` and the group's first document
    (its row as read), so the same on any number of processes."""
    return zlib.crc32(f"{seed} {json.dumps(first_document)}".encode()) + seed


__all__ = ["check_documents", "count_cut_questions", "group_seed", "input_columns", "prepare_causal_lm_dataset",
           "prepare_nsp_dataset", "tokenize_dataset"]
