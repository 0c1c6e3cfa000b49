"""Example builders and batch collators for every Lineage family.

Example builders turn text into model features; they are pure functions over a tokenizer, used by
``train.core.data`` inside ``Dataset.map`` (batched) and usable on their own:

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
  ``drop_last=False`` (it is then shorter and the collator pads it).
- ``encode_classification`` (BERT ``[CLS] a [SEP] b [SEP]`` / GPT ``[START] a [DELIM] b [EXTRACT]``,
  whichever template the tokenizer carries), ``encode_seq2seq`` (``a </s>`` -> labels ``b </s>``),
  ``encode_causal_lm`` (no template), ``encode_token_classification`` (word labels on the first
  sub-token, -100 on the others and on special tokens), ``encode_qa`` (answer character spans to
  start/end token positions through offset mappings; long contexts split into windows with
  ``doc_stride`` overlapping tokens; answers missing from a window point at position 0, ``[CLS]``).

Collators are dataclasses: ``collator(features: list[dict]) -> dict[str, torch.Tensor]``. All pad
dynamically to the longest sequence of the batch, optionally up to a multiple of ``pad_to_multiple_of``
(8 suits tensor cores), on the right by default whatever ``tokenizer.padding_side`` says (learned
absolute positions then start at 0 in training). Labels are -100 wherever no loss is taken.

- ``PaddingCollator``: classification, NLI, token classification, QA (``start_positions`` /
  ``end_positions``), multiple choice (features whose ``input_ids`` is a list of choices).
- ``MaskedLMCollator``: BERT's masking. Per sequence exactly ``round(15% x n)`` of the n non-special,
  non-padding tokens are selected (BERT's ``num_to_predict``, at least one); each selected token becomes
  ``[MASK]`` with probability 80%, a random non-special token 10%, itself 10%. Optional whole-word
  masking selects WordPiece words (a token and its ``##`` continuations) until the budget is met.
  Masks are drawn anew for every batch (dynamic masking, as RoBERTa; BERT masked once per
  ``dupe_factor`` copy offline). Passes ``token_type_ids`` and ``next_sentence_label`` through.
- ``CausalLMCollator``: ``labels`` = ``input_ids`` (the model shifts), -100 on padding.
- ``Seq2SeqCollator``: ``input_ids``, ``attention_mask``, ``labels`` (-100 on padding) and
  ``decoder_input_ids`` = labels shifted right behind ``decoder_start_token_id`` (default ``<s>``).

Randomness comes from torch's global generator (which Accelerate seeds and keeps in step across
processes) unless ``seed`` is given.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedTokenizerBase

from modeling.modeling_lineage_transformer import shift_tokens_right
from train.core.tokenization import MissingSpecialTokenError

IGNORE_INDEX = -100
_SEQUENCE_PAD = {"attention_mask": 0, "token_type_ids": 0, "special_tokens_mask": 1, "position_ids": 0,
                 "labels": IGNORE_INDEX, "decoder_attention_mask": 0}


class QAAnswerSpanError(ValueError):
    """An answer's character span does not lie inside (or does not match) its context."""


class LabelAlignmentError(ValueError):
    """A token-classification row has a different number of words and tags."""


# ----------------------------------------------------------------------------- padding

def pad_sequences(sequences: Sequence[Sequence[int]], value: int, multiple_of: int | None = None,
                  side: str = "right") -> torch.Tensor:
    """Stack ragged sequences into (B, T), T = longest length rounded up to ``multiple_of``."""
    length = max((len(s) for s in sequences), default=0)
    if multiple_of:
        length = -(-length // multiple_of) * multiple_of
    out = torch.full((len(sequences), length), value, dtype=torch.long)
    for i, seq in enumerate(sequences):
        seq = torch.as_tensor(seq, dtype=torch.long)
        if len(seq):
            if side == "right":
                out[i, :len(seq)] = seq
            else:
                out[i, length - len(seq):] = seq
    return out


@dataclass
class PaddingCollator:
    """Pads every sequence feature and stacks every scalar one (see the module docstring)."""

    tokenizer: PreTrainedTokenizerBase
    pad_to_multiple_of: int | None = None
    padding_side: str = "right"

    def __post_init__(self):
        if self.tokenizer.pad_token_id is None:
            raise MissingSpecialTokenError("the tokenizer has no pad_token; collators need one to pad")
        if self.padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', not {self.padding_side!r}")

    def _pad_value(self, key: str) -> int:
        if key in ("input_ids", "decoder_input_ids"):
            return self.tokenizer.pad_token_id
        if key in _SEQUENCE_PAD:
            return _SEQUENCE_PAD[key]
        raise ValueError(f"feature {key!r} is not a known model input; remove that column before collating")

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        if not features:
            raise ValueError("cannot collate an empty list of features")
        first = features[0]
        choices = _is_multiple_choice(first)  # then each sequence feature holds one list per choice
        batch = {}
        for key, value in first.items():
            column = [f[key] for f in features]
            if _is_sequence(value):
                seqs = [s for group in column for s in group] if choices else column
                batch[key] = pad_sequences(seqs, self._pad_value(key), self.pad_to_multiple_of, self.padding_side)
            else:
                batch[key] = torch.as_tensor(column)
        if "attention_mask" not in batch:
            lengths = [len(s) for f in features for s in (f["input_ids"] if choices else [f["input_ids"]])]
            batch["attention_mask"] = pad_sequences([[1] * n for n in lengths], 0, self.pad_to_multiple_of,
                                                    self.padding_side)
        if choices:
            batch = {k: v.view(len(features), -1, v.shape[-1]) if v.dim() == 2 else v for k, v in batch.items()}
        return batch


def _is_sequence(value) -> bool:
    return isinstance(value, (list, tuple)) or (isinstance(value, torch.Tensor) and value.dim() > 0)


def _is_multiple_choice(feature: dict) -> bool:
    ids = feature["input_ids"]
    return len(ids) > 0 and _is_sequence(ids[0])


# ----------------------------------------------------------------------------- masked LM

@dataclass
class MaskedLMCollator(PaddingCollator):
    """BERT's masked-LM corruption on top of dynamic padding (see the module docstring)."""

    mlm_probability: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    whole_word_mask: bool = False
    max_predictions: int | None = None
    seed: int | None = None
    _generator: torch.Generator | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        super().__post_init__()
        if self.tokenizer.mask_token_id is None:
            raise MissingSpecialTokenError("masked-LM training needs a tokenizer with a mask_token ([MASK])")
        if not 0 < self.mlm_probability < 1 or self.mask_replace_prob + self.random_replace_prob > 1:
            raise ValueError("need 0 < mlm_probability < 1 and mask_replace_prob + random_replace_prob <= 1")
        vocab_size = len(self.tokenizer)
        self._special = torch.zeros(vocab_size, dtype=torch.bool)
        self._special[list(self.tokenizer.all_special_ids)] = True
        self._random_ids = (~self._special).nonzero().squeeze(1)
        tokens = self.tokenizer.convert_ids_to_tokens(list(range(vocab_size)))
        self._continuation = torch.tensor([t.startswith("##") for t in tokens])
        if self.seed is not None:
            self._generator = torch.Generator().manual_seed(self.seed)

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        if any("labels" in f for f in features):
            raise ValueError("masked-LM features must not carry 'labels'; the collator makes them")
        batch = super().__call__(features)
        batch["input_ids"], batch["labels"] = self.mask_tokens(batch["input_ids"])
        return batch

    def mask_tokens(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(corrupted input_ids, labels) for a padded (B, T) batch; the input is not modified."""
        candidates = ~self._special[input_ids]  # (B, T): never specials or padding
        select = self._select_words if self.whole_word_mask else self._select_tokens
        selected = select(input_ids, candidates)
        labels = torch.where(selected, input_ids, IGNORE_INDEX)
        draw = torch.rand(input_ids.shape, generator=self._generator)
        to_mask = selected & (draw < self.mask_replace_prob)
        to_random = selected & ~to_mask & (draw < self.mask_replace_prob + self.random_replace_prob)
        corrupted = input_ids.masked_fill(to_mask, self.tokenizer.mask_token_id)
        picks = torch.randint(len(self._random_ids), (int(to_random.sum()),), generator=self._generator)
        corrupted[to_random] = self._random_ids[picks]
        return corrupted, labels

    def _budget(self, count: torch.Tensor) -> torch.Tensor:
        """BERT's num_to_predict: round(p * n), at least 1 for a non-empty sequence, at most the cap."""
        budget = torch.round(count.double() * self.mlm_probability).long().clamp(min=1)
        budget = torch.minimum(budget, count)
        return budget.clamp(max=self.max_predictions) if self.max_predictions else budget

    def _select_tokens(self, input_ids: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        budget = self._budget(candidates.sum(1))  # (B,)
        scores = torch.rand(candidates.shape, generator=self._generator).masked_fill(~candidates, 2.0)
        ranks = scores.argsort(1).argsort(1)  # a random order of the candidates, per row
        return (ranks < budget[:, None]) & candidates

    def _select_words(self, input_ids: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        continuation = self._continuation[input_ids] & candidates
        selected = torch.zeros_like(candidates)
        for row, budget in enumerate(self._budget(candidates.sum(1)).tolist()):
            words: list[list[int]] = []
            for i in candidates[row].nonzero().squeeze(1).tolist():
                if continuation[row, i] and words and words[-1][-1] == i - 1:
                    words[-1].append(i)
                else:
                    words.append([i])
            taken = 0
            for w in torch.randperm(len(words), generator=self._generator).tolist():
                if taken + len(words[w]) <= budget:  # BERT skips a word that would overshoot
                    selected[row, words[w]] = True
                    taken += len(words[w])
        return selected


# ----------------------------------------------------------------------------- causal LM, seq2seq

@dataclass
class CausalLMCollator(PaddingCollator):
    """Blocks (or unpacked sequences) for next-token prediction; labels are the inputs."""

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        batch = super().__call__(features)
        if "labels" not in batch:
            batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, IGNORE_INDEX)
        return batch


@dataclass
class Seq2SeqCollator(PaddingCollator):
    """Source ids, labels with -100 on padding, decoder inputs = labels shifted right."""

    decoder_start_token_id: int | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.decoder_start_token_id is None:
            self.decoder_start_token_id = self.tokenizer.bos_token_id
        if self.decoder_start_token_id is None:
            raise MissingSpecialTokenError("seq2seq needs decoder_start_token_id or a tokenizer bos_token (<s>)")

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        if self.padding_side != "right":
            raise ValueError("seq2seq labels must be padded on the right")
        batch = super().__call__(features)
        batch["decoder_input_ids"] = shift_tokens_right(batch["labels"], self.tokenizer.pad_token_id,
                                                        self.decoder_start_token_id)
        return batch


# ----------------------------------------------------------------------------- packing, NSP

def pack_sequences(sequences: Iterable[Sequence[int]], block_size: int, separator_id: int,
                   drop_last: bool = True) -> Iterator[list[int]]:
    """Concatenate documents, each followed by ``separator_id``, and cut into ``block_size`` blocks."""
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    buffer: list[int] = []
    for ids in sequences:
        buffer.extend(ids)
        buffer.append(separator_id)
        if len(buffer) >= block_size:
            cut = len(buffer) - len(buffer) % block_size
            yield from (buffer[i:i + block_size] for i in range(0, cut, block_size))
            buffer = buffer[cut:]
    if buffer and not drop_last:
        yield buffer


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
    """Token ids without templates, for ``pack_sequences``."""
    return {"input_ids": tokenizer(examples[text_column], add_special_tokens=False)["input_ids"]}


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


__all__ = ["IGNORE_INDEX", "QAAnswerSpanError", "LabelAlignmentError", "pad_sequences", "PaddingCollator",
           "MaskedLMCollator", "CausalLMCollator", "Seq2SeqCollator", "pack_sequences",
           "truncate_seq_pair", "create_nsp_examples", "encode_causal_lm", "encode_classification",
           "encode_seq2seq", "encode_token_classification", "encode_qa"]
