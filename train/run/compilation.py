"""`torch.compile` for training: the recipe keys `compile` and `compile_mode`.

`compile_model` proves that this torch can compile for the training device, then compiles the model in place
(`nn.Module.compile`: same class, parameters and `state_dict` keys, so checkpoints and the published folder are an
uncompiled run's); `check_bounded_shapes` refuses, before any step, batches whose shapes `reduce-overhead` could not
bound. docs/performance.md ("Compilation", "Static shapes and host reads").
"""

from __future__ import annotations

import functools
import math

import torch
from torch import nn

from train.run.recipes import RecipeError


@functools.cache
def compiler_error(device_type: str = "cpu") -> str | None:
    """Why `torch.compile` does not work on `device_type` in this process (the probe's exception), or None."""
    try:
        probe = torch.compile(lambda x: torch.sin(x) * 2 + 1, backend="inductor", fullgraph=True)
        value = probe(torch.zeros(4, device=device_type)).cpu()
        if not torch.equal(value, torch.ones(4)):
            return f"the compiled probe computed {value.tolist()} instead of [1.0, 1.0, 1.0, 1.0]"
    except Exception as error:  # noqa: BLE001 (any toolchain failure: no C++ compiler, no Triton, ...)
        return f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    return None


def check_compiler(device_type: str = "cpu") -> None:
    """Raise a `RecipeError` naming the recipe key `compile` when this torch cannot compile for `device_type`."""
    error = compiler_error(device_type)
    if error is not None:
        raise RecipeError(f"recipe key 'compile' is true but torch.compile does not work on {device_type} with this "
                          f"torch {torch.__version__} ({error}); set compile: false or install a working compiler "
                          "toolchain (a C++ compiler for CPU, Triton for CUDA)")


def compile_model(model: nn.Module, enabled: bool, mode: str | None = None, device_type: str = "cpu") -> nn.Module:
    """Compile `model` in place when `enabled` (the recipe's `compile`), after checking the toolchain for the device
    it will train on; returns it."""
    if not enabled:
        return model
    check_compiler(device_type)
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    torch._dynamo.config.allow_rnn = True
    model.compile(mode=mode)
    return model


def check_bounded_shapes(compile_mode: str | None, collate_fn, dataset) -> None:
    """Raise a `RecipeError` when CUDA graphs (`reduce-overhead`) would meet a batch length per distinct example length:
    a padding collator without `pad_to_multiple_of` over training rows of several lengths."""
    if compile_mode != "reduce-overhead" or getattr(collate_fn, "pad_to_multiple_of", 0) is not None:
        return
    lengths = getattr(dataset, "row_lengths", None)
    if lengths is None:
        lengths = {_longest(row[key]) for row in dataset for key in ("input_ids", "labels") if key in row}
    if len(lengths) > 1:
        low, high = min(lengths), max(lengths)
        raise RecipeError(
            f"recipe key 'compile_mode' is 'reduce-overhead' (a CUDA graph recorded per batch shape) but batches are "
            f"padded to their longest example and the training rows have {len(lengths)} lengths ({low} to {high} "
            f"tokens); set 'pad_to_multiple_of' (e.g. 64: at most {math.ceil(high / 64)} lengths) to bound the shapes")


def _longest(sequence) -> int:
    """The padded length a row asks for: its length, or its longest choice (multiple choice)."""
    if len(sequence) and isinstance(sequence[0], (list, tuple)):
        return max(len(choice) for choice in sequence)
    return len(sequence)


__all__ = ["check_bounded_shapes", "check_compiler", "compile_model", "compiler_error"]
