"""Interleaved timing of two implementations: median of several repetitions, ratio reference / lineage.

A ratio >= 1.0 means Lineage is not slower. Both callables run alternately so that machine noise (other
processes, frequency scaling) hits both alike; each gets warm-up calls first. Timing uses every core (the
shared test setup pins one thread for the tiny test models).
"""

import os
import statistics
from collections.abc import Callable

import torch

from train.analysis.throughput import interleaved_seconds


def compare(label: str, lineage: Callable[[], object], reference: Callable[[], object], repeats: int = 5,
            warmup: int = 1) -> float:
    """Print and return median(reference) / median(lineage) over `repeats` interleaved runs."""
    torch.set_num_threads(os.cpu_count() or 1)
    for _ in range(warmup):
        lineage()
        reference()
    seconds = interleaved_seconds({"lineage": lineage, "reference": reference}, repeats, device())
    ours, theirs = seconds["lineage"], seconds["reference"]
    ratio = statistics.median(theirs) / statistics.median(ours)
    print(f"{label}: lineage {statistics.median(ours) * 1e3:.1f} ms, reference {statistics.median(theirs) * 1e3:.1f} "
          f"ms, ratio reference/lineage {ratio:.3f} (median of {repeats})")
    return ratio


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
