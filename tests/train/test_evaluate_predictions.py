"""`lineage evaluate --predictions`: each row's prediction beside its reference in predictions.jsonl, the model's own
output for that row alone (unpadded), and the figures of results.json those predictions give; the field's own files
(sacreBLEU's hypotheses a line each, SQuAD's id -> answer, conlleval's word, reference and prediction); refused where
no data set is scored. Data without its labels (or answers) gets the predictions of the same rows labelled, alone."""

import json

import pytest
import torch
from conftest import model_folder
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from modeling import (
    LineageBertForMaskedLM,
    LineageBertForQuestionAnswering,
    LineageBertForSequenceClassification,
    LineageBertForTokenClassification,
    LineageTransformerForConditionalGeneration,
)
from train import evaluate
from train.analysis.experiment import translate
from train.data.corpus import NER_LABELS, generate_records
from train.metrics import load_metric


def predicted(out) -> list[dict]:
    return [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]


def test_a_classifiers_predictions_are_its_own_outputs_and_give_its_figures(tmp_path):
    names = ["entailment", "neutral", "contradiction"]
    folder = model_folder(tmp_path, "bert", LineageBertForSequenceClassification, 400, num_labels=3,
                          id2label=dict(enumerate(reversed(names))),
                          label2id={n: i for i, n in enumerate(reversed(names))})
    out = evaluate.main(["--model", str(folder), "--task", "nli", "--dataset", "embedded:nli", "--eval_size", "12",
                         "--batch_size", "5", "--predictions", "--output_dir", str(tmp_path / "eval")])
    rows, model = generate_records("nli", "test", seed=42, size=12), LineageBertForSequenceClassification
    model, tokenizer = model.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        own = [model.config.id2label[model(**tokenizer(r["premise"], r["hypothesis"], return_tensors="pt"))
                                     .logits.argmax().item()] for r in rows]
    lines = predicted(out)
    assert [line["row"] for line in lines] == list(range(12))
    assert [line["prediction"] for line in lines] == own
    assert [line["reference"] for line in lines] == [names[r["label"]] for r in rows]
    figures = json.loads((out / "results.json").read_text())["scores"]["nli"]
    assert figures["accuracy"] == pytest.approx(sum(a == b for a, b in zip(own, (names[r["label"]] for r in rows)))
                                                / 12)
    assert not (out / "predictions.txt").exists() and not (out / "predictions.json").exists()
    assert "predictions" not in json.loads((out / "results.json").read_text())


def test_a_test_set_holding_some_of_the_models_classes_is_scored_by_their_names(tmp_path):
    """A test set without one of the model's classes (no 'neutral' row; a tagger's set without an entity type) is
    scored as it is: its labels are the model's classes by name (before: datasets refused the label ids mapped to the
    model's, 'Class label 2 greater than configured num_classes 2')."""
    names = ["entailment", "neutral", "contradiction"]
    folder = model_folder(tmp_path, "bert", LineageBertForSequenceClassification, 400, num_labels=3,
                          id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)})
    rows = [{**r, "label": names[2] if i % 2 else names[0]}
            for i, r in enumerate(generate_records("nli", "test", size=6))]
    data = tmp_path / "two-classes.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = evaluate.main(["--model", str(folder), "--task", "nli", "--dataset", str(data), "--text_column", "premise",
                         "--text_pair_column", "hypothesis", "--predictions", "--output_dir", str(tmp_path / "eval")])
    lines = predicted(out)
    assert [line["reference"] for line in lines] == [r["label"] for r in rows]
    figures = json.loads((out / "results.json").read_text())["scores"]["nli"]
    assert figures["accuracy"] == pytest.approx(sum(line["prediction"] == line["reference"] for line in lines) / 6)
    tagger = model_folder(tmp_path / "ner", "bert", LineageBertForTokenClassification, 400,
                          num_labels=len(NER_LABELS), id2label=dict(enumerate(NER_LABELS)),
                          label2id={n: i for i, n in enumerate(NER_LABELS)})
    sentences = tmp_path / "few-tags.jsonl"
    sentences.write_text(json.dumps({"tokens": ["Oslo", "sleeps"], "ner_tags": ["B-LOC", "O"]}) + "\n")
    tagged = evaluate.main(["--model", str(tagger), "--task", "token-classification", "--dataset", str(sentences),
                            "--predictions", "--output_dir", str(tmp_path / "eval-ner")])
    assert predicted(tagged)[0]["reference"] == ["B-LOC", "O"]


def test_a_regression_heads_predictions_are_its_scores(tmp_path):
    folder = model_folder(tmp_path, "bert", LineageBertForSequenceClassification, 400, num_labels=1,
                          problem_type="regression")
    data = tmp_path / "scores.jsonl"
    rows = [{"text": r["premise"], "label": float(i % 5)} for i, r in enumerate(generate_records("nli", "test",
                                                                                                 size=10))]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = evaluate.main(["--model", str(folder), "--task", "regression", "--dataset", str(data), "--predictions",
                         "--output_dir", str(tmp_path / "eval")])
    model, tokenizer = LineageBertForSequenceClassification.from_pretrained(folder), AutoTokenizer.from_pretrained(
        folder)
    with torch.no_grad():
        own = [model(**tokenizer(r["text"], return_tensors="pt")).logits[0, 0].item() for r in rows]
    lines = predicted(out)
    assert [line["prediction"] for line in lines] == pytest.approx(own, abs=1e-5)
    assert [line["reference"] for line in lines] == [r["label"] for r in rows]
    pearson = load_metric("pearsonr").compute(predictions=[line["prediction"] for line in lines],
                                              references=[r["label"] for r in rows])["pearsonr"]
    assert json.loads((out / "results.json").read_text())["scores"]["regression"]["pearson"] == pytest.approx(pearson)


def test_a_taggers_predictions_are_a_tag_per_word_its_first_sub_tokens(tmp_path):
    folder = model_folder(tmp_path, "bert", LineageBertForTokenClassification, 400, num_labels=len(NER_LABELS),
                          id2label=dict(enumerate(NER_LABELS)), label2id={n: i for i, n in enumerate(NER_LABELS)})
    out = evaluate.main(["--model", str(folder), "--task", "token-classification", "--dataset", "embedded:ner",
                         "--eval_size", "8", "--batch_size", "3", "--predictions", "--output_dir",
                         str(tmp_path / "eval")])
    rows = generate_records("ner", "test", seed=42, size=8)
    model, tokenizer = LineageBertForTokenClassification.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    lines = predicted(out)
    for row, line in zip(rows, lines, strict=True):
        encoded = tokenizer(row["tokens"], is_split_into_words=True, return_tensors="pt")
        words = encoded.word_ids()
        firsts = [i for i, w in enumerate(words) if w is not None and (i == 0 or words[i - 1] != w)]
        with torch.no_grad():
            tags = model(**encoded).logits[0].argmax(-1).tolist()
        assert line["prediction"] == [NER_LABELS[tags[i]] for i in firsts]
        assert line["reference"] == [NER_LABELS[t] for t in row["ner_tags"]] and line["words"] == row["tokens"]
    words = [(p, r) for line in lines for p, r in zip(line["prediction"], line["reference"])]
    figures = json.loads((out / "results.json").read_text())["scores"]["token-classification"]
    assert figures["accuracy"] == pytest.approx(sum(p == r for p, r in words) / len(words))
    sentences = [[line.split(" ") for line in block.splitlines()]
                 for block in (out / "predictions.conll").read_text().split("\n\n") if block]
    assert [[w for w, _, _ in sentence] for sentence in sentences] == [row["tokens"] for row in rows]
    entities = load_metric("entity_f1").compute(predictions=[[p for _, _, p in s] for s in sentences],
                                                references=[[r for _, r, _ in s] for s in sentences])
    assert figures["entity_f1"] == pytest.approx(entities["entity_f1"])


def test_question_answerings_predictions_are_answer_texts_and_squads_predictions_json(tmp_path):
    folder = model_folder(tmp_path, "bert", LineageBertForQuestionAnswering, 400)
    out = evaluate.main(["--model", str(folder), "--dataset", "embedded:qa", "--eval_size", "10", "--max_seq_length",
                         "64", "--max_query_length", "24", "--predictions", "--output_dir", str(tmp_path / "eval")])
    rows = generate_records("qa", "test", seed=42, size=10)
    lines = predicted(out)
    assert [line["id"] for line in lines] == [r["id"] for r in rows]
    assert [line["reference"] for line in lines] == [r["answers"]["text"] for r in rows]
    assert all(line["prediction"] in row["context"] for line, row in zip(lines, rows))
    assert json.loads((out / "predictions.json").read_text()) == {line["id"]: line["prediction"] for line in lines}
    squad = load_metric("squad").compute(predictions=[line["prediction"] for line in lines],
                                         references=[line["reference"] for line in lines])
    figures = json.loads((out / "results.json").read_text())["scores"]["question-answering"]
    assert figures["exact_match"] == pytest.approx(squad["exact_match"]) and figures["f1"] == pytest.approx(squad["f1"])


def test_a_translators_predictions_are_its_translations_a_line_each(tmp_path):
    folder = model_folder(tmp_path, "transformer", LineageTransformerForConditionalGeneration, 300)
    out = evaluate.main(["--model", str(folder), "--eval_size", "6", "--num_beams", "2", "--max_new_tokens", "5",
                         "--predictions", "--output_dir", str(tmp_path / "eval")])
    rows = generate_records("translation", "test", seed=42, size=6)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
    hypotheses = translate(model, AutoTokenizer.from_pretrained(folder), [r["source"] for r in rows], 2, 5)
    assert (out / "predictions.txt").read_text() == "".join(h + "\n" for h in hypotheses)
    assert predicted(out) == [{"row": i, "source": r["source"], "prediction": h, "reference": r["target"]}
                              for i, (r, h) in enumerate(zip(rows, hypotheses))]


def test_predictions_are_refused_where_no_data_set_is_scored(tmp_path):
    folder = model_folder(tmp_path, "bert", LineageBertForMaskedLM, 400)
    text = tmp_path / "held-out.txt"
    text.write_text("A held-out line.\n")
    with pytest.raises(evaluate.EvaluateError, match=r"--predictions writes the predictions of a translation or "
                                                     r"classification model on --dataset; --model \(a masked-lm "
                                                     r"model\) is scored by pseudo-perplexity here: leave it out"):
        evaluate.main(["--model", str(folder), "--text_file", str(text), "--predictions", "--output_dir",
                       str(tmp_path / "eval")])
    assert not (tmp_path / "eval").exists()


def test_data_without_its_label_column_gets_each_rows_prediction_alone(tmp_path, capsys):
    """Predictions of a file without labels (a test set, new data) are those of the same rows labelled, without a
    reference; nothing is scored (no figure, no plot) and a card, which would hold no figure, is refused first;
    without --predictions, the refusal advises it beside --label_column."""
    names = ["entailment", "neutral", "contradiction"]
    folder = model_folder(tmp_path, "bert", LineageBertForSequenceClassification, 400, num_labels=3,
                          id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)})
    rows = generate_records("nli", "test", size=9)
    labelled, unlabelled = tmp_path / "labelled.jsonl", tmp_path / "unlabelled.csv"
    labelled.write_text("".join(json.dumps({**r, "label": names[r["label"]]}) + "\n" for r in rows))
    pandas = pytest.importorskip("pandas")
    pandas.DataFrame([{"premise": r["premise"], "hypothesis": r["hypothesis"]} for r in rows]).to_csv(unlabelled,
                                                                                                     index=False)
    common = ["--model", str(folder), "--task", "nli", "--batch_size", "4", "--predictions"]
    with pytest.raises(evaluate.EvaluateError, match=r"^--dataset .*unlabelled.csv has no column 'label' \(its "
                                                     r"columns: premise, hypothesis\): name the labels' column with "
                                                     r"--label_column, or, for data without labels, which has nothing "
                                                     r"to score, give --predictions true to write each row's "
                                                     r"prediction alone$"):
        evaluate.main([*common[:-1], "--dataset", str(unlabelled), "--output_dir", str(tmp_path / "refused")])
    assert not (tmp_path / "refused").exists()
    scored = predicted(evaluate.main([*common, "--dataset", str(labelled), "--output_dir", str(tmp_path / "a")]))
    out = evaluate.main([*common, "--dataset", str(unlabelled), "--output_dir", str(tmp_path / "b")])
    assert f"{unlabelled}: no column 'label': each row's prediction alone, no figure" in capsys.readouterr().out
    assert predicted(out) == [{"row": line["row"], "prediction": line["prediction"]} for line in scored]
    report = json.loads((out / "results.json").read_text())
    assert report["scores"] == {} and report["data"]["labelled"] is False and report["data"]["rows"] == 9
    assert not (out / "scores.png").exists()
    with pytest.raises(evaluate.EvaluateError, match=r"--write_card true: --dataset .*unlabelled.csv has no labels"):
        evaluate.main([*common, "--dataset", str(unlabelled), "--write_card", "--output_dir", str(tmp_path / "c")])
    assert not (tmp_path / "c").exists() and not (folder / "README.md").exists()


def test_a_tagger_and_a_regression_head_predict_unlabelled_rows_as_labelled_ones(tmp_path):
    tagger = model_folder(tmp_path / "t", "bert", LineageBertForTokenClassification, 400, num_labels=len(NER_LABELS),
                          id2label=dict(enumerate(NER_LABELS)), label2id={n: i for i, n in enumerate(NER_LABELS)})
    rows = generate_records("ner", "test", seed=42, size=6)  # as lineage evaluate draws embedded:ner
    words = tmp_path / "words.jsonl"
    words.write_text("".join(json.dumps({"tokens": r["tokens"]}) + "\n" for r in rows))
    common = ["--model", str(tagger), "--task", "token-classification", "--predictions"]
    scored = predicted(evaluate.main([*common, "--dataset", "embedded:ner", "--eval_size", "6", "--output_dir",
                                      str(tmp_path / "a")]))
    alone = predicted(evaluate.main([*common, "--dataset", str(words), "--output_dir", str(tmp_path / "b")]))
    assert alone == [{k: v for k, v in line.items() if k != "reference"} for line in scored]
    assert [line["words"] for line in alone] == [r["tokens"] for r in rows]
    assert (tmp_path / "b" / "predictions.conll").read_text() == "".join(
        "".join(f"{w} {t}\n" for w, t in zip(line["words"], line["prediction"])) + "\n" for line in alone)
    head = model_folder(tmp_path / "r", "bert", LineageBertForSequenceClassification, 400, num_labels=1,
                        problem_type="regression")
    texts = tmp_path / "texts.jsonl"
    texts.write_text("".join(json.dumps({"text": r["tokens"][0]}) + "\n" for r in rows))
    out = evaluate.main(["--model", str(head), "--task", "regression", "--dataset", str(texts), "--predictions",
                         "--output_dir", str(tmp_path / "c")])
    model, tokenizer = LineageBertForSequenceClassification.from_pretrained(head), AutoTokenizer.from_pretrained(head)
    with torch.no_grad():
        own = [model(**tokenizer(r["tokens"][0], return_tensors="pt")).logits[0, 0].item() for r in rows]
    assert [line["prediction"] for line in predicted(out)] == pytest.approx(own, abs=1e-5)


@pytest.mark.parametrize("unanswerable", [True, False])
def test_questions_without_answers_are_answered_as_the_run_answered_its_validation_questions(tmp_path, capsys,
                                                                                             unanswerable):
    """A SQuAD test set without answers gets the predictions of the same questions with their answers, alone; for a
    model whose config saves no rule (a run from before it did): no answer where [CLS] scores higher where the run's
    validation data had unanswerable questions (its results.json's no_answer_* figures), an answer for every question
    where it had none; a model with neither is refused, naming the flag that says it, before anything is written.
    Without --predictions, the questions have no answers to score: refused, advising it (no column flag can help)."""
    folder = model_folder(tmp_path, "bert", LineageBertForQuestionAnswering, 400)
    rows = [r for r in generate_records("qa", "test", seed=42, size=16) if unanswerable or r["answers"]["text"]]
    assert unanswerable == any(not r["answers"]["text"] for r in rows)
    labelled, unlabelled = tmp_path / "labelled.jsonl", tmp_path / "unlabelled.jsonl"
    labelled.write_text("".join(json.dumps(r) + "\n" for r in rows))
    unlabelled.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "answers"}) + "\n" for r in rows))
    common = ["--model", str(folder), "--max_seq_length", "64", "--max_query_length", "24", "--predictions"]
    with pytest.raises(evaluate.EvaluateError, match=r"^--dataset .*unlabelled.jsonl has no column 'answers' \(its "
                                                     r"columns: .*\), so it has no answers to score: give "
                                                     r"--predictions true to write each question's answer alone$"):
        evaluate.main([*common[:-1], "--dataset", str(unlabelled), "--output_dir", str(tmp_path / "refused")])
    with pytest.raises(evaluate.EvaluateError, match=r"unlabelled.jsonl has no column 'answers', and neither "
                                                     r"--model's config.json \(task_specific_params: "
                                                     r"handle_impossible_answer\) nor its run's validation figures "
                                                     r"\(results.json\) say .*: give "
                                                     r"--version_2_with_negative true \(SQuAD 2.0: no answer where "
                                                     r"\[CLS\] scores higher\) or false \(every question answered\)$"):
        evaluate.main([*common, "--dataset", str(unlabelled), "--output_dir", str(tmp_path / "refused")])
    assert not (tmp_path / "refused").exists()
    figures = {"eval_exact_match": 0.5, "eval_f1": 0.5,
               **({"eval_no_answer_exact_match": 1.0, "eval_no_answer_f1": 1.0} if unanswerable else {})}
    (folder / "results.json").write_text(json.dumps(figures))  # as the run wrote it
    scored = predicted(evaluate.main([*common, "--dataset", str(labelled), "--output_dir", str(tmp_path / "a")]))
    out = evaluate.main([*common, "--dataset", str(unlabelled), "--output_dir", str(tmp_path / "b")])
    rule = "no answer where [CLS] scores higher" if unanswerable else "every question answered"
    assert (f"{unlabelled}: no column 'answers': each row's prediction alone, no figure; {rule} (as on the run's "
            f"validation data)") in capsys.readouterr().out
    assert predicted(out) == [{k: v for k, v in line.items() if k != "reference"} for line in scored]
    assert json.loads((out / "predictions.json").read_text()) == {line["id"]: line["prediction"] for line in scored}
    report = json.loads((out / "results.json").read_text())
    assert report["scores"] == {} and report["data"]["labelled"] is False and report["data"]["rows"] == len(rows)
    assert not (out / "scores.png").exists()
    given = predicted(evaluate.main([*common, "--dataset", str(unlabelled), "--version_2_with_negative",
                                     str(unanswerable).lower(), "--output_dir", str(tmp_path / "c")]))
    assert given == predicted(out)
    with pytest.raises(evaluate.EvaluateError, match=r"--write_card true: --dataset .*unlabelled.jsonl has no labels"):
        evaluate.main([*common, "--dataset", str(unlabelled), "--write_card", "--output_dir", str(tmp_path / "d")])
    assert not (tmp_path / "d").exists() and not (folder / "README.md").exists()
