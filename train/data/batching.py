"""How the engine draws batches: the order of an epoch's examples, and one seed per example for the collator.

Exact resume and process-count independence rest on two facts. The data order of epoch `e` is a permutation
seeded by `(seed, e)`, the same on every process (`EpochSampler`). Each example's random choices (MLM masking)
come from a seed drawn from `(seed, epoch, example index)` (`SeededCollate`), so they never depend on which
other examples share its batch, on prefetching, or on the number of processes.

A stream (a `datasets.IterableDataset`: no length, read as training goes) is drawn by `StreamBatches` instead, in
its own order. Every process reads the stream's micro-batch of all processes together and keeps every `W`-th example
of it from its rank on, so that micro-batch holds the same examples whatever the number of processes `W` is, an
example's index is its position in the pass over the stream, and every process knows by itself where a pass ends: at
the first micro-batch the stream cannot fill. The next pass is the next epoch (`set_epoch`: the stream's shards, its
files, in an order seeded by the epoch). The stream's own `state_dict()`, taken between micro-batches, is its exact
position, the same on every process (each read is made in the training process, none ahead), from datasets 5.2.0
on (`stream_resume_problem`: older releases restore it inexactly). `check_stream` holds what a streamed run needs of
its recipe.

Reproducible and resumed runs: docs/reliability.md, "Reproducible runs"; streams: docs/training.md, "Streaming".
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from itertools import count, islice

import datasets
import torch
from packaging.version import Version
from torch.utils.data import Dataset, Sampler

from train.data.collators import check_batch_values


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
    against `limits` (`train.data.collators.value_limits`) on the CPU.

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


def is_stream(dataset) -> bool:
    """Whether `dataset` is a stream (`datasets.IterableDataset`), drawn by `StreamBatches`, not by index."""
    return isinstance(dataset, datasets.IterableDataset)


# the first datasets release checked to resume a stream exactly through what the commands build
# (tests/train/data/test_streaming.py); 4.3 to 4.5 skip examples after a batched map (huggingface/datasets#8145), and
# from 5.0 until huggingface/datasets#8308 was fixed a resumed stream's position stopped advancing (a second resume
# restarted it)
EXACT_STREAM_RESUME = "5.2.0"


def stream_resume_problem() -> str | None:
    """Why the installed `datasets` cannot resume a stream exactly (None: it can)."""
    if Version(datasets.__version__) >= Version(EXACT_STREAM_RESUME):
        return None
    return (f"the installed datasets {datasets.__version__} does not restore a stream's position exactly (it skips "
            f"examples after a map, huggingface/datasets#8145, or restarts the stream at a second resume, #8308); "
            f"resuming a streamed run needs datasets>={EXACT_STREAM_RESUME}")


class EmptyStreamError(ValueError):
    """A pass over the training stream that gave no micro-batch."""


class StreamBatches:
    """This process's micro-batches of `per_process` examples from `dataset`, a `datasets.IterableDataset` that this
    object iterates, sets the epoch of and restores (module docstring), collated by `collate` with each example's
    position in the pass as its index. Process `rank` of `processes` keeps the examples at positions `rank`,
    `rank + processes`, ... of every micro-batch of all processes. A pass begun from its start that ends before its
    first micro-batch raises `EmptyStreamError`."""

    def __init__(self, dataset: datasets.IterableDataset, per_process: int, collate: SeededCollate, rank: int = 0,
                 processes: int = 1):
        self.stream, self.per_process, self.collate, self.rank, self.processes = (dataset, per_process, collate, rank,
                                                                                  processes)

    def state_dict(self) -> dict:
        """The stream's position after the last micro-batch drawn (`datasets.IterableDataset.state_dict`)."""
        return self.stream.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Continue, in the pass `state` was taken in, from the micro-batch after it."""
        self.stream.load_state_dict(state)

    def batches(self, epoch: int, start: int = 0) -> Iterator[dict[str, torch.Tensor]]:
        """Pass `epoch`'s micro-batches from its `start`-th on (a resumed pass: the loaded state is at that one)."""
        self.stream.set_epoch(epoch)
        self.collate.epoch = epoch
        examples = iter(self.stream)
        every = self.per_process * self.processes
        for index in count(start):
            taken = list(islice(examples, every))
            if len(taken) < every:
                if index == 0:
                    self._refuse_empty(len(taken))
                return
            yield self.collate([(index * every + i, taken[i]) for i in range(self.rank, every, self.processes)])

    def _refuse_empty(self, read: int) -> None:
        if read == 0:
            raise EmptyStreamError("the training stream yielded no example")
        raise EmptyStreamError(
            f"the training stream yielded {read} examples, fewer than one micro-batch of "
            f"{self.per_process * self.processes} (per_device_train_batch_size {self.per_process} x {self.processes} "
            f"processes): give more data or a smaller per_device_train_batch_size")


__all__ = ["EXACT_STREAM_RESUME", "EmptyStreamError", "EpochSampler", "IndexedDataset", "SeededCollate",
           "StreamBatches", "example_seed", "is_stream", "stream_resume_problem"]
