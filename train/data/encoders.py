"""Building model examples from text: pure functions over a tokenizer, the step between reading data and
collating batches. ``train.data.model_inputs`` runs them inside ``Dataset.map`` (batched); they are usable on their
own: ``create_nsp_examples`` (BERT's sentence pairs, as google-research/bert's ``create_instances_from_document``, with
the departures in docs/models.md, "Departures from the papers"), ``pack_sequences`` / ``pack_documents`` (causal-LM
blocks), and the ``encode_*`` functions of the fine-tuning tasks.
Data formats and columns by task: docs/training.md, "Data".
"""

from __future__ import annotations

import array
import functools
import itertools
import random
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
from transformers import PreTrainedTokenizerBase

from train.data.tokenization import MissingSpecialTokenError

IGNORE_INDEX = -100  # the label of a position the loss skips


class RowError(ValueError):
    """A row its task cannot encode, at `row` (0-based, among the rows the encoder was given) of `column`: the
    caller that knows the file names its line (`finetune.encoded`)."""

    @classmethod
    def at(cls, row: int, column: str, detail: str, qualifier: str = "") -> RowError:
        error = cls(f"row {row}{qualifier}: {detail}")
        error.row, error.column, error.detail, error.qualifier = row, column, detail, qualifier
        return error  # built so, it pickles (a process of a map raises it) with its message as its one argument


class QAAnswerSpanError(RowError):
    """An answer's character span does not lie inside (or does not match) its context."""


class LabelAlignmentError(RowError):
    """A token-classification row has a different number of words and tags."""


# ----------------------------------------------------------------------------- causal-LM packing, NSP pairs

def ended_documents(sequences: Iterable[Sequence[int]], separator_id: int) -> Iterator[list[int]]:
    """Each document's ids followed by ``separator_id``; a document of no tokens (a blank line, an empty text) gives
    nothing, as transformers' ``run_clm.py`` concatenates nothing for it."""
    return ([*ids, separator_id] for ids in sequences if len(ids))


def _blocks(sequences: Iterable[Sequence[int]], block_size: int, separator_id: int,
            drop_last: bool) -> Iterator[tuple[list[int], list[bool]]]:
    """``(ids, starts)``: the stream of documents, each followed by ``separator_id`` (``ended_documents``), cut into
    ``block_size`` blocks; ``starts`` flags the first token of each document."""
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    buffer: list[int] = []
    starts: list[bool] = []
    for ids in ended_documents(sequences, separator_id):
        starts.extend([True] + [False] * (len(ids) - 1))
        buffer.extend(ids)
        if len(buffer) >= block_size:
            cut = len(buffer) - len(buffer) % block_size
            yield from ((buffer[i:i + block_size], starts[i:i + block_size]) for i in range(0, cut, block_size))
            buffer, starts = buffer[cut:], starts[cut:]
    if buffer and not drop_last:
        yield buffer, starts


def pack_sequences(sequences: Iterable[Sequence[int]], block_size: int, separator_id: int,
                   drop_last: bool = True) -> Iterator[list[int]]:
    """Concatenate documents, each followed by ``separator_id``, and cut into ``block_size`` blocks."""
    yield from (ids for ids, _ in _blocks(sequences, block_size, separator_id, drop_last))


def pack_documents(sequences: Iterable[Sequence[int]], block_size: int, separator_id: int,
                   drop_last: bool = True) -> Iterator[dict[str, list[int]]]:
    """``pack_sequences``' blocks with ``position_ids`` that restart at 0 at every document and at every block (a
    document cut by a block boundary could not attend to its first part anyway)."""
    for ids, starts in _blocks(sequences, block_size, separator_id, drop_last):
        positions, position = [], 0
        for i, start in enumerate(starts):
            position = 0 if start or i == 0 else position + 1
            positions.append(position)
        yield {"input_ids": ids, "position_ids": positions}


def create_nsp_examples(documents: Sequence[Sequence[Sequence[int]]], tokenizer: PreTrainedTokenizerBase,
                        max_length: int = 128, short_seq_prob: float = 0.1, seed: int = 0,
                        dupe_factor: int = 1) -> list[dict]:
    """Sentence-pair examples from documents given as lists of tokenized sentences (no templates): the pairs of
    ``nsp_pair_index`` over these documents, with their tokens."""
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise MissingSpecialTokenError("next-sentence examples need a tokenizer with [CLS] and [SEP]")
    documents = [[list(s) for s in d if len(s)] for d in documents]
    documents = [d for d in documents if d]
    sentences = [s for d in documents for s in d]
    tokens = [t for s in sentences for t in s]
    items = np.concatenate([[0], np.cumsum([len(s) for s in sentences], dtype=np.int64)])
    firsts = np.concatenate([[0], np.cumsum([len(d) for d in documents], dtype=np.int64)])
    pairs = nsp_pair_index(items, firsts, max_length, short_seq_prob, seed, dupe_factor)
    return [nsp_features(tokens[a0:a1], tokens[b0:b1], bool(r), tokenizer.cls_token_id, tokenizer.sep_token_id)
            for a0, a1, b0, b1, r in pairs.tolist()]


def nsp_pair_index(items: np.ndarray, documents: np.ndarray, max_length: int = 128, short_seq_prob: float = 0.1,
                   seed: int = 0, dupe_factor: int = 1, path: Path | None = None) -> np.ndarray:
    """BERT's sentence pairs over sentences given by their token `items` starts (and the end) and `documents`' first
    sentences (and the count): an int64 array (pairs, 5) of `[a_start, a_end, b_start, b_end, is_random]`, shuffled.
    Only lengths are read. With `path`, the index is written there as `.npy` and returned memory-mapped, so memory
    holds 8 bytes a pair whatever the corpus size."""
    if len(documents) < 3:
        raise ValueError("next-sentence prediction needs at least two non-empty documents")
    rng = random.Random(seed)
    pairs = (pair for _ in range(dupe_factor) for pair in _corpus_pairs(items, documents, max_length - 3,
                                                                             short_seq_prob, rng))
    if path is None:
        found = np.asarray(list(pairs), dtype=np.int64).reshape(-1, 5)
        return found[shuffled_order(len(found), rng)]
    unordered, count = path.with_name(path.name + ".unordered"), 0
    try:
        with open(unordered, "wb") as out:
            while chunk := list(itertools.islice(pairs, _BLOCK)):
                np.asarray(chunk, dtype=np.int64).tofile(out)
                count += len(chunk)
        order = shuffled_order(count, rng)
        source = np.memmap(unordered, dtype=np.int64, mode="r", shape=(count, 5)) if count else np.zeros((0, 5))
        index = np.lib.format.open_memmap(path, mode="w+", dtype=np.int64, shape=(count, 5))
        for start in range(0, count, _BLOCK):
            index[start:start + _BLOCK] = source[order[start:start + _BLOCK]]
        index.flush()
    finally:
        unordered.unlink(missing_ok=True)
    return np.load(path, mmap_mode="r")


_BLOCK = 1 << 16  # documents (or pairs) read at a time


def shuffled_order(count: int, rng: random.Random) -> np.ndarray:
    """The permutation `rng.shuffle(list(range(count)))` gives, drawn alike (CPython's Fisher-Yates over
    `_randbelow`), held as int64 rather than a list of Python ints."""
    order = array.array("q", range(count))
    randbelow = rng._randbelow
    for i in reversed(range(1, count)):
        j = randbelow(i + 1)
        order[i], order[j] = order[j], order[i]
    return np.frombuffer(order, dtype=np.int64)


def _corpus_pairs(items, documents, max_num_tokens: int, short_seq_prob: float,
                  rng: random.Random) -> Iterator[tuple[int, int, int, int, int]]:
    """The pairs of every document in order, its sentence starts read a block of documents at a time."""
    count = len(documents) - 1
    for block in range(0, count, _BLOCK):
        firsts = np.asarray(documents[block:min(block + _BLOCK, count) + 1]).tolist()
        starts = np.asarray(items[firsts[0]:firsts[-1] + 1]).tolist()
        for index in range(block, block + len(firsts) - 1):
            local = index - block
            yield from _document_pairs(starts[firsts[local] - firsts[0]:firsts[local + 1] - firsts[0] + 1],
                                       index, items, documents, max_num_tokens, short_seq_prob, rng)


def _document_pairs(starts: list[int], index: int, items, documents, max_num_tokens: int, short_seq_prob: float,
                    rng: random.Random) -> Iterator[tuple[int, int, int, int, int]]:
    """google-research/bert's `create_instances_from_document` over one document's sentence `starts` (and its end)."""
    count = len(starts) - 1
    target = rng.randint(2, max_num_tokens) if rng.random() < short_seq_prob else max_num_tokens
    chunk_first, chunk, length, i = 0, 0, 0, 0
    while i < count:
        if chunk == 0:
            chunk_first = i
        chunk += 1
        length += starts[i + 1] - starts[i]
        if i == count - 1 or (length >= target and chunk >= 2 and i != count - 2):
            if chunk >= 2:
                a_end = rng.randint(1, chunk - 1)
                a = [starts[chunk_first], starts[chunk_first + a_end]]
                if rng.random() < 0.5:
                    b = _random_segment(items, documents, index, target - (a[1] - a[0]), rng)
                    i -= chunk - a_end  # put the unused sentences back
                    is_random = 1
                else:
                    b, is_random = [a[1], starts[i + 1]], 0
                truncate_ranges(a, b, max_num_tokens, rng)
                if a[1] > a[0] and b[1] > b[0]:
                    yield a[0], a[1], b[0], b[1], is_random
            chunk, length = 0, 0
        i += 1


def _random_segment(items, documents, index: int, target_length: int, rng: random.Random) -> list[int]:
    other = rng.randrange(len(documents) - 2)
    other += other >= index  # any document but this one
    first, end = int(documents[other]), int(documents[other + 1])
    begin = first + rng.randrange(end - first)
    starts = np.asarray(items[begin:end + 1]).tolist()
    sentence = 0
    while sentence < len(starts) - 2 and starts[sentence + 1] - starts[0] < target_length:
        sentence += 1
    return [starts[0], starts[sentence + 1]]


def truncate_ranges(a: list[int], b: list[int], max_num_tokens: int, rng: random.Random) -> None:
    """BERT's truncation of two token ranges, in place: trim the longer, from its front or back at random."""
    while (a[1] - a[0]) + (b[1] - b[0]) > max_num_tokens:
        longer = a if a[1] - a[0] > b[1] - b[0] else b
        if rng.random() < 0.5:
            longer[0] += 1
        else:
            longer[1] -= 1


def nsp_features(a: list[int], b: list[int], is_random: bool, cls_id: int, sep_id: int) -> dict:
    """`[CLS] a [SEP] b [SEP]` with its token types and `next_sentence_label` (1: b is random)."""
    return {"input_ids": [cls_id, *a, sep_id, *b, sep_id], "token_type_ids": [0] * (len(a) + 2) + [1] * (len(b) + 1),
            "next_sentence_label": int(is_random)}


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """One sentence per line when the text has line breaks (BERT's layout), else split after . ! ?
    followed by a capital or digit."""
    parts = text.splitlines() if "\n" in text.strip() else _SENTENCE_END.split(text)
    return [p.strip() for p in parts if p.strip()]


def tokenize_documents(rows: Sequence, encode: Callable[[list[str]], list[list[int]]] | PreTrainedTokenizerBase,
                       split: bool) -> tuple[list[list[list[int]]], int]:
    """Documents as lists of tokenized sentences, sentences without tokens dropped, and the characters read: each row
    a text cut by ``split_sentences`` (``split``) or a list of sentences; ``encode`` is a tokenizer or a function
    from texts to their ids without special tokens."""
    documents = [split_sentences(t) for t in rows] if split else [[s for s in d if s.strip()] for d in rows]
    flat = [s for doc in documents for s in doc]
    if isinstance(encode, PreTrainedTokenizerBase):
        encode = functools.partial(_ids, tokenizer=encode)
    encoded = iter(encode(flat) if flat else [])
    return [[ids for ids in itertools.islice(encoded, len(doc)) if ids] for doc in documents], sum(map(len, flat))


def _ids(texts: list[str], tokenizer: PreTrainedTokenizerBase) -> list[list[int]]:
    return tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]


# ----------------------------------------------------------------------------- batch encoders

def encode_causal_lm(examples: dict, tokenizer: PreTrainedTokenizerBase, text_column: str = "text") -> dict:
    """Token ids without templates, for ``pack_sequences``. Documents longer than the model are expected here
    (packing cuts them into blocks), so the tokenizer's too-long-sequence warning is off (``verbose=False``)."""
    return {"input_ids": tokenizer(examples[text_column], add_special_tokens=False, verbose=False)["input_ids"]}


def encode_classification(examples: dict, tokenizer: PreTrainedTokenizerBase, text_column: str = "text",
                          text_pair_column: str | None = None, label_column: str | None = "label",
                          max_length: int | None = None) -> dict:
    """Single texts or pairs through the tokenizer's template; labels copied from ``label_column``."""
    pairs = examples[text_pair_column] if text_pair_column else None
    encoded = tokenizer(examples[text_column], pairs, truncation=True, max_length=max_length)
    if label_column:
        encoded["labels"] = list(examples[label_column])
    return dict(encoded)


def encode_seq2seq(examples: dict, tokenizer: PreTrainedTokenizerBase, source_column: str = "source",
                   target_column: str = "target", max_source_length: int | None = None,
                   max_target_length: int | None = None) -> dict:
    """``source </s>`` as input_ids, ``target </s>`` as labels (truncation keeps the final </s>)."""
    encoded = tokenizer(examples[source_column], truncation=True, max_length=max_source_length)
    targets = tokenizer(text_target=examples[target_column], truncation=True, max_length=max_target_length)
    return {**encoded, "labels": targets["input_ids"]}


def encode_token_classification(examples: dict, tokenizer: PreTrainedTokenizerBase, tokens_column: str = "tokens",
                                tags_column: str = "ner_tags", max_length: int | None = None,
                                indices: list[int] | None = None) -> dict:
    """Words to sub-tokens; each word's tag goes on its first sub-token, -100 elsewhere."""
    for i, (words, tags) in enumerate(zip(examples[tokens_column], examples[tags_column])):
        if len(words) != len(tags):
            row = indices[i] if indices is not None else i
            raise LabelAlignmentError.at(row, tags_column, f"{len(words)} words in {tokens_column!r} but {len(tags)} "
                                                           f"tags in {tags_column!r}")
    encoded = tokenizer(examples[tokens_column], is_split_into_words=True, truncation=True, max_length=max_length)
    labels = []
    for i, tags in enumerate(examples[tags_column]):
        previous, row = None, []
        for word in encoded.word_ids(i):
            row.append(IGNORE_INDEX if word is None or word == previous else tags[word])
            previous = word
        labels.append(row)
    return {**encoded, "labels": labels}


def _check_answers(examples: dict, indices: list[int] | None) -> None:
    for i, (context, answers) in enumerate(zip(examples["context"], examples["answers"])):
        for text, start in zip(answers["text"], answers["answer_start"]):
            row = indices[i] if indices is not None else i
            named = f" (id {examples['id'][i]!r})" if "id" in examples else ""
            if start < 0 or start + len(text) > len(context):
                unanswerable = ("; a question without an answer (SQuAD 2.0) has empty lists: {'text': [], "
                                "'answer_start': []}" if not text.strip() else "")
                raise QAAnswerSpanError.at(row, "answers", f"answer {text!r} at characters {start}.."
                                           f"{start + len(text)} lies outside its context of {len(context)} "
                                           f"characters{unanswerable}", named)
            if context[start:start + len(text)] != text:
                raise QAAnswerSpanError.at(row, "answers", f"answer {text!r} does not match the context at "
                                           f"character {start}, which reads {context[start:start + len(text)]!r}",
                                           named)


def cut_questions(questions: list[str], tokenizer: PreTrainedTokenizerBase, max_query_length: int) -> list[str]:
    """Each question without its leading spaces (SQuAD has some), cut after its first ``max_query_length`` tokens as
    BERT's ``run_squad.py`` cuts its query tokens. The cut is made in the text, at the end offset of the last token
    kept, so the question re-tokenizes into exactly those tokens and the context is never touched."""
    questions = [q.lstrip() for q in questions]
    offsets = tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True,
                        verbose=False)["offset_mapping"]
    return [q[:spans[max_query_length - 1][1]] if len(spans) > max_query_length else q
            for q, spans in zip(questions, offsets)]


def questions_cut(questions: list[str], tokenizer: PreTrainedTokenizerBase, max_query_length: int) -> int:
    """How many of ``questions`` ``cut_questions`` cuts: those of more than ``max_query_length`` tokens."""
    lengths = tokenizer([q.lstrip() for q in questions], add_special_tokens=False, verbose=False)["input_ids"]
    return sum(len(ids) > max_query_length for ids in lengths)


def encode_qa(examples: dict, tokenizer: PreTrainedTokenizerBase, max_length: int = 384, doc_stride: int = 128,
              max_query_length: int = 64, keep_offsets: bool = False, indices: list[int] | None = None) -> dict:
    """SQuAD-style examples to windows with ``start_positions`` / ``end_positions`` (0 = no answer), each question cut
    to its first ``max_query_length`` tokens (``cut_questions``). A window needs room for the question, the template
    and more context than ``doc_stride``, or the fast tokenizer panics (``train.setup.splits.question_room_problem``).

    ``keep_offsets`` adds ``example_id`` and ``offset_mapping`` (None outside the context) for mapping predictions
    back to text; drop them before collating."""
    _check_answers(examples, indices)
    encoded = tokenizer(cut_questions(examples["question"], tokenizer, max_query_length), examples["context"],
                        truncation="only_second", max_length=max_length, stride=doc_stride,
                        return_overflowing_tokens=True, return_offsets_mapping=True)
    sample_map = encoded.pop("overflow_to_sample_mapping")
    offsets_all = encoded.pop("offset_mapping")
    starts, ends, example_ids, kept_offsets = [], [], [], []
    for i, offsets in enumerate(offsets_all):
        sequence_ids, answers = encoded.sequence_ids(i), examples["answers"][sample_map[i]]
        start, end = _answer_tokens(offsets, sequence_ids, answers)
        starts.append(start)
        ends.append(end)
        example_ids.append(indices[sample_map[i]] if indices is not None else sample_map[i])
        kept_offsets.append([o if s == 1 else None for o, s in zip(offsets, sequence_ids)])
    out = {**encoded, "start_positions": starts, "end_positions": ends}
    if keep_offsets:
        out.update(example_id=example_ids, offset_mapping=kept_offsets)
    return out


def _answer_tokens(offsets, sequence_ids, answers) -> tuple[int, int]:
    """Token span of the first answer inside this window's context, or (0, 0)."""
    if not answers["text"]:
        return 0, 0
    start_char = answers["answer_start"][0]
    end_char = start_char + len(answers["text"][0])
    context = [i for i, s in enumerate(sequence_ids) if s == 1]
    if not context or offsets[context[0]][0] > start_char or offsets[context[-1]][1] < end_char:
        return 0, 0  # truncated away from this window
    start = next(i for i in context if offsets[i][1] > start_char)
    end = next(i for i in reversed(context) if offsets[i][0] < end_char)
    return start, end


__all__ = ["IGNORE_INDEX", "LabelAlignmentError", "QAAnswerSpanError", "RowError", "create_nsp_examples",
           "cut_questions", "encode_causal_lm", "encode_classification", "encode_qa", "encode_seq2seq",
           "encode_token_classification", "ended_documents", "nsp_features", "nsp_pair_index", "pack_documents",
           "pack_sequences", "questions_cut", "split_sentences", "tokenize_documents", "truncate_ranges"]
