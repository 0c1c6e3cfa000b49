"""Static shapes for compiled training (issue 22): packed GPT blocks train under `torch.compile` without recompiling
after the first step (and, compiled, without a single host read between records); batches padded to their longest
example are padded to a multiple of `pad_to_multiple_of`, so the lengths to compile are few; `compile_mode:
reduce-overhead` over lengths that cannot be bounded is refused before training. On a CPU the compile mode is the
default one (CUDA graphs need CUDA); the shapes, and so the recompiles, are those `reduce-overhead` would see.
"""

import math
import random

import pytest
import torch
from conftest import preset
from host_reads import HostReads
from torch._dynamo.utils import counters

from modeling.modeling_lineage_bert import LineageBertForPreTraining
from modeling.modeling_lineage_gpt import LineageGptForCausalLM
from train.data.collators import CausalLMCollator, MaskedLMCollator
from train.data.encoders import pack_documents
from train.pretrain_bert import main as pretrain_bert
from train.run.compilation import check_bounded_shapes, check_compiler
from train.run.engine import Engine, TokenMean
from train.run.recipes import Recipe, RecipeError
from train.run.run_folder import claim
from train.train_translation import main as train_translation

QUIET = ["--progress_bar", "false", "--report_to", "none", "--save_steps", "0"]


class _Tokenizer:
    """What `CausalLMCollator` reads of a tokenizer."""

    pad_token_id = 0


def packed_blocks(count: int, block: int, eos: int, vocab: int) -> list[dict]:
    rng = random.Random(0)
    documents = [[rng.randrange(5, vocab) for _ in range(rng.randrange(3, 20))] for _ in range(count * block // 8)]
    blocks = list(pack_documents(documents, block, eos))
    assert len(blocks) >= count
    return blocks[:count]


def batch_shapes(monkeypatch) -> list[dict]:
    """Record the shape of every tensor of every training batch (not the host values: `packed_sequences`)."""
    seen, micro_step = [], Engine._micro_step

    def recorded(self, batch, *args):
        seen.append({key: tuple(value.shape) for key, value in batch.items() if isinstance(value, torch.Tensor)})
        return micro_step(self, batch, *args)

    monkeypatch.setattr(Engine, "_micro_step", recorded)
    return seen


def test_packed_gpt_blocks_train_compiled_without_recompiling_or_reading_back(tmp_path, monkeypatch):
    check_compiler()
    torch._dynamo.reset()
    counters.clear()
    model = LineageGptForCausalLM(preset("gpt-tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    blocks = packed_blocks(8, 32, model.config.eos_token_id, model.config.vocab_size)  # 2 batches an epoch
    recipe = Recipe(model="gpt-tiny", compile=True, max_steps=6, logging_steps=3, per_device_train_batch_size=4,
                    learning_rate=1e-3, save_steps=0, report_to="none", progress_bar=False, output_dir=str(tmp_path))
    engine = Engine(claim(recipe), model, blocks, CausalLMCollator(_Tokenizer()), token_mean=TokenMean(first_label=1))
    micro_step, counter, graphs = Engine._micro_step, HostReads(), []

    def after_warm_up(self, *args):
        counter.step = self.state.step + 1
        done = micro_step(self, *args)
        counter.step = ("after", self.state.step)
        graphs.append(counters["stats"]["unique_graphs"])
        if self.state.step == 1:
            torch.compiler.set_stance("fail_on_recompile")  # from here on a new shape or guard would raise
        return done

    monkeypatch.setattr(Engine, "_micro_step", after_warm_up)
    try:
        with counter:
            results = engine.train()
    finally:
        torch.compiler.set_stance("default")
    assert results["steps"] == 6 and math.isfinite(results["train_loss"])  # three epochs, one shape
    assert graphs[0] >= 1 and graphs == [graphs[0]] * 6 and dict(counters["graph_break"]) == {}
    for step in (1, 2, 4, 5):  # compiled, not even the model reads a value back between records
        assert sum(counter.reads[step].values()) == 0, (step, counter.reads[step])
    assert sum(counter.reads[3].values()) == 1  # the record's one transfer


def test_padded_batches_take_a_few_lengths(tmp_path, monkeypatch):
    seen = batch_shapes(monkeypatch)
    pretrain_bert(["--recipe", "bert-pretrain-tiny", "--train_size", "48", "--eval_size", "8",
                   "--max_steps", "6", "--pad_to_multiple_of", "16", *QUIET, "--output_dir", str(tmp_path / "bert")])
    train_translation(["--recipe", "transformer-translation-tiny", "--train_size", "64",
                       "--eval_size", "2", "--max_new_tokens", "4", "--num_beams", "1", "--max_steps", "4",
                       "--pad_to_multiple_of", "16", *QUIET, "--output_dir", str(tmp_path / "mt")])
    lengths = {shape[1] for batch in seen for shape in batch.values() if len(shape) == 2}
    assert len(seen) == 10 and lengths and all(length % 16 == 0 for length in lengths)
    assert lengths <= {16, 32, 48, 64}  # max_seq_length 64 (BERT) and 48 (translation): at most 4 lengths


def test_reduce_overhead_over_unbounded_lengths_is_refused_before_training(tmp_path, monkeypatch):
    seen = batch_shapes(monkeypatch)
    with pytest.raises(RecipeError, match=r"'compile_mode' is 'reduce-overhead'.*lengths.*set 'pad_to_multiple_of'"):
        pretrain_bert(["--recipe", "bert-pretrain-tiny", "--train_size", "48", "--eval_size",
                       "8", "--compile", "true", "--compile_mode", "reduce-overhead", *QUIET,
                       "--output_dir", str(tmp_path / "run")])
    assert seen == [] and not (tmp_path / "run" / "logs").exists()
    rows = [{"input_ids": [1] * n} for n in (5, 9, 30)]
    with pytest.raises(RecipeError, match=r"3 lengths \(5 to 30 tokens\)"):
        check_bounded_shapes("reduce-overhead", CausalLMCollator(_Tokenizer()), rows)
    check_bounded_shapes("reduce-overhead", CausalLMCollator(_Tokenizer(), pad_to_multiple_of=16), rows)
    check_bounded_shapes("default", CausalLMCollator(_Tokenizer()), rows)  # Dynamo's dynamic shapes take them
    gpt = preset("gpt-tiny")
    check_bounded_shapes("reduce-overhead", CausalLMCollator(_Tokenizer()),  # packed blocks: one length
                         packed_blocks(4, 32, gpt.eos_token_id, gpt.vocab_size))
    with pytest.raises(RecipeError, match="'pad_to_multiple_of' must be in"):
        pretrain_bert(["--recipe", "bert-pretrain-tiny", "--pad_to_multiple_of", "0", *QUIET,
                       "--output_dir", str(tmp_path / "zero")])


@pytest.mark.slow
def test_bucketed_bert_compiles_one_graph_per_length_at_most(tmp_path, monkeypatch):
    """Every shape compiled as its own static graph (as CUDA graphs record them): no more graphs than lengths."""
    from train.data.tokenization import train_tokenizer

    check_compiler()
    torch._dynamo.reset()
    counters.clear()
    tokenizer = train_tokenizer("bert", [f"word{i} other{i % 7} thing{i % 5}" for i in range(300)], 99,
                                model_max_length=64)
    model = LineageBertForPreTraining(preset("bert-tiny", vocab_size=len(tokenizer)))
    rng = random.Random(0)
    lengths = [rng.randrange(6, 62) for _ in range(32)]
    rows = [{"input_ids": [2] + [rng.randrange(5, len(tokenizer)) for _ in range(n)] + [3],
             "token_type_ids": [0] * (n + 2), "next_sentence_label": rng.randrange(2)} for n in lengths]
    recipe = Recipe(model="bert-tiny", compile=True, max_steps=8, logging_steps=4, per_device_train_batch_size=4,
                    save_steps=0, report_to="none", progress_bar=False, output_dir=str(tmp_path))
    seen = batch_shapes(monkeypatch)
    with torch._dynamo.config.patch(automatic_dynamic_shapes=False, cache_size_limit=64):
        Engine(claim(recipe), model, rows, MaskedLMCollator(tokenizer, pad_to_multiple_of=16)).train()
    batch_lengths = {batch["input_ids"][1] for batch in seen}
    assert len(seen) == 8 and batch_lengths <= {16, 32, 48, 64}
    assert counters["stats"]["unique_graphs"] <= len(batch_lengths)
