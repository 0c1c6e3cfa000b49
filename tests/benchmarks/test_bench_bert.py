"""bert-base training step (forward, backward, AdamW step) at batch 8 x 128, 15% of positions masked, against
transformers' `BertForPreTraining` with the same config and the same weights (converted), on CPU or, where
available, GPU.

Lineage trains as `train.pretrain_bert` does, with `sparse_prediction` (the MLM head runs on the masked positions
only, as in the original BERT code); that row must not be slower. The dense row (the MLM head on every position,
as the reference) runs the same kernels as the reference, so it is only required to stay within timing noise.

Run: python -m pytest -m benchmark tests/benchmarks/test_bench_bert.py -s
"""

import pytest
import torch
import transformers
from conftest import preset
from timing import compare, device

from modeling import LineageBertForPreTraining
from modeling.conversion import to_transformers

BATCH, LENGTH = 8, 128


def batch(vocab_size: int, target: torch.device) -> dict[str, torch.Tensor]:
    input_ids = torch.randint(5, vocab_size, (BATCH, LENGTH))
    labels = torch.where(torch.rand(BATCH, LENGTH) < 0.15, input_ids, -100)
    return {
        "input_ids": input_ids.to(target),
        "attention_mask": torch.ones(BATCH, LENGTH, dtype=torch.long, device=target),
        "token_type_ids": (torch.arange(LENGTH) >= LENGTH // 2).long().expand(BATCH, -1).to(target),
        "labels": labels.to(target),
        "next_sentence_label": torch.randint(0, 2, (BATCH,), device=target),
    }


def training_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, inputs: dict, **options) -> None:
    optimizer.zero_grad(set_to_none=True)
    model(**inputs, **options).loss.backward()
    optimizer.step()


@pytest.mark.benchmark
@pytest.mark.parametrize("sparse_prediction, required", [(True, 1.0), (False, 0.95)])
def test_bert_base_training_step_is_not_slower(sparse_prediction, required):
    target = device()
    lineage = LineageBertForPreTraining(preset("bert-base")).to(target).train()
    reference = to_transformers(lineage).to(target).train()
    assert isinstance(reference, transformers.BertForPreTraining)
    assert reference.config._attn_implementation == lineage.config._attn_implementation == "sdpa"
    inputs = batch(lineage.config.vocab_size, target)
    ours = torch.optim.AdamW(lineage.parameters(), lr=1e-4)
    theirs = torch.optim.AdamW(reference.parameters(), lr=1e-4)
    ratio = compare(
        f"bert-base train step {BATCH}x{LENGTH} (sparse_prediction={sparse_prediction}) on {target.type}",
        lambda: training_step(lineage, ours, inputs, sparse_prediction=sparse_prediction),
        lambda: training_step(reference, theirs, inputs),
        repeats=5 if target.type == "cpu" else 20,
    )
    assert ratio >= required, f"Lineage vs transformers' BertForPreTraining: ratio {ratio:.3f} < {required}"
