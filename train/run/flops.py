"""A model's training FLOPs and a GPU's dense peak: what MFU (model FLOPs utilisation) is computed from.

FLOPs of one forward + backward, as nanoGPT's `estimate_mfu` and llm.c count them (PaLM appendix B), for B sequences
of T positions: `6 * N * B * T + 12 * A * C * T * B * T`, N the parameters entering a matrix product once per
position (embedding lookups excluded, a tied output projection included), A the attention sublayers a position
passes, C the hidden size; causal masking is not discounted; for seq2seq, T is both lengths. MFU divides the achieved
FLOP/s by `PEAK_TFLOPS`. The engine's log and `lineage benchmark` both read them: docs/training.md ("Throughput").
"""

from __future__ import annotations

import torch
from torch import nn

# (substring of torch.cuda.get_device_name(), dense peak TFLOP/s); the first match wins, so variants come first
PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H100 NVL", {"bf16": 835.0, "tf32": 417.5, "fp32": 60.0}),
    ("H100 PCIe", {"bf16": 756.0, "tf32": 378.0, "fp32": 51.2}),
    ("H100", {"bf16": 989.4, "tf32": 494.7, "fp32": 66.9}),  # SXM
    ("H200", {"bf16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("A100", {"bf16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("L40S", {"bf16": 362.1, "tf32": 183.0, "fp32": 91.6}),
    ("L4", {"bf16": 121.0, "tf32": 60.0, "fp32": 30.3}),
)
_HALF_PRECISION = ("bf16", "fp16")  # the same dense tensor-core peak on every GPU of the table


def matmul_parameters(model: nn.Module) -> int:
    """N: the parameters used in a matrix product once per position (all but lookup-only embedding tables)."""
    output = model.get_output_embeddings()
    tied = {id(output.weight)} if output is not None else set()
    lookups = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)} - tied
    return sum(p.numel() for p in model.parameters() if id(p) not in lookups)


def attention_layers(config) -> int:
    """A: attention sublayers a position passes (an encoder-decoder block pair has three: encoder self-attention,
    decoder self- and cross-attention); 0 for the RNN family, whose additive scores are not counted."""
    if config.model_type == "lineage-rnn":
        return 0
    return config.num_hidden_layers * (3 if config.is_encoder_decoder else 1)


def training_flops(parameters: int, attention: int, hidden_size: int, batch: int, length: int) -> int:
    """FLOPs of one forward + backward over `batch` x `length` positions (the module docstring's formula)."""
    return 6 * parameters * batch * length + 12 * attention * hidden_size * length * batch * length


def flops_per_token(model: nn.Module, seq_length: int) -> int:
    """Training FLOPs of one token of a sequence of `seq_length`: `6 * N + 12 * A * C * seq_length`."""
    if seq_length < 1:
        raise ValueError(f"seq_length must be at least 1, got {seq_length}")
    config = model.config
    sequence = training_flops(matmul_parameters(model), attention_layers(config), config.hidden_size, 1, seq_length)
    return sequence // seq_length


def peak_tflops(device: torch.device, mixed_precision: str, override: float | None = None) -> float | None:
    """`override` when given, else the device's dense peak TFLOP/s under `mixed_precision` ("bf16" or "fp16"; "no":
    fp32, TF32 where `torch.get_float32_matmul_precision()` allows it), or None (a CPU or a GPU not in the table)."""
    if override is not None:
        return override
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    if mixed_precision in _HALF_PRECISION:
        column = "bf16"
    else:
        column = "fp32" if torch.get_float32_matmul_precision() == "highest" else "tf32"
    return next((peaks[column] for pattern, peaks in PEAK_TFLOPS if pattern in name), None)


def mfu(tokens_per_s: float, flops_per_token: float, peak_tflops: float) -> float:
    """The fraction of `peak_tflops` that `tokens_per_s` tokens of `flops_per_token` FLOPs each achieve."""
    return tokens_per_s * flops_per_token / (peak_tflops * 1e12)


__all__ = ["PEAK_TFLOPS", "attention_layers", "flops_per_token", "matmul_parameters", "mfu", "peak_tflops",
           "training_flops"]
