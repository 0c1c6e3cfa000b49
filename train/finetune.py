"""Fine-tune BERT or GPT on a downstream task (the second step of both papers), from pretrained weights or scratch.

    python -m train.finetune --recipe bert-finetune-nli-tiny [--key value ...]
    python -m train.finetune --recipe ... --model outputs/bert-pretrain/model --task nli
    python -m train.finetune --recipe bert-base-finetune --train_file reviews.csv --text_column review \\
        --label_column stars --output_dir outputs/reviews   # google-bert/bert-base-uncased, converted on load

Tasks (`task`): `sequence-classification`, `nli` and `regression` (a score per text or pair, as STS-B's; your data
only) for BERT and GPT (GPT adds the auxiliary LM loss); `token-classification` and `question-answering` (BERT).
Columns and labels are checked before anything is written (`train.data.labels`). docs/training.md ("Fine-tuning",
"Labels and sequence lengths", "Streaming").
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import datasets
import torch

from train.cli import run_script
from train.data.collators import PaddingCollator
from train.data.encoders import RowError
from train.data.labels import class_labels, score_labels, streamed_class_labels
from train.data.model_inputs import count_cut_questions, tokenize_dataset
from train.data.table_files import row_location
from train.metrics import load_metric
from train.run.engine import Engine, TokenMean
from train.run.recipes import RecipeError, parse_args
from train.run.run_folder import start_run
from train.setup.lora import apply_lora, check_lora, merge_lora
from train.setup.models import build_model, model_positions, model_source
from train.setup.run_tokenizer import get_tokenizer
from train.setup.splits import check_sequence_room, load_splits, qa_doc_stride, question_room_problem, row_texts

DEFAULT_RECIPE = "bert-finetune-nli-tiny"


class Task(NamedTuple):
    default_data: str | None  # what it reads when the recipe names no data (None: the user's data only)
    columns: tuple[str | None, str | None, str | None]  # the text, second text and label columns it reads by default
    encoding: str  # the task of data.tokenize_dataset
    auto_class: str
    scores: bool = False  # its labels are real numbers (regression), not classes


TASKS = {
    "sequence-classification": Task("embedded:sentiment", ("text", None, "label"), "classification",
                                    "AutoModelForSequenceClassification"),
    "nli": Task("embedded:nli", ("premise", "hypothesis", "label"), "classification",
                "AutoModelForSequenceClassification"),
    "token-classification": Task("embedded:ner", ("tokens", None, "ner_tags"), "token_classification",
                                 "AutoModelForTokenClassification"),
    "question-answering": Task("embedded:qa", ("question", "context", None), "qa", "AutoModelForQuestionAnswering"),
    "regression": Task(None, ("text", None, "label"), "classification", "AutoModelForSequenceClassification",
                       scores=True),
}
# data.tokenize_dataset task -> the kinds (train.data.files.KINDS) of its text and label columns
COLUMN_KINDS = {"classification": ("text", "label"), "token_classification": ("words", "tags"), "qa": ("text", None)}
REGRESSION_HEAD = {"num_labels": 1, "problem_type": "regression"}  # MSE; pipelines return the raw score


MAX_ANSWER_TOKENS = 30  # the longest answer span a prediction may take (transformers' and the BERT paper's scripts)


def predict(model, batch, outputs) -> dict[str, torch.Tensor]:
    if "start_positions" in batch:
        return answer_spans(outputs.start_logits, outputs.end_logits, batch)
    return {"predictions": outputs.logits.argmax(-1), "labels": batch["labels"]}


def predict_scores(model, batch, outputs) -> dict[str, torch.Tensor]:
    """A regression head's predictions: its one output per example, (B,)."""
    return {"predictions": outputs.logits.squeeze(-1), "labels": batch["labels"]}


def answer_spans(start_logits: torch.Tensor, end_logits: torch.Tensor, batch: dict) -> dict[str, torch.Tensor]:
    """Each window's best answer span in its context (segment 1 without its [SEP]), at most `MAX_ANSWER_TOKENS`
    long, with its score (start + end logit) and the no-answer score ([CLS]'s), each (B,)."""
    mask = batch["attention_mask"].bool()
    context = (batch["token_type_ids"] == 1) & mask
    context[torch.arange(len(mask)), mask.sum(-1) - 1] = False  # the final [SEP]
    scores = start_logits[:, :, None] + end_logits[:, None, :]  # (B, start, end)
    positions = torch.arange(mask.shape[1], device=mask.device)
    length = positions[None, :] - positions[:, None]  # end - start
    valid = context[:, :, None] & context[:, None, :] & (length >= 0) & (length < MAX_ANSWER_TOKENS)
    best, where = scores.masked_fill(~valid, -torch.inf).flatten(1).max(-1)
    return {"start": where // mask.shape[1], "end": where % mask.shape[1], "score": best,
            "null": start_logits[:, 0] + end_logits[:, 0]}


def answer_metrics(data, rows, unanswerable: bool | None = None, threshold: float = 0.0):
    """`(data without its offsets, metrics_fn, answers_fn)`: SQuAD's exact match and F1 per question
    (`train/metrics/squad.py`) of the texts `answers_fn(predictions)` gives, each question answered by the best span of
    its windows (`answer_spans`) as text of its context, or by no answer where questions may be `unanswerable` (None:
    where the data has unanswerable questions, SQuAD 2.0) and the lowest [CLS] score of its windows exceeds that span's
    by more than `threshold` (run_qa.py's null_score_diff_threshold); the metric also sweeps the threshold."""
    windows = list(zip(data["example_id"], data["offset_mapping"]))
    contexts, answers = rows["context"], [answer["text"] for answer in rows["answers"]]
    unanswerable = not all(answers) if unanswerable is None else unanswerable
    limit = threshold if unanswerable else torch.inf  # every question answered: no difference is above it

    def best_spans(predictions: dict[str, torch.Tensor]) -> tuple[list[str], list[float]]:
        """Each question's best span text ("": none) and null minus its score (inf: none)."""
        found = {name: predictions[name].tolist() for name in ("start", "end", "score", "null")}
        if len(found["start"]) != len(windows):
            raise ValueError(f"{len(found['start'])} predictions for the {len(windows)} windows of the questions")
        best, null = {}, {}
        for (example, offsets), start, end, score, empty in zip(windows, *found.values()):
            null[example] = min(null.get(example, torch.inf), empty)
            if offsets[start] is not None and offsets[end] is not None and score > best.get(example, (-torch.inf,))[0]:
                best[example] = (score, contexts[example][offsets[start][0]:offsets[end][1]])
        spans = [best.get(example, (-torch.inf, "")) for example in range(len(contexts))]
        return [text for _, text in spans], [null.get(example, torch.inf) - score
                                             for example, (score, _) in enumerate(spans)]

    def answered(predictions: dict[str, torch.Tensor]) -> list[str]:
        texts, differences = best_spans(predictions)
        return ["" if difference > limit else text for text, difference in zip(texts, differences)]

    def metrics(predictions: dict[str, torch.Tensor], eval_loss: float) -> dict[str, float]:
        texts, differences = best_spans(predictions)
        return load_metric("squad").compute(predictions=texts, references=answers, no_answer_scores=differences,
                                            null_score_diff_threshold=limit)

    return data.remove_columns(["example_id", "offset_mapping"]), metrics, answered


def no_answer_rule(train_rows, eval_rows, threshold: float = 0.0) -> dict:
    """The saved pipeline's `handle_impossible_answer`: whether the model learnt to score [CLS] above the spans of a
    question without an answer, as its training rows say (in memory: their answers are read once more); a stream,
    not read ahead, by its validation rows (`answer_metrics`' rule); neither: nothing (the pipeline's default, off).
    Where it is on, the `threshold` the rule applies too (`null_score_diff_threshold`)."""
    rows = train_rows if isinstance(train_rows, datasets.Dataset) else eval_rows
    if rows is None:
        return {}
    rule = not all(a["text"] for a in rows["answers"])
    return {"handle_impossible_answer": rule, **({"null_score_diff_threshold": threshold} if rule else {})}


def label_metrics(names: list[str]):
    """The metrics_fn of a classifier of the classes `names` (by id): accuracy, macro F1 and the Matthews
    correlation (CoLA's) over the labelled positions (a word's first sub-token); of two classes, also the F1 of class
    1 (MRPC's and QQP's `binary_f1`); for tags of the IOB scheme (O, B-X, I-X: CoNLL's), also conlleval's entity
    precision, recall and F1 over each sentence's words."""
    iob = all(name == "O" or name[:2] in ("B-", "I-") for name in names)

    def metrics(predictions: dict[str, torch.Tensor], eval_loss: float) -> dict[str, float]:
        labels, predicted = predictions["labels"], predictions["predictions"]
        keep = labels != -100
        preds, refs = predicted[keep].tolist(), labels[keep].tolist()
        scores = {"accuracy": load_metric("accuracy").compute(predictions=preds, references=refs)["accuracy"],
                  "f1": load_metric("f1").compute(predictions=preds, references=refs, average="macro")["f1"],
                  **load_metric("matthews_correlation").compute(predictions=preds, references=refs)}
        if len(names) == 2:
            scores["binary_f1"] = load_metric("f1").compute(predictions=preds, references=refs, pos_label=1)["f1"]
        if labels.ndim == 2 and iob:
            sentences = [([names[i] for i in p[k].tolist()], [names[i] for i in r[k].tolist()])
                         for p, r, k in zip(predicted, labels, keep)]
            scores.update(load_metric("entity_f1").compute(predictions=[s[0] for s in sentences],
                                                           references=[s[1] for s in sentences]))
        return scores

    return metrics


def score_metrics(predictions: dict[str, torch.Tensor], eval_loss: float) -> dict[str, float]:
    """The metrics_fn of a regression head: Pearson's and Spearman's correlation (STS-B's GLUE figures, named as GLUE
    and transformers' run_glue name them) and the mean squared error; a correlation is NaN where it is undefined (a
    constant prediction: `train/metrics/pearsonr.py`)."""
    preds, refs = predictions["predictions"].tolist(), predictions["labels"].tolist()
    return {"pearson": load_metric("pearsonr").compute(predictions=preds, references=refs)["pearsonr"],
            "spearmanr": load_metric("spearmanr").compute(predictions=preds, references=refs)["spearmanr"],
            **load_metric("mse").compute(predictions=preds, references=refs)}


def scoring(task: Task, names: list[str]):
    """`(predict_fn, metrics_fn)` of the head of a classification task with the classes `names`, or of regression's
    (question answering replaces the metrics_fn with `answer_metrics`)."""
    return (predict_scores, score_metrics) if task.scores else (predict, label_metrics(names))


def _label_fields(names: list[str] | None) -> dict:
    """The config fields of a head with these label names (none for QA)."""
    if names is None:
        return {}
    return {"num_labels": len(names), "id2label": dict(enumerate(names)),
            "label2id": {n: i for i, n in enumerate(names)}}


def task_columns(recipe, task: str) -> tuple[str | None, str | None, str | None]:
    """The text, second text and label columns of `task` (the recipe's keys name others), each its own."""
    text, pair, label = TASKS[task].columns
    text, pair, label = recipe.text_column or text, recipe.text_pair_column or pair, recipe.label_column or label
    named = {key: column for key, column in (("text_column", text), ("text_pair_column", pair),
                                               ("label_column", label)) if column}
    for key, column in named.items():
        same = [other for other, c in named.items() if c == column and other != key]
        if same:
            raise RecipeError(f"recipe keys {key!r} and {same[0]!r} both name the column {column!r}: each must name "
                              f"its own column (the texts, the second texts, the labels)")
    return text, pair, label


def read_columns(task: Task, text: str, pair: str | None, label: str | None) -> list[tuple[str, str]]:
    """The columns `task` reads, each with the kind of value it holds (`train.data.files.KINDS`)."""
    text_kind, label_kind = COLUMN_KINDS[task.encoding]
    columns = [(text, text_kind), (pair, "text"), (label, "score" if task.scores else label_kind)]
    return [(c, kind) for c, kind in columns if c] + ([("answers", "answers")] if task.encoding == "qa" else [])


def check_data_given(recipe) -> None:
    """Refuse, before any work, a task without embedded data (regression: the embedded corpus holds classes, not
    scores) run without the user's data: `train_file`, or a `dataset` the user set (a shipped recipe's is no data of
    the task's) that is not embedded."""
    dataset = recipe.dataset if "dataset" in recipe.set_by_user else ""
    if recipe.train_file or (dataset and not dataset.startswith("embedded:")):
        return
    read = f"; the recipe's dataset is {recipe.dataset!r}" if recipe.dataset else ""
    raise RecipeError(f"recipe key 'task' is {recipe.task!r}, which has no embedded data (the embedded corpus holds "
                      f"classes{read}): name your data with 'train_file' (a CSV, JSON Lines or parquet file, or a "
                      f"save_to_disk folder) or 'dataset' (a Hub dataset, e.g. nyu-mll/glue with dataset_config stsb)")


def load_rows(recipe, task: Task, text: str, pair: str | None, label: str | None):
    """`(names, train, validation, read)`: both splits, each column checked against what the task reads, the class
    names (None for scores) with both splits' labels checked (before a tokenizer is trained or anything is written),
    and the training rows read before `skip_unlabeled` left any out (None for a stream, which nothing counts ahead:
    it counts the rows it skips as it reads them, in `recipe.skipped_unlabeled`)."""
    train_rows, eval_rows = load_splits(recipe, read_columns(task, text, pair, label))
    read = None if recipe.streaming else len(train_rows)
    if not label:
        return None, train_rows, eval_rows, read
    files = (recipe.split_name("train"), recipe.split_name("validation"))
    counts: dict = {}  # the rows skip_unlabeled leaves out of a stream, counted as it reads them (results.json)
    if task.scores:
        rows = (None, *score_labels(train_rows, eval_rows, label, files, recipe.skip_unlabeled, counts))
    elif recipe.streaming:
        rows = streamed_class_labels(train_rows, eval_rows, label, files, recipe.skip_unlabeled, counts)
    else:
        rows = class_labels(train_rows, eval_rows, label, files, recipe.skip_unlabeled, recipe.allow_single_class)
    recipe.skipped_unlabeled = counts.get("skipped_unlabeled")
    return *rows, read


def trained_rows(read: int | None, train, skipped: bool, cut: int | None = None) -> dict[str, int]:
    """What results.json and the card record of the training rows: `train_rows`, those trained on, where
    `skip_unlabeled` acted, `skipped_unlabeled`, those it left out of the `read` (`train_size` counts them all, as
    a re-run reads them), and for question answering `questions_cut`, the questions `cut` to `max_query_length`
    tokens; nothing for a stream, whose rows are counted by nothing before they train."""
    if read is None:
        return {}
    return {"train_rows": len(train), **({"skipped_unlabeled": read - len(train)} if skipped else {}),
            **({"questions_cut": cut} if cut is not None else {})}


def encoded(recipe, tokenizer, task: str, rows, text: str, pair: str | None, label: str | None,
            source: str, skipped: bool = False, scored: bool = False):
    """`(rows of source tokenized for task, the questions cut)`: `task` a name of `TASKS`, which the progress bar
    shows; QA questions cut to `max_query_length` tokens, counted and said once where any is (None: not QA, or a
    stream, which nothing counts ahead). A row it cannot encode is refused naming its file and line (its row among
    those kept, where `skip_unlabeled` `skipped` some). `scored` QA windows keep their question and offsets
    (`answer_metrics`)."""
    length, encode_task = recipe.max_seq_length, TASKS[task].encoding
    cut = count_cut_questions(rows, tokenizer, recipe.max_query_length, source) if encode_task == "qa" else None
    encode = {"classification": {"text_column": text, "text_pair_column": pair, "label_column": label,
                                 "max_length": length},
              "token_classification": {"tokens_column": text, "tags_column": label, "max_length": length},
              "qa": {"max_length": length, "doc_stride": qa_doc_stride(length, recipe.doc_stride),
                     "max_query_length": recipe.max_query_length, "keep_offsets": scored}}[encode_task]
    try:
        return tokenize_dataset(rows, tokenizer, encode_task, name=task, **encode), cut
    except RowError as error:
        where = (f"{source}: row {error.row} of the rows skip_unlabeled kept" if skipped
                 else row_location(source, error.row, error.column))
        raise type(error)(f"{where}{error.qualifier}: {error.detail}") from None


def _auxiliary_lm(recipe, family: str) -> TokenMean | None:
    """GPT's training loss with the auxiliary LM loss, L2 + lambda * L1: L1 is a mean over the tokens that follow each
    row's first, weighted by this process's share of them so that N processes train as one (`TokenMean`)."""
    if family != "gpt" or not recipe.lm_loss_weight:
        return None
    return TokenMean(term="lm_loss", first_label=1, counted="attention_mask", weight=recipe.lm_loss_weight,
                     plus=("classification_loss",))


def main(argv: list[str] | None = None):
    recipe = parse_args(argv, DEFAULT_RECIPE, __doc__.splitlines()[0], "finetune")
    if recipe.task not in TASKS:
        raise RecipeError(f"recipe key 'task' must be one of {', '.join(TASKS)}, got {recipe.task!r}")
    task = TASKS[recipe.task]
    encode_task, auto_class = task.encoding, task.auto_class
    if task.default_data is None:
        check_data_given(recipe)
    recipe = recipe.reading(task.default_data or "")
    source = model_source(recipe, "finetune", ("bert", "gpt"))
    family = source.family
    if family == "gpt" and encode_task != "classification":
        served = ", ".join(name for name, t in TASKS.items() if t.encoding == "classification")
        raise RecipeError(f"recipe key 'task': {recipe.task!r} needs a BERT model; {recipe.model!r} is a GPT model, "
                          f"whose heads serve the tasks {served}")
    if encode_task == "qa" and (problem := question_room_problem(
            recipe.max_seq_length, recipe.max_query_length, model_positions(recipe, source.config), recipe.doc_stride)):
        keys = "'max_seq_length' and 'max_query_length'" if recipe.doc_stride is None else (
            "'max_seq_length', 'max_query_length' and 'doc_stride'")
        raise RecipeError(f"recipe keys {keys}: {problem}")
    if recipe.lora is not None:
        check_lora(recipe, source, auto_class)
    text, pair, label = task_columns(recipe, recipe.task)
    names, train_rows, eval_rows, read = load_rows(recipe, task, text, pair, label)
    with start_run(recipe) as run:
        tokenizer = get_tokenizer(recipe, family, lambda: row_texts(train_rows, (text, pair)), source, run=run)
        check_sequence_room(recipe, tokenizer, 2 if pair else 1, f"{recipe.task} with a {family} template")
        fields = dict(REGRESSION_HEAD) if task.scores else _label_fields(names)
        if family == "gpt":
            fields["lm_loss_weight"] = recipe.lm_loss_weight
        model = build_model(recipe, auto_class, tokenizer, family, source, **fields)
        if encode_task == "qa":  # the saved pipeline's defaults, read where this project is not installed (set on the
            # config built: transformers 5 has no such config field, so from_pretrained would hand it to the model);
            # doc_stride unset: none saved, the pipeline takes a quarter of its window as the run did of its own
            model.config.task_specific_params = {"question-answering": {
                "max_question_len": recipe.max_query_length,
                **({} if recipe.doc_stride is None else {"doc_stride": recipe.doc_stride}),
                **no_answer_rule(train_rows, eval_rows, recipe.null_score_diff_threshold)}}
        if recipe.lora is not None:
            model = apply_lora(model, recipe.lora)
        skipped = recipe.skip_unlabeled and label is not None
        train_data, cut = encoded(recipe, tokenizer, recipe.task, train_rows, text, pair, label,
                                  recipe.split_name("train"), skipped)
        eval_data = (encoded(recipe, tokenizer, recipe.task, eval_rows, text, pair, label,
                             recipe.split_name("validation"), skipped, scored=True)[0] if eval_rows else None)
        predict_fn, scores = scoring(task, names or [])
        if encode_task == "qa" and eval_data is not None:
            eval_data, scores, _ = answer_metrics(eval_data, eval_rows, threshold=recipe.null_score_diff_threshold)
        engine = Engine(run, model, train_data, PaddingCollator(tokenizer, recipe.pad_to_multiple_of),
                        tokenizer=tokenizer, eval_dataset=eval_data, token_mean=_auxiliary_lm(recipe, family),
                        unpad_inputs=True, predict_fn=predict_fn, metrics_fn=scores)
        results = {**engine.train(), **trained_rows(read, train_rows, skipped, cut)}
        if recipe.lora is not None:
            merge_lora(engine, Path(recipe.output_dir) / "adapter", source)
        return results, engine.finish(results, description=f"Fine-tuned for {recipe.task}.", source=source)


if __name__ == "__main__":
    run_script(main)
