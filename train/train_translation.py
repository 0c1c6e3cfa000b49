"""Train a sequence-to-sequence model for translation: the encoder-decoder Transformer (Vaswani et al. 2017; its
recipes use the paper's inverse-square-root schedule with Adam 0.9, 0.98, 1e-9) or the RNN encoder-decoder with
or without attention (`lineage-rnn`, Bahdanau et al. 2014, Luong et al. 2015); teacher forcing, label-smoothed
cross-entropy, and sacreBLEU of beam-search translations of the evaluation set.

    python -m train.train_translation --recipe transformer-translation-tiny [--key value ...]
    python -m train.train_translation --recipe rnn-translation-tiny
    python -m train.train_translation --recipe transformer-translation-tiny --model Helsinki-NLP/opus-mt-en-de \\
        --train_file pairs.json

`--model` may be pretrained (`train.setup.models`: a Lineage folder or Hub id, or a Marian checkpoint converted on
load) and brings its own tokenizer.

Data: rows with the columns `source` and `target` (the embedded English number words -> German by default); a file
without them is refused naming both. With `streaming: true` the training pairs are read as training goes
(`max_steps` sizes the run; docs/training.md, "Streaming"); the validation pairs are read whole.
`label_smoothing` in the recipe overrides the model config's. Training runs the output projection on real
target tokens only (`sparse_prediction`, an option of the training calls, not of the saved model), skipping the
padding of ragged batches.
"""

from __future__ import annotations

import torch

from train.data.collators import Seq2SeqCollator
from train.data.preparation import tokenize_dataset
from train.metrics import load_metric
from train.run.distributed import token_mean
from train.run.engine import Engine, forward_options, seed_everything
from train.run.recipes import parse_args
from train.setup.models import build_model, model_source
from train.setup.splits import check_sequence_room, load_splits
from train.setup.tokenizers import get_tokenizer

DEFAULT_RECIPE = "transformer-translation-tiny"
COLUMNS = (("source", "text"), ("target", "text"))  # fixed: no recipe key renames them
COLUMN_ADVICE = ("train_translation reads the columns 'source' and 'target' of every row (no recipe key renames "
                 "them): rename the file's columns")


def make_predict_fn(recipe):
    def predict(model, batch, outputs) -> dict[str, torch.Tensor]:
        generated = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                   num_beams=recipe.num_beams, max_new_tokens=recipe.max_new_tokens)
        return {"generated": generated, "labels": batch["labels"]}
    return predict


def loss_fn(outputs, batch, engine) -> torch.Tensor:
    """The model's per-token loss, weighted so that several processes train as one with the whole batch."""
    return token_mean(engine.accelerator, outputs.loss, batch["labels"])


def decode(tokenizer, ids: torch.Tensor) -> list[str]:
    ids = ids.masked_fill(ids < 0, tokenizer.pad_token_id)
    return [t.strip() for t in tokenizer.batch_decode(ids, skip_special_tokens=True)]


def make_metrics_fn(tokenizer):
    def metrics(predictions: dict[str, torch.Tensor], eval_loss: float) -> dict[str, float]:
        hypotheses, references = decode(tokenizer, predictions["generated"]), decode(tokenizer, predictions["labels"])
        result = load_metric("bleu").compute(predictions=hypotheses, references=[[r] for r in references])
        return {"bleu": result["bleu"], "exact_match": result["exact_match"]}
    return metrics


def main(argv: list[str] | None = None):
    recipe = parse_args(argv, DEFAULT_RECIPE, __doc__.splitlines()[0], "train_translation")
    seed_everything(recipe.seed)
    source = model_source(recipe, "train_translation", ("seq2seq",), generates=True)
    train_rows, eval_rows = load_splits(recipe, COLUMNS, "embedded:translation", COLUMN_ADVICE)
    tokenizer = get_tokenizer(recipe, "seq2seq", lambda: (t for r in train_rows for t in (r["source"], r["target"])),
                              source=source)
    check_sequence_room(recipe, tokenizer, 1, "a seq2seq source or target (text </s>)")
    fields = {}
    if recipe.label_smoothing is not None:
        fields["label_smoothing"] = recipe.label_smoothing
    model = build_model(recipe, "AutoModelForSeq2SeqLM", tokenizer, "seq2seq", source, **fields)
    lengths = {"max_source_length": recipe.max_seq_length, "max_target_length": recipe.max_seq_length}
    train_data = tokenize_dataset(train_rows, tokenizer, "seq2seq", **lengths)
    eval_data = tokenize_dataset(eval_rows, tokenizer, "seq2seq", **lengths) if eval_rows else None
    engine = Engine(recipe, model, train_data, Seq2SeqCollator(tokenizer, recipe.pad_to_multiple_of),
                    tokenizer=tokenizer, eval_dataset=eval_data, loss_fn=loss_fn, predict_fn=make_predict_fn(recipe),
                    metrics_fn=make_metrics_fn(tokenizer))
    with forward_options(model, sparse_prediction=True):
        results = engine.train()
    extra = ""
    if eval_rows is not None:  # on every process: under FSDP each forward needs all of them
        model = engine.accelerator.unwrap_model(engine.model).eval()
        sources = [eval_rows[i]["source"] for i in range(min(3, len(eval_rows)))]
        encoded = tokenizer(sources, return_tensors="pt", padding=True).to(model.device)
        with torch.no_grad():
            out = model.generate(**encoded, num_beams=recipe.num_beams, max_new_tokens=recipe.max_new_tokens)
        pairs = list(zip(sources, decode(tokenizer, out)))
        results.update({f"sample_{i}": f"{s} -> {t}" for i, (s, t) in enumerate(pairs)})
        extra = "\n## Samples\n\n" + "\n".join(f"- {s!r} -> {t!r}" for s, t in pairs) + "\n"
    results.update(source.report)
    folder = engine.save_final(results, card={"dataset_name": recipe.data_source("train", "embedded:translation"),
                                              "description": "Trained for translation with teacher forcing. "
                                                             + (source.card_text() if source.pretrained else ""),
                                              "base_model": source.repo_id,
                                              "extra": extra})
    return results, folder


if __name__ == "__main__":
    main()
