"""Input checks of the Lineage models: raised before any kernel runs, naming the argument and the allowed range.

Value checks read a tensor back to the host (a sync on an accelerator) and would break a compiled graph: they run
eagerly only, and a training loop whose batches were checked on the CPU turns them off with `value_checks(False)`.
Shape checks run under compile too. Both switches (`value_checks`, `generating`) hold per thread and per asyncio
task (context variables): a server generating in one thread does not switch another thread's checks.
"""

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar

import torch

from .arguments import CACHE_NAME

_value_checks: ContextVar[bool] = ContextVar("lineage_value_checks", default=True)
_generating: ContextVar[bool] = ContextVar("lineage_generating", default=False)


@contextmanager
def _switched(switch: ContextVar[bool], value: bool) -> Iterator[None]:
    token = switch.set(value)
    try:
        yield
    finally:
        switch.reset(token)


@contextmanager
def value_checks(enabled: bool) -> Iterator[None]:
    """Run the checks that read tensor values (id and label ranges, a cache's length) only when `enabled`, inside the
    block; shape checks always run. For callers that checked the same values before the data reached the model."""
    with _switched(_value_checks, enabled):
        yield


def value_checks_enabled() -> bool:
    """Whether a check may read tensor values here: not inside a compiled graph, nor inside `value_checks(False)`."""
    return not torch.compiler.is_compiling() and _value_checks.get()


@contextmanager
def generating() -> Iterator[None]:
    """Inside `generate()`'s loop (`pretrained.LineageGenerationMixin`): a decoding step (`decoding_step`) reads no
    value back. Its token is the one the model chose, whose logits cover the vocabulary only, at the position
    `generate()` counted, whose limit was checked before the first step (`check_generation_length`); the prompt, the
    source and any step of several tokens are checked as everywhere. On an accelerator each read back waits for the
    device, once per token."""
    with _switched(_generating, True):
        yield


def decoding_step(inputs: torch.Tensor | None, past_length: int | torch.Tensor) -> bool:
    """Whether a forward of `inputs` (B, T[, C]) after `past_length` cached tokens is a decoding step of `generate()`:
    one new token per row over a cache holding tokens, inside `generating()`, eagerly. A static cache's length is a
    0-d tensor (reading it would be the read saved): its steps are checked, or compiled, where no check reads."""
    return (not torch.compiler.is_compiling() and _generating.get() and isinstance(past_length, int)
            and past_length > 0 and inputs is not None and inputs.dim() >= 2 and inputs.shape[1] == 1)


def unless_decoding(inputs: torch.Tensor | None, past_length: int | torch.Tensor):
    """A context in which the value checks of a forward's inputs are off if it is a decoding step (`decoding_step`)."""
    return value_checks(False) if decoding_step(inputs, past_length) else nullcontext()


def require(condition: torch.Tensor, message: str) -> None:
    """A check of input values: an assertion op inside a compiled graph; eagerly a `ValueError`, skipped inside
    `value_checks(False)`."""
    if torch.compiler.is_compiling():
        torch._assert_async(condition, message)
    elif value_checks_enabled() and not bool(condition):
        raise ValueError(message)


def check_token_ids(ids: torch.Tensor, upper: int, name: str, upper_name: str) -> None:
    """Require every id in `[0, upper)`."""
    if not value_checks_enabled() or ids.numel() == 0:
        return
    low, high = torch.stack(torch.aminmax(ids)).tolist()  # one read back (two with `min` and `max`)
    if low < 0 or high >= upper:
        bad = low if low < 0 else high
        raise ValueError(f"`{name}` must be in [0, {upper}) ({upper_name}={upper}), got {bad}.")


def check_ids_or_embeds(ids: torch.Tensor | None, embeds: torch.Tensor | None, vocab_size: int | None = None,
                        name: str = "input_ids", embeds_name: str = "inputs_embeds",
                        width: int | None = None) -> torch.Size:
    """Require exactly one of integer token ids (B, T), in `[0, vocab_size)` when that is given, or their floating-point
    embeddings (B, T, C), C = `width` when that is given; returns (B, T)."""
    if (ids is None) == (embeds is None):
        raise ValueError(f"Specify exactly one of `{name}` or `{embeds_name}`.")
    if ids is not None and (ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool):
        raise ValueError(f"`{name}` must hold integer token ids (torch.long or torch.int), got {ids.dtype}.")
    if embeds is not None and not embeds.is_floating_point():
        raise ValueError(f"`{embeds_name}` must be floating point (token embeddings), got {embeds.dtype}.")
    if embeds is not None and width is not None and embeds.shape[-1] != width:
        raise ValueError(f"`{embeds_name}` must have {width} features in its last dimension (the embedding width), "
                         f"got shape {tuple(embeds.shape)}.")
    shape = ids.shape if ids is not None else embeds.shape[:-1]
    if len(shape) != 2:
        raise ValueError(f"`{name}` must have shape (batch, length), got {tuple(shape)}.")
    if shape[1] == 0:  # an empty prompt: attention over no keys has nothing to normalise
        raise ValueError(f"`{name}` is empty (length 0): give at least one token, got shape {tuple(shape)}.")
    if ids is not None and vocab_size is not None:
        check_token_ids(ids, vocab_size, name, "vocab_size")
    return shape


def check_sequence_length(length: int, max_positions: int, name: str = "input_ids",
                          past_length: int | torch.Tensor = 0) -> None:
    """Positions counted from the cache length (`past_length`, a 0-d tensor for a static cache) must stay inside the
    position table. Callers that take `position_ids` check those instead: a packed row may be longer than the table."""
    if not value_checks_enabled():
        return
    past_length = int(past_length)
    if past_length + length > max_positions:
        name = f"{CACHE_NAME} + {name}" if past_length else name
        raise ValueError(
            f"`{name}` has {past_length + length} positions but `max_position_embeddings` is {max_positions}; "
            f"sequences must have at most {max_positions} tokens (truncate the input)."
        )


def check_generation_length(prompt_length: int, max_length: int, max_positions: int, *, name: str = "input_ids",
                            prompt: str = "prompt", window: str = "the context window") -> None:
    """`generate()`'s `max_length` (prompt and new tokens) inside the table of `max_positions`, checked before the first
    step (transformers only warns, and the model would fail part-way); `prompt`, `window` name what is counted."""
    if prompt_length > max_positions:
        raise ValueError(
            f"The {prompt} (`{name}`) has {prompt_length} tokens but {window} (`max_position_embeddings`) is "
            f"{max_positions}; {prompt}s must have at most {max_positions} tokens (truncate them)."
        )
    if max_length > max_positions:
        raise ValueError(
            f"Generating up to {max_length} tokens exceeds {window} (`max_position_embeddings`={max_positions}); "
            f"with a {prompt_length}-token {prompt} `max_new_tokens` must be in [1, {max_positions - prompt_length}] "
            f"(and `max_length` at most {max_positions})."
        )


def check_mask_shape(mask: torch.Tensor | None, shape: torch.Size, name: str = "attention_mask",
                     against: str = "input_ids") -> None:
    if mask is not None and mask.shape != shape:
        raise ValueError(f"`{name}` must have the shape of `{against}` {tuple(shape)}, got {tuple(mask.shape)}.")


def check_cached_mask(mask: torch.Tensor | None, batch: int, length: int, past_length: int | torch.Tensor, *,
                      name: str = "attention_mask", against: str = "input_ids") -> None:
    """A causal model's mask: (B, cached + new) over tokens, or a 4D mask that transformers prepared (a static
    cache's `generate()` builds one per step) of shape (B or 1, 1, new, >= cached + new). `past_length` is a 0-d
    tensor for a static cache, so the check is skipped under `torch.compile`."""
    if mask is None or not value_checks_enabled():
        return
    past_length = int(past_length)
    total = past_length + length
    if past_length:
        against = f"the {past_length} cached + {length} new tokens"
    if mask.dim() == 4:
        if mask.shape[0] not in (1, batch) or mask.shape[1] != 1 or mask.shape[2] != length or mask.shape[3] < total:
            rows = f"{batch} or 1" if batch > 1 else "1"
            raise ValueError(f"A 4D `{name}` must have shape ({rows}, 1, {length}, >= {total}) for {against}, "
                             f"got {tuple(mask.shape)}.")
        return
    check_mask_shape(mask, torch.Size((batch, total)), name, against)


def check_position_ids(position_ids: torch.Tensor, shape: torch.Size, limit: int) -> None:
    """`position_ids` of (B, T) tokens: (B, T) or (1, T), broadcast over the batch as transformers accepts them, inside
    the position table of `limit` rows (not the row length: a packed row may be longer than the table)."""
    batch, length = shape
    if position_ids.dim() != 2 or position_ids.shape[0] not in (1, batch) or position_ids.shape[1] != length:
        raise ValueError(f"`position_ids` must have shape ({batch} or 1, {length}) to match `input_ids`, "
                         f"got {tuple(position_ids.shape)}.")
    check_token_ids(position_ids, limit, "position_ids", "max_position_embeddings")


def check_inputs(config, device: torch.device, *, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None,
                 attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                 past_length: int | torch.Tensor = 0, token_type_ids: torch.Tensor | None = None,
                 encoder_hidden_states: torch.Tensor | None = None,
                 encoder_attention_mask: torch.Tensor | None = None) -> torch.Size:
    """The inputs of a decoder-only or encoder-only base model, as transformers accepts them: on `device`; ids or
    embeddings; a mask over cached and new tokens; positions inside the table; segment ids; `encoder_hidden_states` only
    with cross attention; no value of a decoding step of `generate()` (`decoding_step`). Returns (B, T)."""
    with unless_decoding(input_ids if input_ids is not None else inputs_embeds, past_length):
        check_devices(device, input_ids=input_ids, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                      token_type_ids=token_type_ids, position_ids=position_ids,
                      encoder_hidden_states=encoder_hidden_states)
        shape = check_ids_or_embeds(input_ids, inputs_embeds, config.vocab_size, width=config.hidden_size)
        check_cached_mask(attention_mask, shape[0], shape[1], past_length)
        if token_type_ids is not None:
            check_mask_shape(token_type_ids, shape, "token_type_ids")
            check_token_ids(token_type_ids, config.type_vocab_size, "token_type_ids", "type_vocab_size")
        if position_ids is None:
            check_sequence_length(shape[1], config.max_position_embeddings, past_length=past_length)
        else:
            check_position_ids(position_ids, shape, config.max_position_embeddings)
        if encoder_hidden_states is not None:
            if not getattr(config, "add_cross_attention", False):
                raise ValueError("`encoder_hidden_states` need a model built with `is_decoder=True` and "
                                 "`add_cross_attention=True`; this one has no cross attention.")
            check_mask_shape(encoder_attention_mask, encoder_hidden_states.shape[:2], "encoder_attention_mask",
                             "encoder_hidden_states")
        return shape


def check_label_ids(labels: torch.Tensor | None, upper: int, name: str = "labels", limit_name: str = "vocab_size"
                    ) -> None:
    """Require every label to be -100 (ignored) or in `[0, upper)`: a token id of the vocabulary (`vocab_size`; the
    extra rows of a padded vocabulary, `pad_vocab_to_multiple_of`, are no token), or a class (`check_class_labels`)."""
    if labels is None or not value_checks_enabled():
        return
    outside = (labels != -100) & ((labels < 0) | (labels >= upper))
    if bool(outside.any()):
        bad = int(labels[outside][0])
        raise ValueError(f"`{name}` must be -100 (ignored) or in [0, {upper}) ({limit_name}={upper}), got {bad}.")


def check_labels_shape(labels: torch.Tensor | None, shape: tuple[int, ...] | torch.Size, name: str = "labels") -> None:
    if labels is not None and tuple(labels.shape) != tuple(shape):
        raise ValueError(f"`{name}` must have shape {tuple(shape)} to match the logits, got {tuple(labels.shape)}.")


def check_lm_labels(labels: torch.Tensor | None, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None,
                    vocab_size: int, shift_labels: torch.Tensor | None = None) -> None:
    """A language-model head's `labels`, before the model runs: one per input token, (B, T) as `input_ids` (or
    `inputs_embeds` without their last dimension), each -100 (ignored) or a token id (`check_label_ids`). A causal
    LM's `shift_labels` (the targets already aligned with the positions) come with `labels` and are checked alike."""
    if shift_labels is not None and labels is None:
        raise ValueError("`shift_labels` (targets already aligned with the positions) come with `labels`: the loss is "
                         "computed when `labels` is given, against `shift_labels` when they are given too.")
    for name, value in (("labels", labels), ("shift_labels", shift_labels)):
        if value is None:
            continue
        if input_ids is not None or inputs_embeds is not None:
            check_labels_shape(value, input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1], name)
        check_label_ids(value, vocab_size, name)


def check_class_labels(labels: torch.Tensor | None, num_classes: int, name: str = "labels",
                       limit_name: str = "num_labels") -> None:
    """Class indices: every integer label -100 (ignored) or in `[0, num_classes)` (floating labels are regression or
    multi-label targets, not indices)."""
    if labels is not None and not labels.is_floating_point():
        check_label_ids(labels, num_classes, name, limit_name)


def check_sequence_labels(labels: torch.Tensor | None, batch: int, num_labels: int, problem_type: str | None) -> None:
    """A sequence classifier's labels: (B,) one class id or value per example, or (B, num_labels) multi-label targets;
    class indices in `[0, num_labels)` for single-label classification (the targets of regression, `num_labels` 1,
    and of multi-label classification are values, not indices)."""
    if labels is None:
        return
    if tuple(labels.shape) not in ((batch,), (batch, num_labels)):
        raise ValueError(f"`labels` must have shape ({batch},) (one class id or value per example) or "
                         f"({batch}, {num_labels}) (multi-label), got {tuple(labels.shape)}.")
    if labels.dim() == 1 and num_labels > 1 and problem_type in (None, "single_label_classification"):
        check_class_labels(labels, num_labels)


def check_choice_inputs(ids: torch.Tensor | None, embeds: torch.Tensor | None) -> tuple[int, int]:
    """Multiple choice: (batch, num_choices, length) `input_ids` or (batch, num_choices, length, C) `inputs_embeds`,
    the refusal naming the argument given; returns (batch, num_choices)."""
    if (ids is None) == (embeds is None):
        raise ValueError("Specify exactly one of `input_ids` or `inputs_embeds`.")
    name, given, rank, layout = (("input_ids", ids, 3, "(batch, num_choices, length)") if ids is not None else
                                 ("inputs_embeds", embeds, 4, "(batch, num_choices, length, hidden_size)"))
    if given.dim() != rank:
        raise ValueError(f"`{name}` must have shape {layout} for multiple choice, got {tuple(given.shape)}.")
    return given.shape[0], given.shape[1]


def check_devices(device: torch.device, **inputs: torch.Tensor | None) -> None:
    """Every given input on the device of the weights that read it (`device`), checked before a kernel fails on it;
    weights not materialised yet (`meta`, loaded by a hook at call time) are not compared."""
    if device.type == "meta":
        return
    for name, tensor in inputs.items():
        if tensor is not None and tensor.device != device:
            raise ValueError(f"`{name}` is on {tensor.device} but the model is on {device}; move the inputs to the "
                             f"model's device (`{name}.to({str(device)!r})`).")


def check_generation_config(generation_config) -> None:
    """Generation settings transformers would only fail on deep inside (`num_beams=0` divides by zero in beam
    search)."""
    beams = generation_config.num_beams
    if isinstance(beams, bool) or not isinstance(beams, int) or beams < 1:
        raise ValueError(f"`num_beams` must be a positive integer (1: no beam search), got {beams!r}.")


__all__ = ["check_cached_mask", "check_choice_inputs", "check_class_labels", "check_devices",
           "check_generation_config", "check_generation_length", "check_ids_or_embeds", "check_inputs",
           "check_label_ids", "check_labels_shape", "check_lm_labels", "check_mask_shape", "check_position_ids",
           "check_sequence_labels", "check_sequence_length", "check_token_ids", "decoding_step", "generating",
           "require", "unless_decoding", "value_checks", "value_checks_enabled"]
