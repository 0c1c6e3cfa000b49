"""Peak memory and step time of a gpt-124m-prenorm training step (forward, backward, AdamW step) with the LM loss
computed from the (B, T, V) logits (`return_logits=True`, the dense path) and without them (`layers.lm_head_loss`,
the default in training), also with the vocabulary padded to a multiple of 64 (50257 -> 50304 rows).

Each variant runs in a fresh process, so the peak resident set size (`resource.getrusage`) is its own; the step time
is the median of the steps after a warm-up one. On CUDA the peak is `torch.cuda.max_memory_allocated`. The output
layer alone (forward and backward of the loss from (B * T, 768) hidden states, 50257 tokens) is also timed in one
process, the two paths interleaved (`timing.compare`).

Run: python -m pytest -m benchmark tests/benchmarks/test_bench_lm_loss.py -s
  or python tests/benchmarks/test_bench_lm_loss.py [--batch 4 --length 512 --steps 3] [--head_only]

CPU timings swing by tens of percent while other jobs share the cores: compare on a quiet machine.
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VARIANTS = {  # name: (return_logits, pad_vocab_to_multiple_of)
    "dense": (True, None),
    "chunked": (None, None),
    "chunked, vocab padded to 64": (None, 64),
}


def child(variant: str, batch: int, length: int, steps: int) -> dict:
    """One variant's training steps in this process: peak memory (MiB) and the median step time (s)."""
    sys.path.insert(0, str(REPO))
    import torch

    from modeling import LineageGptConfig, LineageGptForCausalLM

    return_logits, multiple = VARIANTS[variant]
    fields = json.loads((REPO / "train" / "configs" / "models" / "gpt-124m-prenorm.json").read_text())
    fields.pop("model_type")
    target = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    config = LineageGptConfig(**fields, pad_vocab_to_multiple_of=multiple)
    model = LineageGptForCausalLM(config).to(target).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, config.vocab_size, (batch, length), device=target)
    times, losses = [], []
    for _ in range(steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids, return_logits=return_logits).loss
        loss.backward()
        optimizer.step()
        if target.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    peak = (torch.cuda.max_memory_allocated() / 2**20 if target.type == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10)  # ru_maxrss: KiB on Linux
    return {"variant": variant, "device": target.type, "peak_mib": round(peak), "step_s": statistics.median(times[1:]),
            "first_loss": losses[0]}


def measure(batch: int, length: int, steps: int) -> list[dict]:
    results = []
    for variant in VARIANTS:
        command = [sys.executable, __file__, "--child", variant, "--batch", str(batch), "--length", str(length),
                   "--steps", str(steps)]
        out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=REPO)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    dense = results[0]
    for result in results:
        print(f"{result['variant']:>28}: peak {result['peak_mib']} MiB ({result['device']}), step "
              f"{result['step_s']:.2f} s, time ratio {result['step_s'] / dense['step_s']:.2f}, "
              f"first loss {result['first_loss']:.6f}  (B={batch}, T={length})")
    return results


def time_head(batch: int, length: int, repeats: int = 5) -> float:
    """Ratio dense time / chunked time of the output layer's loss, forward and backward, interleaved."""
    sys.path.insert(0, str(REPO))
    import torch
    from timing import compare, device

    from modeling.losses import lm_head_loss

    target = device()
    hidden = torch.randn(batch * length, 768, device=target, requires_grad=True)
    weight = (0.02 * torch.randn(50257, 768, device=target)).requires_grad_()
    labels = torch.randint(0, 50257, (batch * length,), device=target)

    def dense():
        logits = torch.nn.functional.linear(hidden, weight).float()
        torch.autograd.grad(torch.nn.functional.cross_entropy(logits, labels), (hidden, weight))

    def chunked():
        torch.autograd.grad(lm_head_loss(hidden, weight, None, labels, 50257), (hidden, weight))

    return compare(f"output layer loss, forward + backward, {batch}x{length} tokens (reference = dense)",
                   chunked, dense, repeats=repeats)


@pytest.mark.benchmark
def test_chunked_head_is_not_slower():
    assert time_head(batch=4, length=512) > 0.9


@pytest.mark.benchmark
def test_chunked_loss_lowers_peak_memory_and_keeps_the_loss():
    dense, chunked, padded = measure(batch=4, length=512, steps=3)
    logits_mib = 4 * 512 * 50257 * 4 / 2**20  # one float32 (B, T, V) tensor
    assert dense["peak_mib"] - chunked["peak_mib"] > logits_mib
    assert abs(chunked["first_loss"] - dense["first_loss"]) < 1e-4
    assert padded["peak_mib"] < dense["peak_mib"]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--head_only", action="store_true", help="time the output layer's loss alone")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error(f"--steps must be at least 2 (the first step warms up and is not timed), got {args.steps}")
    if args.child:
        print(json.dumps(child(args.child, args.batch, args.length, args.steps)))
    elif args.head_only:
        time_head(args.batch, args.length)
    else:
        measure(args.batch, args.length, args.steps)
