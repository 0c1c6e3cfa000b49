"""Pretrain GPT as a causal language model (Radford et al. 2018, section 3.1), then sample from it.

    python -m train.pretrain_gpt --recipe gpt-pretrain-tiny [--key value ...]
    python -m train.pretrain_gpt --recipe gpt-pretrain-tiny --model openai-community/gpt2 --train_file corpus.txt

Documents joined and cut into `max_seq_length` blocks (`train.setup.pretraining`; with
`pack_documents` attention keeps within each document); the loss is a token mean across processes (the engine's
`TokenMean`); evaluation reports perplexity; `sample_prompts` are continued at the end and kept by the finish step.
docs/training.md ("Commands", "Pretraining corpora: prepared once").
"""

from __future__ import annotations

import torch

from modeling.packing import document_masking_error
from train.cli import run_script
from train.data.batching import EmptyStreamError
from train.data.collators import CausalLMCollator
from train.data.token_store import ROWS_PER_BATCH, data_key
from train.metrics import load_metric
from train.run.engine import Engine, TokenMean
from train.run.recipes import RecipeError, parse_args
from train.run.run_folder import start_run
from train.setup.models import build_model, model_source
from train.setup.pretraining import pretraining_data, pretraining_documents
from train.setup.run_tokenizer import get_tokenizer
from train.setup.splits import check_sequence_room, column_texts

DEFAULT_RECIPE = "gpt-pretrain-tiny"
DATA = "embedded:documents"  # when the recipe names no data
DEFAULT_PROMPTS = ["Anna was born in", "First, wash the"]


def metrics(predictions: dict, eval_loss: float) -> dict[str, float]:
    return {"perplexity": load_metric("perplexity").compute(losses=[eval_loss])["perplexity"]}


def sample(model, tokenizer, prompts: list[str], max_new_tokens: int, seed: int) -> list[str]:
    """Top-k samples continuing each prompt (plain text, no template), padded on the left whatever the tokenizer's
    `padding_side` (a checkpoint's GPT-2 tokenizer pads on the right), so each continues from its last token."""
    model.eval()
    encoded = tokenizer(prompts, add_special_tokens=False, return_tensors="pt", padding=True,
                        padding_side="left").to(model.device)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        out = model.generate(**encoded, do_sample=True, top_k=20, max_new_tokens=max_new_tokens,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    return tokenizer.batch_decode(out, skip_special_tokens=True)


def check_sample_room(recipe, tokenizer, prompts: list[str], positions: int) -> None:
    """Refuse, before training, samples that could not be generated after it: an empty prompt, or a prompt and
    `max_new_tokens` longer than the model's positions."""
    lengths = [len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    if 0 in lengths:
        raise RecipeError(f"recipe key 'sample_prompts': prompt {lengths.index(0)} ({prompts[lengths.index(0)]!r}) "
                          "has no tokens; give text to continue")
    longest = max(lengths)
    if longest + recipe.max_new_tokens > positions:
        raise RecipeError(f"recipe key 'max_new_tokens' is {recipe.max_new_tokens}: after training, the longest sample "
                          f"prompt ({longest} tokens, {prompts[lengths.index(longest)]!r}) would continue to "
                          f"{longest + recipe.max_new_tokens} tokens, beyond the model's {positions} positions; "
                          f"max_new_tokens must be in [1, {positions - longest}] (or shorten sample_prompts)")


def check_document_packing(model) -> None:
    """`pack_documents` needs attention that keeps within each document of a packed row (every `--model` source is a
    Lineage GPT by now: a transformers checkpoint was converted on load)."""
    problem = document_masking_error(model.config)
    if problem is not None:
        raise RecipeError(f"recipe key 'pack_documents' is true but {problem}; set 'pack_documents: false' to "
                          "train on blocks whose documents attend to each other")


def main(argv: list[str] | None = None):
    recipe = parse_args(argv, DEFAULT_RECIPE, __doc__.splitlines()[0], "pretrain_gpt").reading(DATA)
    source = model_source(recipe, "pretrain_gpt", ("gpt",), generates=True)
    train_docs, eval_docs = pretraining_documents(recipe, "gpt")
    with start_run(recipe) as run:
        tokenizer = get_tokenizer(recipe, "gpt", lambda: column_texts(train_docs), source=source, templates=False,
                                  data_key=data_key(train_docs, ["text"]), run=run)
        check_sequence_room(recipe, tokenizer, 1, "causal-LM blocks (a token and the next one it predicts)", minimum=2)
        model = build_model(recipe, "AutoModelForCausalLM", tokenizer, "gpt", source)
        prompts = recipe.sample_prompts or DEFAULT_PROMPTS
        check_sample_room(recipe, tokenizer, prompts, model.config.max_position_embeddings)
        if recipe.pack_documents:
            check_document_packing(model)
        train_data, eval_data = pretraining_data(recipe, "gpt", tokenizer, train_docs, eval_docs)
        # the mean leaves each row's first label out: packed rows predict no document's first token
        engine = Engine(run, model, train_data, CausalLMCollator(tokenizer, recipe.pad_to_multiple_of),
                        tokenizer=tokenizer, eval_dataset=eval_data, token_mean=TokenMean(first_label=1),
                        metrics_fn=metrics)
        try:
            results = engine.train()
        except EmptyStreamError as error:  # the engine knows no block: say what an example of this stream is
            raise EmptyStreamError(
                f"{error} ({recipe.data_source('train')}: an example is a block of {recipe.max_seq_length} tokens "
                f"(max_seq_length) packed from each {ROWS_PER_BATCH:,} documents in turn, the tail of each that fills "
                "no block dropped: give more text or a smaller max_seq_length)") from None
        # every process samples the same prompts with the same seed: under FSDP each forward needs all of them
        samples = sample(engine.accelerator.unwrap_model(engine.model), tokenizer, prompts, recipe.max_new_tokens,
                         recipe.seed)
        return results, engine.finish(results, description="Pretrained as a causal language model.", source=source,
                                      samples=samples)


if __name__ == "__main__":
    run_script(main)
