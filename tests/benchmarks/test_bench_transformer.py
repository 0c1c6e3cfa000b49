"""transformer-base against transformers' `MarianMTModel` with the same config and the same weights (converted),
on CPU or, where available, GPU. Rows: a training step (forward, backward, Adam step) at batch 8 x 64 source /
64 target tokens, and beam-4 generation (length penalty 0.6) of exactly 64 tokens for 8 sources of 64 tokens.

Run: python -m pytest -m benchmark tests/benchmarks/test_bench_transformer.py -s

Marian lays its sinusoids out sin|cos where the preset interleaves them; the layout is a table lookup and costs
the same, so the Lineage side uses the split layout to share Marian's weights exactly.
"""

import pytest
import torch
import transformers
from conftest import preset
from timing import compare, device

from modeling import LineageTransformerForConditionalGeneration
from modeling.conversion import to_transformers

BATCH, SOURCE, TARGET = 8, 64, 64


def models(target: torch.device) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    lineage = LineageTransformerForConditionalGeneration(preset("transformer-base", sinusoidal_layout="split"))
    reference = to_transformers(lineage)
    assert isinstance(reference, transformers.MarianMTModel)
    assert reference.config._attn_implementation == lineage.config._attn_implementation == "sdpa"
    return lineage.to(target), reference.to(target)


def sources(vocab_size: int, target: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    input_ids = torch.randint(4, vocab_size, (BATCH, SOURCE))
    attention_mask = torch.ones(BATCH, SOURCE, dtype=torch.long)
    attention_mask[1::2, SOURCE * 3 // 4:] = 0  # every other source is padded: the mask is not trivial
    return input_ids.masked_fill(attention_mask == 0, 0).to(target), attention_mask.to(target)


def training_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, inputs: dict) -> None:
    optimizer.zero_grad(set_to_none=True)
    model(**inputs).loss.backward()
    optimizer.step()


@pytest.mark.benchmark
def test_transformer_base_training_step_is_not_slower():
    target = device()
    lineage, reference = models(target)
    lineage.train(), reference.train()
    input_ids, attention_mask = sources(lineage.config.vocab_size, target)
    labels = torch.randint(4, lineage.config.vocab_size, (BATCH, TARGET), device=target)
    # the same decoder inputs and loss on both sides: Marian's loss has no label smoothing
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels,
              "decoder_input_ids": lineage.prepare_decoder_input_ids_from_labels(labels)}
    lineage.config.label_smoothing = 0.0
    ours = torch.optim.Adam(lineage.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    theirs = torch.optim.Adam(reference.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    ratio = compare(
        f"transformer-base train step {BATCH}x{SOURCE}/{TARGET} on {target.type}",
        lambda: training_step(lineage, ours, inputs),
        lambda: training_step(reference, theirs, inputs),
        repeats=9 if target.type == "cpu" else 20,  # the two steps run the same kernels: a close race, measured long
    )
    assert ratio >= 1.0, f"Lineage is slower than transformers' MarianMTModel (ratio {ratio:.3f})"


@pytest.mark.benchmark
def test_transformer_base_beam_search_is_not_slower():
    target = device()
    lineage, reference = models(target)
    lineage.eval(), reference.eval()
    input_ids, attention_mask = sources(lineage.config.vocab_size, target)
    kwargs = dict(attention_mask=attention_mask, num_beams=4, length_penalty=0.6, min_new_tokens=TARGET,
                  max_new_tokens=TARGET)
    with torch.inference_mode():  # min = max new tokens: both sides do exactly the same number of steps
        ratio = compare(
            f"transformer-base beam-4 generation of {TARGET} tokens, batch {BATCH}x{SOURCE}, on {target.type}",
            lambda: lineage.generate(input_ids, **kwargs),
            lambda: reference.generate(input_ids, **kwargs),
            repeats=3 if target.type == "cpu" else 10,
        )
    assert ratio >= 1.0, f"Lineage generation is slower than transformers' MarianMTModel (ratio {ratio:.3f})"
