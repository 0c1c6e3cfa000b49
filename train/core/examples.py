"""Building model examples from text: pure functions over a tokenizer, the step between reading data and
collating batches. ``train.core.data`` runs them inside ``Dataset.map`` (batched); they are usable on their own:

- ``create_nsp_examples(documents, tokenizer, max_length, ...)``: BERT's sentence-pair instances
  (``create_instances_from_document`` of google-research/bert): chunks of whole sentences up to a target
  length (10% of documents get a random shorter target), split at a random sentence boundary into A and
  B; half the time B is replaced by text from another document and the unused sentences are put back;
  ``truncate_seq_pair`` then trims the longer side, one token at a time, from the front or the back at
  random. Labels: ``next_sentence_label`` 0 = B follows A, 1 = B is random (transformers' convention).
  Departures: a chunk always holds at least two sentences when the document has them (BERT forces
  "random" for a one-sentence chunk, which skews the label rate above 50%), so the label is a fair coin;
  a document's lone leftover final sentence is skipped; the random document is drawn among the others.
- ``pack_sequences(token_lists, block_size, separator_id)``: causal-LM packing. Each document is
  followed by the end-of-text token, the stream is cut into blocks of exactly ``block_size``; every
  token appears exactly once, in order, with no padding. The final partial block is dropped unless
  ``drop_last=False`` (it is then shorter and the collator pads it). ``pack_documents`` gives the same
  blocks with ``position_ids`` restarting at each document, from which the model keeps attention within
  documents (packing without cross-document attention).
- ``encode_classification`` (BERT ``[CLS] a [SEP] b [SEP]`` / GPT ``[START] a [DELIM] b [EXTRACT]``,
  whichever template the tokenizer carries), ``encode_seq2seq`` (``a </s>`` -> labels ``b </s>``),
  ``encode_causal_lm`` (no template), ``encode_token_classification`` (word labels on the first
  sub-token, -100 on the others and on special tokens), ``encode_qa`` (answer character spans to
  start/end token positions through offset mappings; long contexts split into windows with
  ``doc_stride`` overlapping tokens; answers missing from a window point at position 0, ``[CLS]``).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence

from transformers import PreTrainedTokenizerBase

from train.core.tokenization import MissingSpecialTokenError

IGNORE_INDEX = -100  # the label of a position the loss skips


class QAAnswerSpanError(ValueError):
    """An answer's character span does not lie inside (or does not match) its context."""


class LabelAlignmentError(ValueError):
    """A token-classification row has a different number of words and tags."""


# ----------------------------------------------------------------------------- causal-LM packing, NSP pairs

def _blocks(sequences: Iterable[Sequence[int]], block_size: int, separator_id: int,
            drop_last: bool) -> Iterator[tuple[list[int], list[bool]]]:
    """``(ids, starts)``: the stream of documents, each followed by ``separator_id``, cut into ``block_size``
    blocks; ``starts`` flags the first token of each document."""
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    buffer: list[int] = []
    starts: list[bool] = []
    for ids in sequences:
        starts.extend([True] + [False] * len(ids))
        buffer.extend(ids)
        buffer.append(separator_id)
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
    """``pack_sequences``' blocks with ``position_ids`` that restart at 0 at every document (its separator ends it)
    and at every block: a document cut by a block boundary continues in the next block from position 0, as a new
    document (it could not attend to its first part anyway), so positions stay below ``block_size``."""
    for ids, starts in _blocks(sequences, block_size, separator_id, drop_last):
        positions, position = [], 0
        for i, start in enumerate(starts):
            position = 0 if start or i == 0 else position + 1
            positions.append(position)
        yield {"input_ids": ids, "position_ids": positions}


def truncate_seq_pair(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int, rng: random.Random) -> None:
    """BERT's truncation, in place: trim the longer side, from its front or back at random."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def create_nsp_examples(documents: Sequence[Sequence[Sequence[int]]], tokenizer: PreTrainedTokenizerBase,
                        max_length: int = 128, short_seq_prob: float = 0.1, seed: int = 0,
                        dupe_factor: int = 1) -> list[dict]:
    """Sentence-pair examples from documents given as lists of tokenized sentences (no templates)."""
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise MissingSpecialTokenError("next-sentence examples need a tokenizer with [CLS] and [SEP]")
    documents = [d for d in documents if any(len(s) for s in d)]
    if len(documents) < 2:
        raise ValueError("next-sentence prediction needs at least two non-empty documents")
    rng, examples = random.Random(seed), []
    for _ in range(dupe_factor):
        for index in range(len(documents)):
            for a, b, is_random in _document_pairs(documents, index, max_length - 3, short_seq_prob, rng):
                examples.append(_nsp_features(a, b, is_random, tokenizer))
    rng.shuffle(examples)
    return examples


def _document_pairs(documents, index: int, max_num_tokens: int, short_seq_prob: float, rng: random.Random):
    document = [list(s) for s in documents[index] if len(s)]
    target = rng.randint(2, max_num_tokens) if rng.random() < short_seq_prob else max_num_tokens
    chunk, length, i = [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        last = i == len(document) - 1
        if last or (length >= target and len(chunk) >= 2 and i != len(document) - 2):
            if len(chunk) >= 2:
                a_end = rng.randint(1, len(chunk) - 1)
                tokens_a = [t for s in chunk[:a_end] for t in s]
                if rng.random() < 0.5:
                    tokens_b = _random_segment(documents, index, target - len(tokens_a), rng)
                    i -= len(chunk) - a_end  # put the unused sentences back
                    is_random = True
                else:
                    tokens_b, is_random = [t for s in chunk[a_end:] for t in s], False
                truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                if tokens_a and tokens_b:
                    yield tokens_a, tokens_b, is_random
            chunk, length = [], 0
        i += 1


def _random_segment(documents, index: int, target_length: int, rng: random.Random) -> list[int]:
    other = rng.randrange(len(documents) - 1)
    other += other >= index  # any document but this one
    sentences = [s for s in documents[other] if len(s)]
    tokens: list[int] = []
    for sentence in sentences[rng.randrange(len(sentences)):]:
        tokens.extend(sentence)
        if len(tokens) >= target_length:
            break
    return tokens


def _nsp_features(a: list[int], b: list[int], is_random: bool, tokenizer) -> dict:
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    return {"input_ids": [cls, *a, sep, *b, sep], "token_type_ids": [0] * (len(a) + 2) + [1] * (len(b) + 1),
            "next_sentence_label": int(is_random)}


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
            raise LabelAlignmentError(f"row {row}: {len(words)} words in {tokens_column!r} but {len(tags)} "
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
            name = f"row {row}" + (f" (id {examples['id'][i]!r})" if "id" in examples else "")
            if start < 0 or start + len(text) > len(context):
                raise QAAnswerSpanError(f"{name}: answer {text!r} at characters {start}..{start + len(text)} "
                                        f"lies outside its context of {len(context)} characters")
            if context[start:start + len(text)] != text:
                raise QAAnswerSpanError(f"{name}: answer {text!r} does not match the context at character "
                                        f"{start}, which reads {context[start:start + len(text)]!r}")


def encode_qa(examples: dict, tokenizer: PreTrainedTokenizerBase, max_length: int = 384, doc_stride: int = 128,
              keep_offsets: bool = False, indices: list[int] | None = None) -> dict:
    """SQuAD-style examples to windows with ``start_positions`` / ``end_positions`` (0 = no answer).

    ``keep_offsets`` adds ``example_id`` (the row) and ``offset_mapping`` (None outside the context) for
    mapping predictions back to text; drop those two columns before collating.
    """
    _check_answers(examples, indices)
    encoded = tokenizer([q.lstrip() for q in examples["question"]], examples["context"],
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


__all__ = ["IGNORE_INDEX", "LabelAlignmentError", "QAAnswerSpanError", "create_nsp_examples", "encode_causal_lm",
           "encode_classification", "encode_qa", "encode_seq2seq", "encode_token_classification", "pack_documents",
           "pack_sequences", "truncate_seq_pair"]
