"""How the engine draws batches: the order of an epoch's examples, and one seed per example for the collator.

Exact resume and process-count independence rest on two facts. The data order of epoch `e` is a permutation
seeded by `(seed, e)`, the same on every process (`EpochSampler`). Each example's random choices (MLM masking)
come from a seed drawn from `(seed, epoch, example index)` (`SeededCollate`), so they never depend on which
other examples share its batch, on prefetching, or on the number of processes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
from torch.utils.data import Dataset, Sampler

from train.core.collators import check_batch_values


def example_seed(seed: int, epoch: int, index: int) -> int:
    """The seed of example `index`'s random choices in `epoch` (`epoch = -1` for evaluation)."""
    return (seed * 1_000_003 + (epoch + 1) * 7_919 + index * 104_729) % 2**62


class EpochSampler(Sampler):
    """A permutation seeded by (seed, epoch); the same on every process, so sharding is deterministic."""

    def __init__(self, size: int, seed: int, shuffle: bool = True):
        self.size, self.seed, self.shuffle, self.epoch = size, seed, shuffle, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        if not self.shuffle:
            return iter(range(self.size))
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return iter(torch.randperm(self.size, generator=generator).tolist())


class IndexedDataset(Dataset):
    """`dataset[i]` as `(i, example)`, so the collator knows which example it collates."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        return index, self.dataset[index]


class SeededCollate:
    """Calls the collator once per batch with one seed per example (`example_seed`), then checks the batch's values
    against `limits` (`train.core.collators.value_limits`) on the CPU.

    A collator that takes no `seeds` argument (one from outside Lineage) runs under the seed of the batch's first
    example instead: reproducible, but its random choices then depend on the batch's composition.
    """

    def __init__(self, collate_fn: Callable, seed: int, limits: dict[str, tuple[int, str]] | None = None):
        self.collate_fn, self.seed, self.epoch, self.limits = collate_fn, seed, 0, limits or {}
        self.takes_seeds = "seeds" in inspect.signature(collate_fn).parameters

    def __call__(self, items: list[tuple[int, dict]]) -> dict[str, torch.Tensor]:
        seeds = [example_seed(self.seed, self.epoch, index) for index, _ in items]
        features = [example for _, example in items]
        if self.takes_seeds:
            batch = self.collate_fn(features, seeds=seeds)
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seeds[0])
                batch = self.collate_fn(features)
        check_batch_values(batch, self.limits)
        return batch


__all__ = ["EpochSampler", "IndexedDataset", "SeededCollate", "example_seed"]
