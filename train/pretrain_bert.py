"""Pretrain BERT with masked-LM + next-sentence prediction (Devlin et al. 2018, section 3.1).

    python -m train.pretrain_bert --recipe bert-pretrain-tiny [--key value ...]
    accelerate launch -m train.pretrain_bert --recipe ... (one GPU, DDP, FSDP, several CPU processes)
    python -m train.pretrain_bert --recipe bert-pretrain-tiny --model google-bert/bert-base-uncased --train_file a.txt

Documents -> sentence pairs (`train.setup.pretraining`) -> dynamic masking (`MaskedLMCollator`);
with `nsp: false` the model is `...ForMaskedLM`. The engine trains with `sparse_prediction` (and `unpad_inputs` on a
GPU) and the MLM term as a token mean across processes; evaluation sees full logits. docs/training.md ("Commands",
"Pretraining corpora: prepared once").
"""

from __future__ import annotations

import torch

from train.cli import run_script
from train.data.collators import MaskedLMCollator
from train.data.token_store import data_key
from train.metrics import load_metric
from train.run.engine import Engine, TokenMean
from train.run.recipes import parse_args
from train.run.run_folder import start_run
from train.setup.models import build_model, model_source
from train.setup.pretraining import pretraining_data, pretraining_documents
from train.setup.run_tokenizer import get_tokenizer
from train.setup.splits import check_sequence_room, column_texts

DEFAULT_RECIPE = "bert-pretrain-tiny"
DATA = "embedded:documents"  # when the recipe names no data


def predict(model, batch, outputs) -> dict[str, torch.Tensor]:
    logits = outputs.prediction_logits if hasattr(outputs, "prediction_logits") else outputs.logits
    out = {"mlm_predictions": logits.argmax(-1), "mlm_labels": batch["labels"]}
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


def main(argv: list[str] | None = None):
    recipe = parse_args(argv, DEFAULT_RECIPE, __doc__.splitlines()[0], "pretrain_bert").reading(DATA)
    source = model_source(recipe, "pretrain_bert", ("bert",))
    train_docs, eval_docs = pretraining_documents(recipe, "bert")
    with start_run(recipe) as run:
        tokenizer = get_tokenizer(recipe, "bert", lambda: column_texts(train_docs), source=source,
                                  data_key=data_key(train_docs, ["text"]), run=run)
        check_sequence_room(recipe, tokenizer, 2, "BERT pretraining's sentence pairs")
        model = build_model(recipe, "AutoModelForPreTraining" if recipe.nsp else "AutoModelForMaskedLM", tokenizer,
                            "bert", source)
        train_data, eval_data = pretraining_data(recipe, "bert", tokenizer, train_docs, eval_docs)
        collate = MaskedLMCollator(tokenizer, mlm_probability=recipe.mlm_probability,
                                   pad_to_multiple_of=recipe.pad_to_multiple_of)
        loss = TokenMean(term="mlm_loss", plus=("nsp_loss",)) if recipe.nsp else TokenMean()
        engine = Engine(run, model, train_data, collate, tokenizer=tokenizer, eval_dataset=eval_data,
                        token_mean=loss, sparse_prediction=True, unpad_inputs=True, predict_fn=predict,
                        metrics_fn=metrics)
        results = engine.train()
        description = "Pretrained with masked-LM" + (" and next-sentence prediction." if recipe.nsp else ".")
        return results, engine.finish(results, description=description, source=source)


if __name__ == "__main__":
    run_script(main)
