"""The offline metric modules (train/metrics/) answer as their references do, or refuse as they refuse: f1 against
sklearn's `f1_score` and bleu against sacrebleu where those are installed, every metric against the definition, and
empty inputs, lengths that disagree and an f1 average that does not fit the classes refused by name."""

import importlib.util
import math

import pytest
import sacrebleu
from hypothesis import given, settings
from hypothesis import strategies as st

from train.metrics import METRICS, load_metric

EXAMPLES = settings(max_examples=25, deadline=None, database=None, derandomize=True)
needs_sklearn = pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="needs scikit-learn")
METRIC = {name: load_metric(name) for name in METRICS}


@st.composite
def labelled(draw, classes: int = 5) -> tuple[list[int], list[int]]:
    """Predictions and references of one length over class ids below `classes`."""
    length = draw(st.integers(1, 30))
    ids = st.lists(st.integers(0, classes - 1), min_size=length, max_size=length)
    return draw(ids), draw(ids)


def f1_by_definition(predictions: list[int], references: list[int], label: int) -> float:
    """The harmonic mean of one class's precision and recall (0 where either is undefined or zero)."""
    hits = sum(p == r == label for p, r in zip(predictions, references))
    predicted, actual = predictions.count(label), references.count(label)
    precision, recall = (hits / predicted if predicted else 0.0), (hits / actual if actual else 0.0)
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def f1(predictions, references, **options) -> float:
    return METRIC["f1"].compute(predictions=predictions, references=references, **options)["f1"]


@needs_sklearn
@EXAMPLES
@given(data=labelled(), average=st.sampled_from(["binary", "macro", "micro"]), pos_label=st.integers(0, 4))
def test_f1_answers_or_refuses_as_sklearn_does(data, average, pos_label):
    from sklearn.metrics import f1_score

    predictions, references = data
    options = {"average": average, **({"pos_label": pos_label} if average == "binary" else {})}
    try:
        expected = f1_score(references, predictions, zero_division=0.0, **options)
    except ValueError:
        with pytest.raises(ValueError, match="average|pos_label"):
            f1(predictions, references, **options)
        return
    assert f1(predictions, references, **options) == pytest.approx(expected)


@EXAMPLES
@given(data=labelled())
def test_macro_f1_is_the_mean_of_each_class_f1_and_micro_f1_the_accuracy(data):
    predictions, references = data
    classes = sorted(set(predictions) | set(references))
    macro = sum(f1_by_definition(predictions, references, c) for c in classes) / len(classes)
    assert f1(predictions, references, average="macro") == pytest.approx(macro)
    accuracy = METRIC["accuracy"].compute(predictions=predictions, references=references)["accuracy"]
    assert accuracy == pytest.approx(sum(p == r for p, r in zip(predictions, references)) / len(references))
    assert f1(predictions, references, average="micro") == pytest.approx(accuracy)  # one label each: micro F1 is it


@EXAMPLES
@given(data=labelled(classes=2), pos_label=st.integers(0, 1))
def test_binary_f1_is_the_positive_class_f1(data, pos_label):
    predictions, references = data
    expected = f1_by_definition(predictions, references, pos_label)
    assert f1(predictions, references, pos_label=pos_label) == pytest.approx(expected)


@EXAMPLES
@given(data=labelled())
def test_the_default_binary_average_refuses_more_than_two_classes(data):
    predictions, references = data
    if len(set(predictions) | set(references)) <= 2:
        f1(predictions, references, pos_label=references[0])
        return
    with pytest.raises(ValueError, match=r"average='binary'.*'macro'.*binary, macro, micro"):
        f1(predictions, references)


def test_f1_refuses_an_unknown_average_an_absent_pos_label_and_empty_labels():
    with pytest.raises(ValueError, match="average must be one of binary, macro, micro; got 'weighted'"):
        f1([0, 1], [1, 0], average="weighted")
    with pytest.raises(ValueError, match="pos_label=1 is not one of the classes 2, 3"):
        f1([2, 3], [3, 2])
    with pytest.raises(ValueError, match="labels is empty"):
        f1([0, 1], [1, 0], average="macro", labels=[])


@pytest.mark.parametrize("name", ["accuracy", "f1"])
def test_empty_and_mismatched_inputs_are_refused_by_name(name):
    with pytest.raises(ValueError, match="predictions and references are empty"):
        METRIC[name].compute(predictions=[], references=[])
    with pytest.raises(ValueError, match=r"predictions \(2\) and references \(1\)"):
        METRIC[name].compute(predictions=[0, 1], references=[0])


WORDS = st.lists(st.sampled_from("the cat sat on a mat and dog ran".split()), min_size=1, max_size=12).map(" ".join)


@EXAMPLES
@given(data=st.data(), count=st.integers(1, 6), width=st.integers(1, 3))
def test_bleu_is_sacrebleu_over_the_reference_streams(data, count, width):
    predictions = data.draw(st.lists(WORDS, min_size=count, max_size=count))
    references = data.draw(st.lists(st.lists(WORDS, min_size=width, max_size=width), min_size=count, max_size=count))
    result = METRIC["bleu"].compute(predictions=predictions, references=references)
    expected = sacrebleu.corpus_bleu(predictions, [list(stream) for stream in zip(*references)])
    assert result["bleu"] == pytest.approx(expected.score)
    assert result["exact_match"] == sum(p == r[0] for p, r in zip(predictions, references)) / count


def test_bleu_refuses_empty_ragged_and_mismatched_references():
    bleu = METRIC["bleu"]
    with pytest.raises(ValueError, match="predictions and references are empty"):
        bleu.compute(predictions=[], references=[])
    with pytest.raises(ValueError, match="references holds an empty list"):
        bleu.compute(predictions=["a b"], references=[[]])
    with pytest.raises(ValueError, match="references holds lists of 1, 2 references"):
        bleu.compute(predictions=["a b", "c"], references=[["a b"], ["c", "d"]])
    with pytest.raises(ValueError, match=r"predictions \(1\) and references \(2\)"):
        bleu.compute(predictions=["a b"], references=[["a b"], ["c"]])


@EXAMPLES
@given(losses=st.lists(st.floats(0, 20), min_size=1, max_size=8), data=st.data())
def test_perplexity_is_exp_of_the_weighted_mean_and_a_weight_counts_a_loss_that_often(losses, data):
    counts = data.draw(st.lists(st.integers(1, 3), min_size=len(losses), max_size=len(losses)))
    perplexity = METRIC["perplexity"]
    weighted = perplexity.compute(losses=losses, weights=counts)
    repeated = perplexity.compute(losses=[loss for loss, n in zip(losses, counts) for _ in range(n)])
    assert weighted["mean_nll"] == pytest.approx(repeated["mean_nll"])
    assert weighted["perplexity"] == pytest.approx(math.exp(sum(x * n for x, n in zip(losses, counts)) / sum(counts)))


def test_perplexity_refuses_no_losses_and_weights_that_do_not_fit():
    perplexity = METRIC["perplexity"]
    with pytest.raises(ValueError, match="losses is empty"):
        perplexity.compute(losses=[])
    with pytest.raises(ValueError, match="weights has 1 values for 2 losses"):
        perplexity.compute(losses=[1.0, 2.0], weights=[1.0])
    with pytest.raises(ValueError, match="weights must be non-negative with a positive sum"):
        perplexity.compute(losses=[1.0, 2.0], weights=[0.0, 0.0])
