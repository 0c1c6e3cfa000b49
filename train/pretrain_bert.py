"""Pretrain BERT with masked-LM + next-sentence prediction (Devlin et al. 2018, section 3.1).

    python -m train.pretrain_bert --recipe bert-pretrain-tiny [--key value ...]
    accelerate launch -m train.pretrain_bert --recipe ... (one GPU, DDP, FSDP, several CPU processes)
    python -m train.pretrain_bert --recipe bert-pretrain-tiny --model google-bert/bert-base-uncased --train_file a.txt

`--model` may be pretrained (`train.setup.models`): continued pretraining with the checkpoint's own tokenizer.

Data: documents (`text`, optionally `sentences`; refused before training by `train.data.preparation.check_documents` when
they give no sentence pair) -> BERT's sentence pairs (`train.data.preparation.prepare_nsp_dataset`: the corpus tokenized
once into a store reused by later runs, `num_proc` processes, its documents and sentences counted and printed, the
pairs an index of token ranges, so memory stays flat; with `streaming` paired lazily as it is read) -> dynamic
masking (`MaskedLMCollator`). A `.txt` file in BERT's own layout (one sentence per line, a blank line between
documents) is read a document per row (`text_sample_by: auto`, or `paragraph`). With `nsp: false` the model is
`...ForMaskedLM` (no pooler, no NSP head), so every parameter receives a gradient and DDP needs no unused-parameter
search. On a GPU the model trains
unpadded (`unpad_inputs`, MosaicBERT: padding removed before the encoder, attention per sequence).

The MLM term is normalised by the number of masked tokens of the whole batch across processes, so the
loss and its gradient do not depend on how the batch is split over processes. Training runs the MLM head on the
masked positions only (`sparse_prediction`, as the original BERT code does). Both are options of the training
calls (`forward_options`), not of the saved model, whose logits cover every position.
"""

from __future__ import annotations

import torch

from train.data.collators import MaskedLMCollator
from train.data.preparation import check_documents, prepare_nsp_dataset
from train.data.prepared import data_key
from train.metrics import load_metric
from train.run.distributed import one_process_first, token_mean
from train.run.engine import Engine, forward_options, seed_everything, unpadding_on_gpu
from train.run.recipes import parse_args
from train.setup.models import build_model, model_source
from train.setup.splits import check_sequence_room, column_texts, load_splits
from train.setup.tokenizers import get_tokenizer

DEFAULT_RECIPE = "bert-pretrain-tiny"


def make_loss_fn(nsp: bool):
    def loss_fn(outputs, batch, engine):
        mlm = token_mean(engine.accelerator, outputs.mlm_loss if nsp else outputs.loss, batch["labels"])
        return mlm + outputs.nsp_loss if nsp else mlm
    return loss_fn


def predict(model, batch, outputs) -> dict[str, torch.Tensor]:
    logits = outputs.prediction_logits if hasattr(outputs, "prediction_logits") else outputs.logits
    labels, predictions = batch["labels"], logits.argmax(-1)
    if predictions.shape != labels.shape:  # sparse prediction: one row per labelled position, in order
        predictions = torch.full_like(labels, -100).masked_scatter(labels != -100, predictions)
    out = {"mlm_predictions": predictions, "mlm_labels": labels}
    if "next_sentence_label" in batch:
        out.update(nsp_predictions=outputs.seq_relationship_logits.argmax(-1), nsp_labels=batch["next_sentence_label"])
    return out


def metrics(predictions: dict[str, torch.Tensor], eval_loss: float) -> dict[str, float]:
    accuracy = load_metric("accuracy")
    keep = predictions["mlm_labels"] != -100
    out = {"mlm_accuracy": accuracy.compute(predictions=predictions["mlm_predictions"][keep].tolist(),
                                            references=predictions["mlm_labels"][keep].tolist())["accuracy"]}
    if "nsp_labels" in predictions:
        out["nsp_accuracy"] = accuracy.compute(predictions=predictions["nsp_predictions"].tolist(),
                                               references=predictions["nsp_labels"].tolist())["accuracy"]
    return out


def training_data(recipe, tokenizer, train_docs, eval_docs):
    """`(train, validation)` sentence pairs of the recipe's documents (validation None without documents); one
    process prepares a corpus's store, the others then open it."""
    with one_process_first():
        train = prepare_nsp_dataset(train_docs, tokenizer, recipe.max_seq_length, seed=recipe.seed,
                                    next_sentence=recipe.nsp, num_proc=recipe.num_proc,
                                    source=recipe.data_source("train", "embedded:documents"))
        validation = (prepare_nsp_dataset(eval_docs, tokenizer, recipe.max_seq_length, seed=recipe.seed + 1,
                                          next_sentence=recipe.nsp, num_proc=recipe.num_proc,
                                          source=recipe.split_name("validation", "embedded:documents"))
                      if eval_docs else None)
    return train, validation


def main(argv: list[str] | None = None):
    recipe = parse_args(argv, DEFAULT_RECIPE, __doc__.splitlines()[0], "pretrain_bert")
    seed_everything(recipe.seed)
    source = model_source(recipe, "pretrain_bert", ("bert",))
    train_docs, eval_docs = load_splits(recipe, [("text", "text")], "embedded:documents")
    check_documents(train_docs, recipe.data_source("train", "embedded:documents"))
    if eval_docs:
        check_documents(eval_docs, recipe.split_name("validation", "embedded:documents"))
    tokenizer = get_tokenizer(recipe, "bert", lambda: column_texts(train_docs), source=source,
                              data_key=data_key(train_docs, ["text"]))
    check_sequence_room(recipe, tokenizer, 2, "BERT pretraining's sentence pairs")
    model = build_model(recipe, "AutoModelForPreTraining" if recipe.nsp else "AutoModelForMaskedLM", tokenizer, "bert",
                        source)
    train_data, eval_data = training_data(recipe, tokenizer, train_docs, eval_docs)
    collate = MaskedLMCollator(tokenizer, mlm_probability=recipe.mlm_probability,
                               pad_to_multiple_of=recipe.pad_to_multiple_of)
    engine = Engine(recipe, model, train_data, collate, tokenizer=tokenizer, eval_dataset=eval_data,
                    loss_fn=make_loss_fn(recipe.nsp), predict_fn=predict, metrics_fn=metrics)
    with forward_options(model, sparse_prediction=True, **unpadding_on_gpu(model, engine.accelerator.device)):
        results = engine.train()
    results.update(source.report)
    folder = engine.save_final(results, card={
        "dataset_name": recipe.data_source("train", "embedded:documents"), "base_model": source.repo_id,
        "description": "Pretrained with masked-LM" + (" and next-sentence prediction. " if recipe.nsp else ". ")
                       + (source.card_text() if source.pretrained else "")})
    return results, folder


if __name__ == "__main__":
    main()
