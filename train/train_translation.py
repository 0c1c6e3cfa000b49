"""Train a Transformer or RNN encoder-decoder for translation, scored by sacreBLEU and chrF of beam search.

    python -m train.train_translation --recipe transformer-translation-tiny [--key value ...]
    python -m train.train_translation --recipe rnn-translation-tiny
    python -m train.train_translation --recipe transformer-translation-tiny --model Helsinki-NLP/opus-mt-en-de \\
        --train_file pairs.json

Pairs in the columns `source` and `target` (recipe keys `source_column`, `target_column`; `translation.de` for the
Hub's layout; `--train_file data/train` of `en`, `de`: the lines of data/train.en and data/train.de); teacher forcing
and label-smoothed cross-entropy (the Transformer recipes use the paper's inverse-square-root schedule).
docs/training.md ("Commands", "Data").
"""

from __future__ import annotations

import torch

from modeling.beam_search import BEAM_SEARCHES
from train.analysis.translation_scores import score_translations
from train.cli import run_script
from train.data.collators import Seq2SeqCollator
from train.data.model_inputs import tokenize_dataset
from train.data.pair_files import pair_columns
from train.run.engine import Engine, TokenMean
from train.run.recipes import parse_args
from train.run.run_folder import start_run
from train.setup.models import build_model, model_source
from train.setup.run_tokenizer import get_tokenizer
from train.setup.splits import check_sequence_room, load_splits, row_texts

DEFAULT_RECIPE = "transformer-translation-tiny"
DATA = "embedded:translation"  # when the recipe names no data
COLUMN_ADVICE = ("name the columns of a pair with the recipe keys source_column and target_column (translation.de: "
                 "the entry de of a column translation), or rename them")


def pairs(dataset, source_column: str | None, target_column: str | None):
    """`dataset` (or None) with only the columns `source` and `target`: its `source_column` and `target_column`
    (None: `source`, `target`)."""
    if dataset is None:
        return None
    names = {source_column or "source": "source", target_column or "target": "target"}
    return dataset.select_columns(list(names)).rename_columns({k: v for k, v in names.items() if k != v})


def generation_settings(recipe) -> dict:
    """The beam search of every translation a run makes (the recipe keys of the same names)."""
    return {"num_beams": recipe.num_beams, "length_penalty": recipe.length_penalty,
            "max_new_tokens": recipe.max_new_tokens, **BEAM_SEARCHES[recipe.beam_search]}


def make_predict_fn(recipe):
    def predict(model, batch, outputs) -> dict[str, torch.Tensor]:
        generated = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                   **generation_settings(recipe))
        return {"generated": generated, "labels": batch["labels"]}
    return predict


def decode(tokenizer, ids: torch.Tensor) -> list[str]:
    ids = ids.masked_fill(ids < 0, tokenizer.pad_token_id)
    return [t.strip() for t in tokenizer.batch_decode(ids, skip_special_tokens=True)]


def make_metrics_fn(tokenizer):
    def metrics(predictions: dict[str, torch.Tensor], eval_loss: float) -> dict[str, float | str]:
        hypotheses, references = decode(tokenizer, predictions["generated"]), decode(tokenizer, predictions["labels"])
        return score_translations(hypotheses, references)
    return metrics


def translate_samples(model, tokenizer, recipe, eval_rows) -> list[tuple[str, str]]:
    """The first three validation sources and their beam-search translations (on every process: under FSDP each
    forward needs all of them)."""
    if eval_rows is None:
        return []
    model = model.eval()
    sources = [eval_rows[i]["source"] for i in range(min(3, len(eval_rows)))]
    encoded = tokenizer(sources, return_tensors="pt", padding=True).to(model.device)
    with torch.no_grad():
        out = model.generate(**encoded, **generation_settings(recipe))
    return list(zip(sources, decode(tokenizer, out)))


def main(argv: list[str] | None = None):
    recipe = parse_args(argv, DEFAULT_RECIPE, __doc__.splitlines()[0], "train_translation").reading(DATA)
    source = model_source(recipe, "train_translation", ("seq2seq",), generates=True)
    columns = recipe.source_column, recipe.target_column
    train_rows, eval_rows = (pairs(rows, *columns) for rows in
                             load_splits(recipe, pair_columns(*columns), column_advice=COLUMN_ADVICE))
    with start_run(recipe) as run:
        tokenizer = get_tokenizer(recipe, "seq2seq", lambda: row_texts(train_rows, ("source", "target")), source=source,
                                  run=run)
        check_sequence_room(recipe, tokenizer, 1, "a seq2seq source or target (text </s>)")
        fields = {}
        if recipe.label_smoothing is not None:
            fields["label_smoothing"] = recipe.label_smoothing
        model = build_model(recipe, "AutoModelForSeq2SeqLM", tokenizer, "seq2seq", source, **fields)
        lengths = {"max_source_length": recipe.max_seq_length, "max_target_length": recipe.max_seq_length}
        train_data = tokenize_dataset(train_rows, tokenizer, "seq2seq", **lengths)
        eval_data = tokenize_dataset(eval_rows, tokenizer, "seq2seq", **lengths) if eval_rows else None
        engine = Engine(run, model, train_data, Seq2SeqCollator(tokenizer, recipe.pad_to_multiple_of),
                        tokenizer=tokenizer, eval_dataset=eval_data, token_mean=TokenMean(), sparse_prediction=True,
                        predict_fn=make_predict_fn(recipe), metrics_fn=make_metrics_fn(tokenizer))
        results = {**engine.train(), "num_beams": recipe.num_beams, "length_penalty": recipe.length_penalty,
                   "beam_search": recipe.beam_search}
        samples = translate_samples(engine.accelerator.unwrap_model(engine.model), tokenizer, recipe, eval_rows)
        files = recipe.pair_files()
        read = f" Its training pairs are the lines of `{files[0].name}` and `{files[1].name}`." if files else ""
        return results, engine.finish(results, description=f"Trained for translation with teacher forcing.{read}",
                                      source=source, samples=samples)


if __name__ == "__main__":
    run_script(main)
