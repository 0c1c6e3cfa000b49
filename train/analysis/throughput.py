"""Training and generation throughput of a model, and of its transformers reference: what `train.benchmark` runs.

FLOPs of a training step (forward + backward), as nanoGPT's `estimate_mfu` and llm.c count them (PaLM appendix B),
for B sequences of T positions: `6 * N * B * T + 12 * A * C * T * B * T`, N the parameters entering a matrix product
once per position (embedding lookups excluded, a tied output projection included), A the attention sublayers a
position passes, C the hidden size; causal masking is not discounted; for seq2seq, T is both lengths. MFU divides by
`PEAK_TFLOPS` (dense tensor-core peaks; TF32 where `torch.get_float32_matmul_precision()` allows it); none on a CPU.
The command and its figures: docs/performance.md, "`lineage benchmark`".
"""

from __future__ import annotations

import contextlib
import dataclasses
import resource
import statistics
import time
from collections.abc import Callable

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

TASKS = {"causal-lm": "AutoModelForCausalLM", "mlm": "AutoModelForMaskedLM", "seq2seq": "AutoModelForSeq2SeqLM"}
TASK_FAMILIES = {"causal-lm": ("lineage-gpt",), "mlm": ("lineage-bert",),
                 "seq2seq": ("lineage-transformer", "lineage-rnn")}


# ------------------------------------------------------------------------------------------------ FLOPs and peaks


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


def peak_tflops(device: torch.device, mixed_precision: str) -> float | None:
    """The device's dense peak TFLOP/s under `mixed_precision` ("bf16", or "no": fp32), or None (a CPU or a GPU not
    in the table)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    if mixed_precision == "bf16":
        column = "bf16"
    else:
        column = "fp32" if torch.get_float32_matmul_precision() == "highest" else "tf32"
    return next((peaks[column] for pattern, peaks in PEAK_TFLOPS if pattern in name), None)


# ------------------------------------------------------------------------------------------------ inputs


def training_batch(config, task: str, batch: int, length: int, device: torch.device, seed: int = 0) -> dict:
    """Random token ids of the full length (no padding); causal LM: labels = inputs; MLM: 15% of the positions
    labelled; seq2seq: a source and a target of `length` tokens each."""
    generator = torch.Generator().manual_seed(seed)
    low = 5 if config.vocab_size > 10 else 0  # above the special tokens of the presets

    def ids() -> torch.Tensor:
        return torch.randint(low, config.vocab_size, (batch, length), generator=generator)

    input_ids = ids()
    if task == "causal-lm":
        inputs = {"input_ids": input_ids, "labels": input_ids}
    elif task == "mlm":
        chosen = torch.rand(batch, length, generator=generator) < 0.15
        chosen[:, 0] = True  # at least one labelled position per row
        inputs = {"input_ids": input_ids, "labels": input_ids.masked_fill(~chosen, -100)}
    else:
        inputs = {"input_ids": input_ids, "labels": ids()}
    return {name: tensor.to(device) for name, tensor in inputs.items()}


# ------------------------------------------------------------------------------------------------ timing


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_seconds(runs: dict[str, Callable[[], object]], repeats: int, device: torch.device) -> dict[str, list]:
    """Seconds per call of each callable, `repeats` rounds in which each runs once in turn (machine noise then hits
    all alike)."""
    seconds = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            synchronize(device)
            start = time.perf_counter()
            run()
            synchronize(device)
            seconds[name].append(time.perf_counter() - start)
    return seconds


def peak_memory_mib(device: torch.device, run: Callable[[], object]) -> float:
    """Peak memory of `run()` in MiB: on CUDA `max_memory_allocated` during the call; on a CPU the process's peak
    resident set size so far (`ru_maxrss`, which holds every model built before)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        run()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) / 2**20
    run()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # KiB on Linux


def memory_measure(device: torch.device) -> str:
    return "cuda max_memory_allocated" if device.type == "cuda" else "process peak RSS"


def precision(device: torch.device, mixed_precision: str):
    """bf16: autocast, as the engine's `mixed_precision: bf16`; no: nothing (fp32)."""
    if mixed_precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@dataclasses.dataclass
class TrainingStep:
    """One model's training step: zero the gradients, forward with labels, backward, fused AdamW step."""

    model: nn.Module
    batch: dict
    device: torch.device
    mixed_precision: str  # "no" or "bf16", as the recipes spell it
    options: dict = dataclasses.field(default_factory=dict)  # forward keywords: sparse_prediction, unpad_inputs

    def __post_init__(self):
        self.model.train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=True)

    def __call__(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        with precision(self.device, self.mixed_precision):
            loss = self.model(**self.batch, **self.options).loss
        loss.backward()
        self.optimizer.step()


def summarize(seconds: list[float], tokens: int, flops: int | None, peak: float | None, memory: float) -> dict:
    """A table row from per-call seconds: median ms, tokens/s, achieved TFLOP/s and MFU (when a peak is known)."""
    median = statistics.median(seconds)
    row = {"ms_per_step": median * 1e3, "tokens_per_s": tokens / median, "peak_memory_mib": memory,
           "ms_each": [s * 1e3 for s in seconds]}  # the spread, to judge a shared machine's noise
    if flops is not None:
        row["tflops"] = flops / median / 1e12
        if peak is not None:
            row["mfu"] = row["tflops"] / peak
    return row


__all__ = ["PEAK_TFLOPS", "TASKS", "TASK_FAMILIES", "TrainingStep", "attention_layers", "interleaved_seconds",
           "matmul_parameters", "memory_measure", "peak_memory_mib", "peak_tflops", "precision", "summarize",
           "synchronize", "training_batch", "training_flops"]
