"""Lineage GPT against the transformers references at the gpt-117m size, on CPU or, where available, GPU:
a training step (forward, backward, AdamW step) at batch 8 x 128 against `OpenAIGPTLMHeadModel` with the GPT-1
config, and greedy generation of 128 new tokens from a 32-token prompt at batch 1 and 8 against
`GPT2LMHeadModel.generate()` with a GPT-2-shaped config of the same size. Each Lineage model is converted from
its reference, so both sides hold the same weights.

Run: python -m pytest -m benchmark tests/benchmarks/test_bench_gpt.py -s

CPU timings swing by tens of percent while other jobs share the cores: compare on a quiet machine.
"""

import pytest
import torch
import transformers
from timing import compare, device

from modeling import LineageGptForCausalLM
from modeling.conversion import from_transformers

BATCH, LENGTH = 8, 128
PROMPT, NEW_TOKENS = 32, 128
GPT1 = dict(vocab_size=40478, n_positions=512, n_embd=768, n_layer=12, n_head=12)  # gpt-117m


def repeats(target: torch.device) -> int:
    return 3 if target.type == "cpu" else 20  # the full size is slow on a 2-core CPU


def training_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, input_ids: torch.Tensor) -> None:
    optimizer.zero_grad(set_to_none=True)
    model(input_ids=input_ids, labels=input_ids).loss.backward()
    optimizer.step()


@pytest.mark.benchmark
def test_gpt_117m_training_step_is_not_slower():
    target = device()
    reference = transformers.OpenAIGPTLMHeadModel(transformers.OpenAIGPTConfig(**GPT1)).to(target).train()
    lineage = from_transformers(reference).train()
    assert isinstance(lineage, LineageGptForCausalLM) and lineage.config.norm_position == "post"
    input_ids = torch.randint(0, GPT1["vocab_size"], (BATCH, LENGTH), device=target)
    ours = torch.optim.AdamW(lineage.parameters(), lr=1e-4)
    theirs = torch.optim.AdamW(reference.parameters(), lr=1e-4)
    ratio = compare(
        f"gpt-117m train step {BATCH}x{LENGTH} vs OpenAIGPTLMHeadModel on {target.type}",
        lambda: training_step(lineage, ours, input_ids),
        lambda: training_step(reference, theirs, input_ids),
        repeats=repeats(target),
    )
    assert ratio >= 1.0, f"Lineage is slower than transformers' OpenAIGPTLMHeadModel (ratio {ratio:.3f})"


@pytest.mark.benchmark
@pytest.mark.parametrize("batch", [1, 8])
def test_gpt_117m_greedy_generation_is_not_slower(batch):
    target = device()
    config = transformers.GPT2Config(**GPT1, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    reference = transformers.GPT2LMHeadModel(config).to(target).eval()
    lineage = from_transformers(reference).eval()
    assert reference.config._attn_implementation == lineage.config._attn_implementation == "sdpa"
    prompt = torch.randint(0, GPT1["vocab_size"], (batch, PROMPT), device=target)
    kwargs = dict(max_new_tokens=NEW_TOKENS, do_sample=False)  # no end-of-text token: every row makes 128 tokens
    with torch.inference_mode():
        assert lineage.generate(prompt, **kwargs).shape == reference.generate(prompt, **kwargs).shape
        ratio = compare(
            f"gpt-117m greedy {PROMPT}+{NEW_TOKENS} tokens, batch {batch}, vs GPT2LMHeadModel on {target.type}",
            lambda: lineage.generate(prompt, **kwargs),
            lambda: reference.generate(prompt, **kwargs),
            repeats=repeats(target),
        )
    assert ratio >= 1.0, f"Lineage generates slower than transformers' GPT2LMHeadModel (ratio {ratio:.3f})"
