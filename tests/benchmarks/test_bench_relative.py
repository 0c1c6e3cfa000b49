"""Relative position representations (Shaw et al. 2018) measured: the attention kernels against SDPA, and absolute
vs relative vs both positions with the same budget on two tasks:

- the embedded translation task (English number words into German; BLEU), recipe
  `relative-translation`;
- real English prose that is not the embedded corpus: the Python reference manual's topic texts that ship with
  CPython (`pydoc_data.topics`, about 430 000 characters), as a causal-LM corpus for a small GPT (perplexity on
  held-out topics), recipe `relative-gpt-python-docs`.

Run: python -m pytest -m benchmark tests/benchmarks/test_bench_relative.py -s

CPU timings swing by tens of percent while other jobs share the cores: compare tokens/s on a quiet machine, or read
the kernel ratios, which are measured interleaved.
"""

import json
from pathlib import Path

import pytest
import torch
from timing import compare, device

from modeling.configuration_lineage_gpt import LineageGptConfig
from modeling.layers import LineageAttention
from modeling.relative_positions import relative_position_index
from train import pretrain_gpt, train_translation
from train.python_docs import write_python_docs

WIDTH = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 512,
         "max_position_embeddings": 128}
RELATIVE = {"position_embedding_type": "relative", "max_relative_position": 16}
VARIANTS = {  # name -> position fields on top of WIDTH; the Transformer's absolute positions are sinusoidal
    "absolute": {},
    "relative": RELATIVE,
    "both": {**RELATIVE, "absolute_and_relative": True},
}


def _overrides(fields: dict) -> str:
    return json.dumps(fields)  # JSON is YAML: the recipes parse it


def _run(main, recipe: str, output_dir: Path, fields: dict, *extra: str) -> dict:
    results, _ = main(["--recipe", recipe, "--output_dir", str(output_dir),
                       "--model_overrides", _overrides(fields), "--progress_bar", "false", *extra])
    return results


def _table(title: str, metric: str, rows: dict[str, dict]) -> None:
    print(f"\n{title}\n| positions | {metric} | tokens/s |\n|---|---|---|")
    for name, results in rows.items():
        print(f"| {name} | {results[metric]:.2f} | {results['tokens_per_s']:.0f} |")


@pytest.mark.benchmark
def test_translation_absolute_relative_both(tmp_path):
    rows = {}
    for name, fields in VARIANTS.items():
        position = {"position_embedding_type": "sinusoidal"} if name == "absolute" else fields
        rows[name] = _run(train_translation.main, "relative-translation", tmp_path / name, {**WIDTH, **position})
    _table("embedded translation, 300 steps of 32", "eval_bleu", rows)
    assert all(0 <= results["eval_bleu"] <= 100 for results in rows.values())


@pytest.mark.benchmark
def test_python_docs_absolute_relative_both(tmp_path):
    train_file, validation_file = write_python_docs(tmp_path / "python-docs")
    rows = {}
    for name, fields in VARIANTS.items():
        position = {"position_embedding_type": "absolute"} if name == "absolute" else fields
        rows[name] = _run(pretrain_gpt.main, "relative-gpt-python-docs", tmp_path / name, {**WIDTH, **position},
                          "--train_file", str(train_file), "--validation_file", str(validation_file))
    _table("Python reference manual, GPT causal LM, 300 steps of 16 x 128 tokens", "eval_perplexity", rows)
    assert all(results["eval_perplexity"] > 1 for results in rows.values())


def _attention(kind: str, implementation: str) -> LineageAttention:
    fields = {"position_embedding_type": kind, "max_relative_position": 16} if kind != "absolute" else {}
    config = LineageGptConfig(hidden_size=512, num_attention_heads=8, attention_probs_dropout_prob=0.0, **fields)
    config._attn_implementation = implementation
    return LineageAttention(config, 0, is_causal=True).to(device())


@pytest.mark.benchmark
@pytest.mark.parametrize("mode", ["inference", "training"])
def test_relative_kernels_against_sdpa(mode):
    """One causal self-attention layer (width 512, 8 heads, batch 8 x 256 tokens, k = 16): each relative kernel
    against absolute positions through SDPA, and keys-only through SDPA with a bias against the eager kernel."""
    hidden = torch.randn(8, 256, 512, device=device(), requires_grad=mode == "training")
    positions = torch.arange(256, device=device())[None]
    index = relative_position_index(positions, positions, 16)

    def run(layer: LineageAttention):
        def call():
            with torch.set_grad_enabled(mode == "training"):
                output = layer(hidden, relative_position_index=index)[0]
                if mode == "training":
                    output.sum().backward()
        return call

    sdpa = run(_attention("absolute", "sdpa"))
    ratios = {name: compare(f"{mode}: {name} vs absolute sdpa", run(_attention(kind, implementation)), sdpa)
              for name, kind, implementation in (("relative (eager kernel)", "relative", "sdpa"),
                                                 ("relative-keys (sdpa + bias)", "relative-keys", "sdpa"),
                                                 ("relative-keys (eager kernel)", "relative-keys", "eager"))}
    keys_sdpa = run(_attention("relative-keys", "sdpa"))
    keys_eager = run(_attention("relative-keys", "eager"))
    chosen = compare(f"{mode}: relative-keys sdpa + bias vs eager", keys_sdpa, keys_eager)
    assert all(ratio > 0 for ratio in ratios.values()) and chosen > 0.8  # the path chosen is not the slow one
