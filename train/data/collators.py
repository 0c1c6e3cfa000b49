"""Batch collators for every Lineage family: a list of examples (``train.data.encoders``) in, one padded batch
of tensors out. Padding happens here and nowhere else.

``collator(features: list[dict], seeds: list[int] | None = None) -> dict`` pads to the batch's longest sequence
(optionally up to ``pad_to_multiple_of``), on the right whatever ``tokenizer.padding_side`` says; labels are -100
wherever no loss is taken. Every batch also carries ``packed_sequences`` (``modeling.packing.PackedSequences``), found
here on the CPU so the training forward reads nothing back from the device. ``seeds`` (one per example, from
``train.data.batching.SeededCollate``) make each example's random choices independent of its batch; without them
randomness comes from ``seed`` or torch's global generator.
Padding, packing and the checks on the CPU in a run: docs/training.md, "The engine"; docs/performance.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedTokenizerBase

from modeling.checks import check_label_ids, check_token_ids, value_checks
from modeling.packing import VARLEN_KEYWORDS, PackedSequences
from train.data.encoders import IGNORE_INDEX
from train.data.tokenization import MissingSpecialTokenError

_SEQUENCE_PAD = {"attention_mask": 0, "token_type_ids": 0, "special_tokens_mask": 1, "position_ids": 0,
                 "labels": IGNORE_INDEX, "decoder_attention_mask": 0}


# ----------------------------------------------------------------------------- padding

def padded_length(length: int, multiple_of: int | None) -> int:
    """`length` rounded up to a multiple of `multiple_of` (None: as it is), the width a batch is padded to."""
    return -(-length // multiple_of) * multiple_of if multiple_of else length


def pad_sequences(sequences: Sequence[Sequence[int]], value: int, multiple_of: int | None = None,
                  side: str = "right") -> torch.Tensor:
    """Stack ragged sequences into (B, T), T = longest length rounded up to ``multiple_of``."""
    length = padded_length(max((len(s) for s in sequences), default=0), multiple_of)
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
    """Pads every sequence feature and stacks every scalar one: classification, token classification, QA,
    multiple choice (features whose ``input_ids`` is a list of choices)."""

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

    def __call__(self, features: list[dict], seeds: Sequence[int] | None = None) -> dict:
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
        if "attention_mask" not in batch and "position_ids" not in batch:  # packed rows: positions delimit them
            lengths = [len(s) for f in features for s in (f["input_ids"] if choices else [f["input_ids"]])]
            batch["attention_mask"] = pad_sequences([[1] * n for n in lengths], 0, self.pad_to_multiple_of,
                                                    self.padding_side)
        sequences = PackedSequences.for_batch(batch.get("attention_mask"), batch.get("position_ids"))  # (B, T) rows
        if choices:
            batch = {k: v.view(len(features), -1, v.shape[-1]) if v.dim() == 2 else v for k, v in batch.items()}
        if sequences is not None:
            batch["packed_sequences"] = sequences
        return batch


def _is_sequence(value) -> bool:
    return isinstance(value, (list, tuple)) or (isinstance(value, torch.Tensor) and value.dim() > 0)


def _is_multiple_choice(feature: dict) -> bool:
    ids = feature["input_ids"]
    return len(ids) > 0 and _is_sequence(ids[0])


# ----------------------------------------------------------------------------- value checks

def value_limits(model) -> dict[str, tuple[int, str]]:
    """The batch keys whose values a Lineage model range-checks in its forward: key -> (exclusive upper bound, the
    config field it comes from). `labels` are token ids only for a model with an output (LM) layer; a classifier's
    labels are class indices, which its loss checks."""
    config = model.config
    limits = {key: (getattr(config, field), field) for key, field in (
        ("input_ids", "vocab_size"), ("decoder_input_ids", "vocab_size"), ("token_type_ids", "type_vocab_size"),
        ("position_ids", "max_position_embeddings")) if isinstance(getattr(config, field, None), int)}
    if model.get_output_embeddings() is not None:
        limits["labels"] = (config.vocab_size, "vocab_size")
    return limits


def check_batch_values(batch: dict, limits: dict[str, tuple[int, str]]) -> None:
    """Run the model's own range checks (`modeling.checks`) on a collated batch's values (`labels` may also be -100)
    and its sequence boundaries, on the CPU: the engine then turns the model's checks off around its forward."""
    check_sequence_boundaries(batch)
    try:
        with value_checks(True):
            for key, (upper, limit) in limits.items():
                values = batch.get(key)
                if values is None or values.is_floating_point():
                    continue
                if key == "labels":
                    check_label_ids(values, upper)
                else:
                    check_token_ids(values, upper, key, limit)
    except ValueError as error:
        raise ValueError(f"{error} The collated batch holds a value the model cannot embed or predict (check the "
                         "tokenizer and the data).") from None


def check_sequence_boundaries(batch: dict) -> None:
    """Check on the CPU that a batch's `packed_sequences` and `cu_seq_lens_*` / `max_length_*` describe its
    `input_ids`: the model trusts them without reading them back."""
    ids, sequences = batch.get("input_ids"), batch.get("packed_sequences")
    if ids is None:
        return
    if sequences is not None and sequences.grid not in (None, ids.numel()):
        raise ValueError(f"`packed_sequences` describe {sequences.grid} tokens but `input_ids` holds {ids.numel()}")
    if not any(key in batch for key in VARLEN_KEYWORDS):
        return
    if any(batch.get(key) is None for key in VARLEN_KEYWORDS):
        raise ValueError(f"give all of {', '.join(VARLEN_KEYWORDS)} or none of them")
    bounds, longest = batch["cu_seq_lens_q"], batch["max_length_q"]
    lengths = bounds.diff()
    if (bounds.dim() != 1 or bounds.dtype != torch.int32 or bounds[0] != 0 or bounds[-1] != ids.numel()
            or (lengths < 0).any() or longest != int(lengths.max())):
        raise ValueError(f"`cu_seq_lens_q` must be the int32 starts of the sequences of the flattened {ids.numel()} "
                         f"tokens plus the end, and `max_length_q` their longest length; got {bounds.tolist()} and "
                         f"{longest!r}")
    if not torch.equal(batch["cu_seq_lens_k"], bounds) or batch["max_length_k"] != longest:
        raise ValueError("`cu_seq_lens_k` / `max_length_k` must equal `cu_seq_lens_q` / `max_length_q` (packed rows "
                         "attend within themselves)")
    if sequences is not None and not torch.equal(sequences.cu_seqlens, bounds):
        raise ValueError("`packed_sequences` and `cu_seq_lens_q` must describe the same sequences")


# ----------------------------------------------------------------------------- masked LM

@dataclass
class MaskedLMCollator(PaddingCollator):
    """BERT's masking, drawn anew for every batch: per sequence ``round(mlm_probability x n)`` (at least one) of the n
    non-special tokens, or whole WordPiece words, become ``[MASK]`` (80%), a random token (10%) or stay (10%)."""

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

    def __call__(self, features: list[dict], seeds: Sequence[int] | None = None) -> dict:
        if any("labels" in f for f in features):
            raise ValueError("masked-LM features must not carry 'labels'; the collator makes them")
        batch = super().__call__(features)
        if seeds is None:
            batch["input_ids"], batch["labels"] = self.mask_tokens(batch["input_ids"])
            return batch
        if len(seeds) != len(features):
            raise ValueError(f"got {len(seeds)} seeds for {len(features)} features; give one seed per example")
        batch["labels"] = torch.full_like(batch["input_ids"], IGNORE_INDEX)
        width = batch["input_ids"].shape[1]
        for row, (feature, seed) in enumerate(zip(features, seeds)):
            length = len(feature["input_ids"])  # each example is masked over its own tokens, whatever the padding
            span = slice(0, length) if self.padding_side == "right" else slice(width - length, width)
            ids, labels = self.mask_tokens(batch["input_ids"][row:row + 1, span], torch.Generator().manual_seed(seed))
            batch["input_ids"][row, span], batch["labels"][row, span] = ids[0], labels[0]
        return batch

    def mask_tokens(self, input_ids: torch.Tensor,
                    generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(corrupted input_ids, labels) for a padded (B, T) batch; the input is not modified. Random draws come
        from ``generator``, else from the collator's ``seed``, else from torch's global generator."""
        generator = generator or self._generator
        candidates = ~self._special[input_ids]  # (B, T): never specials or padding
        select = self._select_words if self.whole_word_mask else self._select_tokens
        selected = select(input_ids, candidates, generator)
        labels = torch.where(selected, input_ids, IGNORE_INDEX)
        draw = torch.rand(input_ids.shape, generator=generator)
        to_mask = selected & (draw < self.mask_replace_prob)
        to_random = selected & ~to_mask & (draw < self.mask_replace_prob + self.random_replace_prob)
        corrupted = input_ids.masked_fill(to_mask, self.tokenizer.mask_token_id)
        picks = torch.randint(len(self._random_ids), (int(to_random.sum()),), generator=generator)
        corrupted[to_random] = self._random_ids[picks]
        return corrupted, labels

    def _budget(self, count: torch.Tensor) -> torch.Tensor:
        """BERT's num_to_predict: round(p * n), at least 1 for a non-empty sequence, at most the cap."""
        budget = torch.round(count.double() * self.mlm_probability).long().clamp(min=1)
        budget = torch.minimum(budget, count)
        return budget.clamp(max=self.max_predictions) if self.max_predictions else budget

    def _select_tokens(self, input_ids: torch.Tensor, candidates: torch.Tensor,
                       generator: torch.Generator | None) -> torch.Tensor:
        budget = self._budget(candidates.sum(1))  # (B,)
        scores = torch.rand(candidates.shape, generator=generator).masked_fill(~candidates, 2.0)
        ranks = scores.argsort(1).argsort(1)  # a random order of the candidates, per row
        return (ranks < budget[:, None]) & candidates

    def _select_words(self, input_ids: torch.Tensor, candidates: torch.Tensor,
                      generator: torch.Generator | None) -> torch.Tensor:
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
            for w in torch.randperm(len(words), generator=generator).tolist():
                if taken + len(words[w]) <= budget:  # BERT skips a word that would overshoot
                    selected[row, words[w]] = True
                    taken += len(words[w])
        return selected


# ----------------------------------------------------------------------------- causal LM, seq2seq

@dataclass
class CausalLMCollator(PaddingCollator):
    """Next-token prediction; labels are the inputs (the model shifts), -100 on padding. Packed blocks (with
    `position_ids` restarting at each document) get no attention mask, labels -100 at every position 0, and
    transformers' flash-attn boundaries (`cu_seq_lens_q/k`, `max_length_q/k`)."""

    def __call__(self, features: list[dict], seeds: Sequence[int] | None = None) -> dict:
        batch = super().__call__(features)
        if "labels" not in batch and "position_ids" in batch:  # no document's first token predicted from another
            batch["labels"] = batch["input_ids"].masked_fill(batch["position_ids"] == 0, IGNORE_INDEX)
        elif "labels" not in batch:
            batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, IGNORE_INDEX)
        if "position_ids" in batch and "attention_mask" not in batch:  # packed rows: transformers' boundaries too
            documents = batch["packed_sequences"]
            batch["cu_seq_lens_q"] = batch["cu_seq_lens_k"] = documents.cu_seqlens
            batch["max_length_q"] = batch["max_length_k"] = documents.max_length
        return batch


@dataclass
class Seq2SeqCollator(PaddingCollator):
    """Source ids and labels (-100 on padding); the model shifts the labels into its decoder inputs."""

    def __post_init__(self):
        super().__post_init__()
        if self.padding_side != "right":
            raise ValueError("seq2seq labels must be padded on the right")


__all__ = ["CausalLMCollator", "IGNORE_INDEX", "MaskedLMCollator", "PaddingCollator", "Seq2SeqCollator",
           "check_batch_values", "check_sequence_boundaries", "pad_sequences", "padded_length", "value_limits"]
