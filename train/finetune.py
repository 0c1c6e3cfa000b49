"""Fine-tune BERT or GPT on a downstream task (the second step of both papers), from pretrained weights or from
scratch.

    python -m train.finetune --recipe bert-finetune-nli-tiny [--key value ...]
    python -m train.finetune --recipe ... --model outputs/bert-pretrain/model --task nli
    python -m train.finetune --recipe bert-base-finetune --train_file reviews.csv --text_column review \\
        --label_column stars --output_dir outputs/reviews   # google-bert/bert-base-uncased, converted on load

`--model` is a preset, a Lineage folder or Hub id, or a transformers BERT / OpenAI GPT / GPT-2 checkpoint (folder or
Hub id, converted on load and checked; `train.setup.models`); a pretrained model brings its own tokenizer.

Tasks (`task`): `sequence-classification` (single text; default data embedded:sentiment), `nli` (premise /
hypothesis pairs; embedded:nli), for BERT and GPT; `token-classification` (embedded:ner) and
`question-answering` (SQuAD-style; embedded:qa) for BERT. GPT's classification heads add the auxiliary
LM loss weighted by `lm_loss_weight` (section 3.2; the paper uses 0.5). BERT trains unpadded on a GPU
(`unpad_inputs`, an option of the training calls). Metrics: accuracy and macro F1
(token classification: over the first sub-token of every word); QA: exact match of the start/end tokens.
Every column is checked against what the task reads before anything is built (`train.data.files.KINDS`: a text
column holds strings, token classification's words a list of strings, QA's answers SQuAD's structure). Labels and
NER tags may be strings (`pos` / `neg`, `B-PER` / `O`: class ids in sorted order, the names in the saved config's
`id2label`) or integer ids (a tag of -100 marks a word the loss and metrics skip); both splits are checked before
training (`train.data.labels`): rows labelled -1 are skipped with a count when the recipe sets `skip_unlabeled`, and
a training split of one class is refused unless it sets `allow_single_class`.

With `streaming: true` the training split is read as training goes (`max_steps` sizes the run; docs/training.md,
"Streaming"), so nothing reads it whole before the first step: its classes come from its features (a `ClassLabel`
column, as the embedded corpus and many Hub datasets declare; data without one is refused, naming `streaming`), the
validation split (read whole) must declare the same ones, and its labels are not checked ahead (the loss refuses a
label that is no class when it meets it).

With the recipe key `lora` (`{r: 8, alpha: 16, dropout: 0.0, target_modules: null}`, peft installed) only a
LoRA adapter and the new head train (`train.setup.lora`); the adapter is saved to `<output_dir>/adapter` and the
merged model to `<output_dir>/model`.
"""

from __future__ import annotations

from pathlib import Path

import datasets
import torch

from train.data.collators import PaddingCollator
from train.data.labels import class_labels
from train.data.preparation import tokenize_dataset
from train.metrics import load_metric
from train.run.engine import Engine, forward_options, seed_everything, unpadding_on_gpu
from train.run.recipes import RecipeError, parse_args
from train.setup.lora import apply_lora, merge_lora
from train.setup.models import build_model, model_source
from train.setup.splits import check_sequence_room, load_splits
from train.setup.tokenizers import get_tokenizer

DEFAULT_RECIPE = "bert-finetune-nli-tiny"
# task -> (default data, columns text / pair / label, data.tokenize_dataset task, Auto class)
TASKS = {
    "sequence-classification": ("embedded:sentiment", ("text", None, "label"), "classification",
                                "AutoModelForSequenceClassification"),
    "nli": ("embedded:nli", ("premise", "hypothesis", "label"), "classification", "AutoModelForSequenceClassification"),
    "token-classification": ("embedded:ner", ("tokens", None, "ner_tags"), "token_classification",
                             "AutoModelForTokenClassification"),
    "question-answering": ("embedded:qa", ("question", "context", None), "qa", "AutoModelForQuestionAnswering"),
}
# data.tokenize_dataset task -> the kinds (train.data.files.KINDS) of its text and label columns
COLUMN_KINDS = {"classification": ("text", "label"), "token_classification": ("words", "tags"), "qa": ("text", None)}


def predict(model, batch, outputs) -> dict[str, torch.Tensor]:
    if "start_positions" in batch:
        return {"start": outputs.start_logits.argmax(-1), "end": outputs.end_logits.argmax(-1),
                "start_labels": batch["start_positions"], "end_labels": batch["end_positions"]}
    return {"predictions": outputs.logits.argmax(-1), "labels": batch["labels"]}


def metrics(predictions: dict[str, torch.Tensor], eval_loss: float) -> dict[str, float]:
    if "start" in predictions:
        hit = (predictions["start"] == predictions["start_labels"]) & (predictions["end"] == predictions["end_labels"])
        return {"exact_match": hit.float().mean().item()}
    keep = predictions["labels"] != -100
    preds, refs = predictions["predictions"][keep].tolist(), predictions["labels"][keep].tolist()
    return {"accuracy": load_metric("accuracy").compute(predictions=preds, references=refs)["accuracy"],
            "f1": load_metric("f1").compute(predictions=preds, references=refs, average="macro")["f1"]}


def _label_fields(names: list[str] | None) -> dict:
    """The config fields of a head with these label names (none for QA)."""
    if names is None:
        return {}
    return {"num_labels": len(names), "id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}


def streamed_labels(train: datasets.IterableDataset, validation: datasets.Dataset | None, column: str,
                    files: tuple[str, str], skip_unlabeled: bool):
    """`(names, train, validation)` for a streamed training split (module docstring); with `skip_unlabeled` rows
    labelled -1 are left out of both as they are read."""
    def declared(dataset) -> list[str] | None:
        feature = (dataset.features or {}).get(column)
        feature = getattr(feature, "feature", feature)  # the tags of a list column
        return list(feature.names) if isinstance(feature, datasets.ClassLabel) else None

    names = declared(train)
    if names is None:
        raise RecipeError(f"recipe key 'streaming' is true, but {files[0]} declares no classes for column {column!r} "
                          f"(no datasets ClassLabel feature): finetune would have to read the whole stream to collect "
                          f"them before training; set streaming: false")
    if validation is not None and declared(validation) != names:
        raise RecipeError(f"recipe key 'streaming' is true: the classes of column {column!r} come from the training "
                          f"stream's features ({names}), but {files[1]} declares {declared(validation)}; give "
                          f"validation data with the same ClassLabel feature, or set streaming: false")
    if skip_unlabeled:
        def labelled(value) -> bool:
            return -1 not in (value if isinstance(value, list) else [value])

        train = train.filter(labelled, input_columns=column)
        validation = validation.filter(labelled, input_columns=column) if validation is not None else None
    return names, train, validation


def main(argv: list[str] | None = None):
    recipe = parse_args(argv, DEFAULT_RECIPE, __doc__.splitlines()[0], "finetune")
    if recipe.task not in TASKS:
        raise RecipeError(f"recipe key 'task' must be one of {', '.join(TASKS)}, got {recipe.task!r}")
    seed_everything(recipe.seed)
    default_data, (text, pair, label), encode_task, auto_class = TASKS[recipe.task]
    source = model_source(recipe, "finetune", ("bert", "gpt"))
    family = source.family
    if family == "gpt" and encode_task != "classification":
        raise RecipeError(f"recipe key 'task': {recipe.task!r} needs a BERT model; {recipe.model!r} is a GPT model, "
                          "whose heads serve the tasks sequence-classification and nli")
    text, pair, label = recipe.text_column or text, recipe.text_pair_column or pair, recipe.label_column or label
    named = {key: column for key, column in (("text_column", text), ("text_pair_column", pair),
                                               ("label_column", label)) if column}
    for key, column in named.items():
        same = [other for other, c in named.items() if c == column and other != key]
        if same:
            raise RecipeError(f"recipe keys {key!r} and {same[0]!r} both name the column {column!r}: each must name "
                              f"its own column (the texts, the second texts, the labels)")
    text_kind, label_kind = COLUMN_KINDS[encode_task]
    columns = [(c, kind) for c, kind in ((text, text_kind), (pair, "text"), (label, label_kind)) if c]
    if encode_task == "qa":
        columns.append(("answers", "answers"))
    train_rows, eval_rows = load_splits(recipe, columns, default_data)

    def texts():
        for row in train_rows:
            for column in (text, pair):
                if column:
                    yield " ".join(row[column]) if isinstance(row[column], list) else row[column]

    names = None
    if label:  # checked before a tokenizer is trained or anything is written
        files = (recipe.split_name("train", default_data), recipe.split_name("validation", default_data))
        if recipe.streaming:
            names, train_rows, eval_rows = streamed_labels(train_rows, eval_rows, label, files, recipe.skip_unlabeled)
        else:
            names, train_rows, eval_rows = class_labels(train_rows, eval_rows, label, files, recipe.skip_unlabeled,
                                                        recipe.allow_single_class)
    tokenizer = get_tokenizer(recipe, family, texts, source)
    check_sequence_room(recipe, tokenizer, 2 if pair else 1, f"{recipe.task} with a {family} template")
    fields = _label_fields(names)
    if family == "gpt":
        fields["lm_loss_weight"] = recipe.lm_loss_weight
    model = build_model(recipe, auto_class, tokenizer, family, source, **fields)
    if recipe.lora is not None:
        model = apply_lora(model, recipe.lora)
    encode = {"classification": {"text_column": text, "text_pair_column": pair, "label_column": label,
                                 "max_length": recipe.max_seq_length},
              "token_classification": {"tokens_column": text, "tags_column": label, "max_length": recipe.max_seq_length},
              "qa": {"max_length": recipe.max_seq_length, "doc_stride": recipe.max_seq_length // 4}}[encode_task]
    train_data = tokenize_dataset(train_rows, tokenizer, encode_task, **encode)
    eval_data = tokenize_dataset(eval_rows, tokenizer, encode_task, **encode) if eval_rows else None
    engine = Engine(recipe, model, train_data, PaddingCollator(tokenizer, recipe.pad_to_multiple_of),
                    tokenizer=tokenizer, eval_dataset=eval_data, predict_fn=predict, metrics_fn=metrics)
    with forward_options(model, **unpadding_on_gpu(model, engine.accelerator.device)):
        results = engine.train()
    if recipe.lora is not None:
        merge_lora(engine, Path(recipe.output_dir) / "adapter")
    results.update(source.report)
    folder = engine.save_final(results, card={"dataset_name": recipe.data_source("train", default_data),
                                              "description": f"Fine-tuned for {recipe.task}. {source.card_text()}",
                                              "base_model": source.repo_id})
    return results, folder


if __name__ == "__main__":
    main()
