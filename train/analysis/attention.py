"""The attention weights of one input, from any Lineage model or a supported transformers reference model.

`load_attention_model(name)` loads a model on the eager attention kernel (the one that returns weights),
`encode_text` applies the task's template, `target_ids` forces `--target` or the model's own output through a
decoder, and `collect` runs one forward into `AttentionMap`s (`self`; or `encoder`, `decoder`, `cross`). Rows are
query positions, columns keys; decoder rows are labelled with the tokens they produce (the target shifted left).
`tokens` gives the vocabulary entries of each axis, `labels` their readable text.
The command and its outputs: docs/using.md, "Attention maps".
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass

import numpy as np
import torch
import transformers

from train.data.tokenization import only_special_tokens
from train.setup import models


class AttentionInputError(ValueError):
    """A model, text or selection the attention maps cannot be drawn for; the message names the argument."""


@dataclass
class AttentionMap:
    """Weights (L, H, R, K) of one kind of attention for the selected layers and heads."""

    name: str  # "self", "encoder", "decoder" or "cross"
    weights: np.ndarray  # (L, H, R, K), rows sum to one
    rows: str  # name of the token sequence labelling the rows (a key of the tokens dictionary)
    columns: str
    layers: list[int]  # the model's layer index of each entry of L
    heads: list[int]


def load_attention_model(name: str, revision: str | None = None) -> torch.nn.Module:
    """The model of a folder or Hub id (`train.setup.models`), in eval mode, on the eager attention kernel."""
    try:
        source = models.resolve_model(name, revision, revision_argument="--model_revision")
        if not source.pretrained:
            raise models.ModelSourceError(f"--model {name!r} is a preset, which has no trained weights; give a saved "
                                           "model folder or Hub id")
        model = models.load_model(source)
    except models.ModelSourceError as error:
        raise AttentionInputError(str(error)) from None
    implementation = getattr(model.config, "_attn_implementation", "eager")
    if implementation != "eager":
        model.set_attn_implementation("eager")
        print(f"switched the attention kernel from {implementation} to eager: only eager returns the weights "
              "(output_attentions=True)")
    return model.eval()


def load_attention_tokenizer(name: str, revision: str | None = None):
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            models.resolve_model(name, revision, revision_argument="--model_revision").folder)
    except (OSError, ValueError) as error:
        raise AttentionInputError(f"--model {name!r} has no tokenizer that loads ({error}); save the tokenizer "
                                  "beside the model (tokenizer.json)") from None
    if only_special_tokens(tokenizer):
        raise AttentionInputError(f"--model {name!r} has no tokenizer files with a vocabulary: transformers makes a "
                                  f"tokenizer of its {len(tokenizer)} special tokens only, which reads every word as "
                                  "unknown; save the model's tokenizer beside it (tokenizer.json)")
    return tokenizer


def max_positions(model, tokenizer) -> int | None:
    """The longest input the model takes: its positions, else the tokenizer's limit (an RNN has no positions)."""
    limit = getattr(model.config, "max_position_embeddings", None) or tokenizer.model_max_length
    return limit if limit and limit < 10**6 else None


def _tokenize(tokenizer, limit: int | None, label: str, **kwargs) -> dict[str, torch.Tensor]:
    encoded = tokenizer(**kwargs, return_tensors="pt", verbose=False)  # its too-long warning foretells what is cut
    length = encoded["input_ids"].shape[1]
    if limit is not None and length > limit:
        warnings.warn(f"{label} is {length} tokens long, more than the model's {limit} positions; "
                      f"truncated to {limit} tokens", stacklevel=2)
        encoded = tokenizer(**kwargs, return_tensors="pt", truncation=True, max_length=limit)
    return dict(encoded)


def encode_text(model, tokenizer, text: str, text_pair: str | None) -> dict[str, torch.Tensor]:
    """(1, T) model inputs. A causal LM reads plain text, as it was pretrained; other heads the tokenizer's
    template (`[CLS] a [SEP] b [SEP]`, `[START] a [DELIM] b [EXTRACT]`, `a </s>`)."""
    plain = type(model).__name__.endswith("ForCausalLM") and text_pair is None
    label = "--text" if text_pair is None else "--text with --text_pair"
    return _tokenize(tokenizer, max_positions(model, tokenizer), label, text=text, text_pair=text_pair,
                     add_special_tokens=not plain)


def target_ids(model, tokenizer, inputs: dict[str, torch.Tensor], target: str | None, num_beams: int,
               max_new_tokens: int | None) -> tuple[torch.Tensor, bool]:
    """(1, T + 1) decoder sequence: the start token, then the forced `target` (with its end token) or, when
    `target` is None, the tokens the model generates. Returns it and whether it was generated."""
    start = model.config.decoder_start_token_id
    if target is not None:
        labels = _tokenize(tokenizer, max_positions(model, tokenizer), "--target", text_target=target)["input_ids"]
        return torch.cat([torch.full((1, 1), start), labels], dim=1), False
    if not hasattr(model, "generate"):
        raise AttentionInputError(f"{type(model).__name__} cannot generate; give the target text with --target")
    limit = max_positions(model, tokenizer)
    positions = getattr(model.config, "max_position_embeddings", None)  # the decoder's (the RNN has none)
    if max_new_tokens is not None and positions is not None and max_new_tokens > positions - 1:
        raise AttentionInputError(f"--max_new_tokens is {max_new_tokens}, but the decoder has {positions} positions, "
                                  f"one of them for its start token: give at most {positions - 1}")
    length = inputs["input_ids"].shape[1]
    budget = max_new_tokens if max_new_tokens is not None else min(2 * length + 10, (limit or 10**6) - 1)
    with torch.no_grad():
        sequence = model.generate(**inputs, num_beams=num_beams, do_sample=False, max_new_tokens=budget)
    return sequence, True


def _stack(attentions: tuple[torch.Tensor, ...] | None) -> np.ndarray | None:
    """(L, H, R, K) from transformers' tuple of L (1, H, R, K) tensors, None when the model returned none."""
    if not attentions:
        return None
    return torch.cat(list(attentions), dim=0).float().numpy()


def _forward_arguments(module, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    accepted = inspect.signature(module.forward).parameters
    return {key: value for key, value in inputs.items() if key in accepted}


def collect(model, inputs: dict[str, torch.Tensor], decoder_ids: torch.Tensor | None) -> list[AttentionMap]:
    """Every layer and head of every kind of attention the model returns for one input."""
    with torch.no_grad():
        if decoder_ids is None:
            base = model.base_model  # the backbone: heads (classification, multiple choice) need not run
            out = base(**_forward_arguments(base, inputs), output_attentions=True, return_dict=True)
            kinds = [("self", out.attentions, "input", "input")]
        else:
            out = model(**_forward_arguments(model, inputs), decoder_input_ids=decoder_ids[:, :-1],
                        output_attentions=True, use_cache=False, return_dict=True)
            kinds = [("encoder", out.encoder_attentions, "source", "source"),
                     ("decoder", out.decoder_attentions, "target", "decoder_input"),
                     ("cross", out.cross_attentions, "target", "source")]
    maps = []
    for name, attentions, rows, columns in kinds:
        weights = _stack(attentions)
        if weights is not None:
            maps.append(AttentionMap(name, weights, rows, columns, list(range(weights.shape[0])),
                                     list(range(weights.shape[1]))))
    if not maps:
        raise AttentionInputError(f"{type(model).__name__} returned no attention weights (output_attentions=True): "
                                  "a model without attention has no map to draw")
    return maps


def _axes(inputs: dict[str, torch.Tensor], decoder_ids: torch.Tensor | None) -> dict[str, list[int]]:
    """The token ids of every axis: `input`, or `source`, `decoder_input` and `target`."""
    if decoder_ids is None:
        return {"input": inputs["input_ids"][0].tolist()}
    decoder = decoder_ids[0].tolist()
    return {"source": inputs["input_ids"][0].tolist(), "decoder_input": decoder[:-1], "target": decoder[1:]}


def tokens(tokenizer, inputs: dict[str, torch.Tensor], decoder_ids: torch.Tensor | None) -> dict[str, list[str]]:
    """The vocabulary entries of every axis (`_axes`), as the model reads them."""
    return {axis: tokenizer.convert_ids_to_tokens(ids) for axis, ids in _axes(inputs, decoder_ids).items()}


def token_labels(tokenizer, ids: list[int]) -> list[str]:
    """Readable text of each token: the tokenizer's decoding of it, spaces stripped (Ġ, ▁ and byte-level BPE's byte
    letters undone: `ĠcafÃ©` reads `café`; WordPiece keeps `##`), else the token itself (a lone `▁`). A character
    split over byte-level pieces labels each piece, numbered: `東 1/3`, `東 2/3`, `東 3/3`."""
    labels, start = [], 0
    while start < len(ids):
        end = start + 1  # a UTF-8 character has at most 4 bytes, so at most 4 pieces
        while "\ufffd" in tokenizer.decode(ids[start:end]) and end < min(start + 4, len(ids)):
            end += 1
        text = tokenizer.decode(ids[start:end]).strip()
        if end - start > 1 and "\ufffd" in text:  # no whole character: the piece alone
            end, text = start + 1, tokenizer.decode(ids[start:start + 1]).strip()
        if end - start == 1:
            labels.append(text or tokenizer.convert_ids_to_tokens(ids[start]))
        else:
            labels += [f"{text} {k}/{end - start}" for k in range(1, end - start + 1)]
        start = end
    return labels


def labels(tokenizer, inputs: dict[str, torch.Tensor], decoder_ids: torch.Tensor | None) -> dict[str, list[str]]:
    """The readable labels (`token_labels`) of every axis, for figures and pages."""
    return {axis: token_labels(tokenizer, ids) for axis, ids in _axes(inputs, decoder_ids).items()}


def _indices(requested: list[int] | None, available: list[int], flag: str, what: str, kind: str) -> list[int]:
    if requested is None:
        return available
    bad = [i for i in requested if i not in available]
    if bad:
        raise AttentionInputError(f"{flag} {','.join(map(str, bad))} out of range: the {kind} attention has "
                                  f"{len(available)} {what} (0-{len(available) - 1})")
    return requested


def select(maps: list[AttentionMap], layers: list[int] | None, heads: list[int] | None) -> list[AttentionMap]:
    """The maps cut to the requested layers and heads (all when None); an index a map lacks is an error."""
    chosen = []
    for m in maps:
        layer_ids = _indices(layers, m.layers, "--layers", "layers", m.name)
        head_ids = _indices(heads, m.heads, "--heads", "heads", m.name)
        weights = m.weights[np.ix_(layer_ids, head_ids)]  # (L', H', R, K)
        chosen.append(AttentionMap(m.name, weights, m.rows, m.columns, layer_ids, head_ids))
    return chosen


def is_seq2seq(model) -> bool:
    return bool(getattr(model.config, "is_encoder_decoder", False))


__all__ = [
    "AttentionInputError",
    "AttentionMap",
    "collect",
    "encode_text",
    "is_seq2seq",
    "labels",
    "load_attention_model",
    "load_attention_tokenizer",
    "max_positions",
    "select",
    "target_ids",
    "token_labels",
    "tokens",
]
