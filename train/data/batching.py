"""How the engine draws batches: the order of an epoch's examples, and one seed per example for the collator.

The order of epoch `e` is a permutation seeded by `(seed, e)`, the same on every process (`EpochSampler`); each
example's random choices come from a seed of `(seed, epoch, example index)` (`SeededCollate`), never from its batch.
A stream is drawn by `StreamBatches` in one order for any process count (docs/scaling.md, "Streams divided by
shard"); `recipes.check_stream` holds what a streamed run needs.
Reproducible and resumed runs: docs/reliability.md, "Reproducible runs"; streams: docs/training.md, "Streaming".
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator
from itertools import count

import datasets
import numpy as np
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
    against `limits` on the CPU. A collator without a `seeds` argument runs under the batch's first example's seed."""

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


MAX_LANES = 16  # lanes read side by side at most, unless processes need more: each holds one group of documents


def stream_lanes(shards: int, processes: int = 1) -> int:
    """How many lanes a stream of `shards` shards is read in: the largest divisor of `shards` up to `MAX_LANES` (the
    same for any process count that divides it), raised to a multiple of `processes` when they divide the shards."""
    lanes = max(d for d in range(1, min(shards, MAX_LANES) + 1) if shards % d == 0)
    return math.lcm(lanes, processes) if shards % processes == 0 else lanes


class StreamBatches:
    """This process's micro-batches of `per_process` examples from `dataset`, a `datasets.IterableDataset` that this
    object iterates, sets the epoch of and restores, collated by `collate`. Process `rank` of `processes` holds
    positions `rank`, `rank + processes`, ... of every micro-batch; `peers` (`all(flag)`, `gather(value)`) is needed
    when `processes` divides the shards; `position` (a `state_dict()`) is where a resumed run continues. A pass that
    ends before its first micro-batch raises `EmptyStreamError`."""

    def __init__(self, dataset: datasets.IterableDataset, per_process: int, collate: SeededCollate, rank: int = 0,
                 processes: int = 1, peers=None, position: dict | None = None):
        self.per_process, self.collate, self.rank, self.processes, self.peers = (per_process, collate, rank,
                                                                                 processes, peers)
        self.shards = dataset.n_shards
        self.by_shard = processes > 1 and self.shards % processes == 0
        if self.by_shard and peers is None:
            raise ValueError(f"{processes} processes reading {self.shards} shards by shard need peers to agree with")
        lanes = stream_lanes(self.shards, processes)
        self.lanes = [dataset.shard(lanes, i, contiguous=False) for i in range(lanes)] if lanes > 1 else [dataset]
        self.epoch, self.taken, self.positions, self.reading, self.ended = 0, [0] * lanes, [None] * lanes, {}, set()
        if position is not None:
            self.load_state_dict(position)

    def describe(self) -> str:
        """How this stream is divided between the processes, and why (the run's log line)."""
        shards, processes, lanes = self.shards, self.processes, len(self.lanes)
        read = f"read in {lanes} lanes side by side" if lanes > 1 else "read as one lane"
        if self.by_shard:
            return (f"stream: {shards} shards divided between {processes} processes by shard, {shards // processes} "
                    f"each (every byte is read once), {read}")
        if processes == 1:
            return f"stream: {shards} shard{'s' if shards > 1 else ''}, {read}"
        return (f"stream: every process reads all {shards} shard{'s' if shards > 1 else ''} and keeps one example in "
                f"{processes}, {read} ({shards} is no multiple of {processes} processes: a stream of a multiple of "
                f"{processes} files is divided by shard)")

    def state_dict(self) -> dict:
        """The position after the last micro-batch drawn: the pass, and each lane's examples taken and its stream
        position (`datasets.IterableDataset.state_dict`; None: not begun); gathered from every process by shard."""
        known = {lane: (self.taken[lane], self.lanes[lane].state_dict() if lane in self.reading
                        else self.positions[lane]) for lane in self._mine()}
        for values in self.peers.gather(known) if self.by_shard else [known]:
            for lane, (taken, position) in values.items():
                self.taken[lane], self.positions[lane] = taken, position
        return {"epoch": self.epoch, "lanes": len(self.lanes), "taken": list(self.taken),
                "positions": list(self.positions)}

    def load_state_dict(self, state: dict) -> None:
        """Continue, in the pass `state` was taken in, from the micro-batch after it."""
        if state.get("lanes") != len(self.lanes):
            saved = f"in {state['lanes']} lanes" if "lanes" in state else "as one stream, by an earlier release"
            raise ValueError(f"the checkpoint's stream position was saved {saved}; this launch reads the stream's "
                             f"{self.shards} shards in {len(self.lanes)} lanes ({self.processes} "
                             f"process{'es' if self.processes > 1 else ''}): resume with the number of processes "
                             f"that wrote it")
        self.epoch, self.taken, self.positions = state["epoch"], list(state["taken"]), list(state["positions"])
        for lane, position in zip(self.lanes, self.positions):
            if position is not None:
                lane.load_state_dict(position)

    def batches(self, epoch: int, start: int = 0) -> Iterator[dict[str, torch.Tensor]]:
        """Pass `epoch`'s micro-batches from its `start`-th on (a resumed pass: the loaded state is at that one)."""
        self._begin(epoch, start)
        every = self.per_process * self.processes
        wanted = self.per_process if self.by_shard else every
        for index in count(start):
            taken = self._read(wanted)
            full = self.peers.all(len(taken) == wanted) if self.by_shard else len(taken) == wanted
            if not full:
                if index == 0:
                    self._refuse_empty(len(taken))
                return
            mine = taken if self.by_shard else taken[self.rank::self.processes]
            yield self.collate([(index * every + self.rank + i * self.processes, example)
                                for i, example in enumerate(mine)])

    def _begin(self, epoch: int, start: int) -> None:
        if start == 0:
            self.taken, self.positions = [0] * len(self.lanes), [None] * len(self.lanes)
        self.epoch, self.collate.epoch, self.reading, self.ended = epoch, epoch, {}, set()
        for lane in self.lanes:
            lane.set_epoch(epoch)

    def _mine(self) -> list[int]:
        """The lanes this process reads in this pass, in turn order (the lanes in an order seeded by the epoch)."""
        order = np.random.default_rng(self.epoch).permutation(len(self.lanes)).tolist() if self.epoch else list(
            range(len(self.lanes)))
        return order[self.rank::self.processes] if self.by_shard else order

    def _read(self, wanted: int) -> list[dict]:
        """Up to `wanted` examples from this process's lanes in turn: the next from the first lane, in turn order,
        that has given the fewest and has not ended."""
        taken, mine = [], self._mine()
        while len(taken) < wanted:
            running = [lane for lane in mine if lane not in self.ended]
            if not running:
                break
            lane = min(running, key=self.taken.__getitem__)
            if lane not in self.reading:
                self.reading[lane] = iter(self.lanes[lane])
            example = next(self.reading[lane], None)
            if example is None:
                self.ended.add(lane)
            else:
                self.taken[lane] += 1
                taken.append(example)
        return taken

    def _refuse_empty(self, read: int) -> None:
        every = self.per_process * self.processes
        batch = (f"one micro-batch of {every} (per_device_train_batch_size {self.per_process} x {self.processes} "
                 f"processes): give more data or a smaller per_device_train_batch_size")
        if self.by_shard:
            reads = self.peers.gather(read)  # every process refuses, with the same words
            short = next(rank for rank, n in enumerate(reads) if n < self.per_process)
            raise EmptyStreamError(f"the training stream's {self.shards} shards, divided between {self.processes} "
                                   f"processes, gave process {short} {reads[short]} examples of the "
                                   f"{self.per_process} it needs for {batch}")
        if read == 0:
            raise EmptyStreamError("the training stream yielded no example")
        raise EmptyStreamError(f"the training stream yielded {read} examples, fewer than {batch}")


__all__ = ["EXACT_STREAM_RESUME", "MAX_LANES", "EmptyStreamError", "EpochSampler", "IndexedDataset", "SeededCollate",
           "StreamBatches", "example_seed", "is_stream", "stream_lanes", "stream_resume_problem"]
