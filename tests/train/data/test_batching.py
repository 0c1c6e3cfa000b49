"""Batch drawing: the seeded epoch order and per-example collation seeds, which exact resume and process-count
independence rest on."""

import torch

from train.data.batching import (
    EpochSampler,
    IndexedDataset,
    SeededCollate,
    example_seed,
)


def test_epoch_order_is_a_permutation_seeded_by_seed_and_epoch():
    sampler = EpochSampler(50, seed=3)
    first = list(sampler)
    assert sorted(first) == list(range(50)) and first == list(EpochSampler(50, seed=3))
    sampler.set_epoch(1)
    assert list(sampler) != first and sorted(sampler) == list(range(50))
    assert list(EpochSampler(50, seed=3, shuffle=False)) == list(range(50))


def test_collator_gets_one_seed_per_example_from_seed_epoch_and_index():
    calls = []

    def collate(features, seeds):
        calls.append((features, seeds))
        return {"x": torch.tensor(features)}

    collate_fn = SeededCollate(collate, seed=7)
    dataset = IndexedDataset([10, 11, 12, 13])
    batch = collate_fn([dataset[2], dataset[0]])
    assert batch["x"].tolist() == [12, 10]
    assert calls[-1][1] == [example_seed(7, 0, 2), example_seed(7, 0, 0)]
    collate_fn([dataset[0]])  # the same example alone: the same seed
    assert calls[-1][1] == [example_seed(7, 0, 0)]
    collate_fn.epoch = 1
    collate_fn([dataset[0]])
    assert calls[-1][1] != [example_seed(7, 0, 0)]
    assert len({example_seed(7, e, i) for e in range(-1, 3) for i in range(100)}) == 400


def test_collator_without_seeds_runs_under_the_first_examples_seed_and_leaves_the_global_stream():
    def collate(features):
        return {"noise": torch.rand(len(features))}

    collate_fn = SeededCollate(collate, seed=7)
    torch.manual_seed(0)
    expected_next = torch.rand(1)
    torch.manual_seed(0)
    first = collate_fn([(3, "a"), (5, "b")])["noise"]
    assert torch.equal(torch.rand(1), expected_next)  # collation does not move the global generator
    assert torch.equal(collate_fn([(3, "a"), (9, "c")])["noise"][:1], first[:1])
