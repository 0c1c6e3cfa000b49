"""Training and generation throughput of a model, and of its transformers reference: what `train.benchmark` runs.

Inputs, interleaved timing, peak memory, a profiled step and the table row; the FLOPs of a step and the GPU peaks
come from `train.run.flops`, as the training log's MFU does. The command and its figures: docs/performance.md,
"`lineage benchmark`".
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

from train.run.flops import mfu

TASKS = {"causal-lm": "AutoModelForCausalLM", "mlm": "AutoModelForMaskedLM", "seq2seq": "AutoModelForSeq2SeqLM"}
TASK_FAMILIES = {"causal-lm": ("lineage-gpt",), "mlm": ("lineage-bert",),
                 "seq2seq": ("lineage-transformer", "lineage-rnn")}


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


PROFILE_TOP = 12  # kernels (CUDA) or operators (CPU) a profile lists


def profile_step(run: Callable[[], object], device: torch.device, top: int = PROFILE_TOP) -> dict:
    """One more call of `run` (warm: compiled already) under torch.profiler. On CUDA: its kernel launches, the
    milliseconds the GPU ran them against the call's wall milliseconds (profiled: a little slower than timed; the rest
    is the GPU waiting for the host) and the `top` kernels by time; on a CPU the same of its aten operators by self
    time. Each listed as [name, calls, milliseconds]."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    synchronize(device)
    with profile(activities=activities) as profiler:
        start = time.perf_counter()
        run()
        synchronize(device)
        wall = time.perf_counter() - start
    if cuda:
        events = [e for e in profiler.key_averages() if e.device_type == DeviceType.CUDA]
        micros = [e.self_device_time_total for e in events]
    else:
        events = [e for e in profiler.key_averages() if e.key.startswith("aten::")]
        micros = [e.self_cpu_time_total for e in events]
    ranked = sorted(zip(events, micros), key=lambda pair: -pair[1])
    return {"wall_ms": wall * 1e3, "launches": sum(e.count for e in events), "busy_ms": sum(micros) / 1e3,
            "top": [[e.key, e.count, round(us / 1e3, 3)] for e, us in ranked[:top]]}


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
            row["mfu"] = mfu(row["tokens_per_s"], flops / tokens, peak)
    return row


__all__ = ["PROFILE_TOP", "TASKS", "TASK_FAMILIES", "TrainingStep", "interleaved_seconds", "memory_measure",
           "peak_memory_mib", "precision", "profile_step", "summarize", "synchronize", "training_batch"]
