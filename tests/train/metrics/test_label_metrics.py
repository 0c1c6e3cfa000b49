"""The benchmarks' own classifier figures: the Matthews correlation (CoLA) against sklearn and its definition,
conlleval's entity F1 (CoNLL-2003) on hand-counted sentences, and a fine-tuning run reporting both where they apply."""

import importlib.util
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from train import finetune
from train.metrics import load_metric
from train.metrics.entity_f1 import entities

MCC, ENTITY_F1 = load_metric("matthews_correlation"), load_metric("entity_f1")


@settings(max_examples=25, deadline=None, database=None, derandomize=True)
@given(st.integers(1, 30).flatmap(lambda n: st.tuples(st.lists(st.integers(0, 3), min_size=n, max_size=n),
                                                      st.lists(st.integers(0, 3), min_size=n, max_size=n))))
def test_matthews_correlation_is_sklearns(data):
    if importlib.util.find_spec("sklearn") is None:
        pytest.skip("needs scikit-learn")
    from sklearn.metrics import matthews_corrcoef

    predictions, references = data
    expected = matthews_corrcoef(references, predictions)
    assert MCC.compute(predictions=predictions, references=references)["matthews_correlation"] == pytest.approx(
        0.0 if math.isnan(expected) else expected, abs=1e-9)


def test_matthews_correlation_of_two_classes_by_its_definition():
    predictions, references = [1, 1, 0, 0, 1], [1, 0, 0, 0, 1]  # tp 2, tn 2, fp 1, fn 0
    expected = (2 * 2 - 1 * 0) / math.sqrt(3 * 2 * 3 * 2)
    scores = MCC.compute(predictions=predictions, references=references)
    assert scores["matthews_correlation"] == pytest.approx(expected)
    assert MCC.compute(predictions=[1, 1], references=[0, 1])["matthews_correlation"] == 0.0  # one class predicted


def test_entities_are_chunked_as_conlleval_does():
    assert entities(["B-PER", "I-PER", "O", "B-LOC"]) == {("PER", 0, 1), ("LOC", 3, 3)}
    assert entities(["I-PER", "I-PER", "I-LOC", "B-LOC", "I-LOC"]) == {("PER", 0, 1), ("LOC", 2, 2), ("LOC", 3, 4)}
    assert entities(["O", "O"]) == set()


def test_entity_f1_counts_an_entity_only_when_type_and_both_ends_match():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "O", "O", "B-LOC"], ["B-ORG", "O"]]  # PER cut short: 2 of 3 right, 2 of 3 guessed
    scores = ENTITY_F1.compute(predictions=predicted, references=gold)
    assert scores == pytest.approx({"entity_precision": 2 / 3, "entity_recall": 2 / 3, "entity_f1": 2 / 3})
    with pytest.raises(ValueError, match="predictions and references are empty"):
        ENTITY_F1.compute(predictions=[], references=[])


def test_a_tagger_reports_entity_f1_and_a_classifier_the_matthews_correlation(tmp_path):
    quick = ["--max_steps", "2", "--save_steps", "0", "--progress_bar", "false", "--report_to", "none"]
    tagged, _ = finetune.main(["--recipe", "bert-finetune-nli-tiny", "--task", "token-classification", "--dataset",
                               "embedded:ner", *quick, "--output_dir", str(tmp_path / "ner")])
    assert {"eval_entity_f1", "eval_entity_precision", "eval_entity_recall", "eval_accuracy"} <= set(tagged)
    classified, _ = finetune.main(["--recipe", "bert-finetune-nli-tiny", *quick, "--output_dir", str(tmp_path / "nli")])
    assert -1 <= classified["eval_matthews_correlation"] <= 1 and "eval_entity_f1" not in classified
    assert "eval_binary_f1" not in classified  # three classes


def test_two_classes_report_the_f1_of_class_one():
    """MRPC's and QQP's F1 is the positive class's, not the macro mean: a constant "equivalent" scores 2/3 there."""
    metrics = finetune.label_metrics(["not_equivalent", "equivalent"])
    labels = torch.tensor([1, 1, 0, 0, 1, 0])
    scores = metrics({"predictions": torch.ones_like(labels), "labels": labels}, 0.0)
    assert scores["binary_f1"] == pytest.approx(2 * 0.5 * 1 / 1.5) and scores["f1"] == pytest.approx(1 / 3)
