"""The regression figures (STS-B's GLUE metrics): Pearson's r against the standard library's `statistics.correlation`,
Spearman's rho as Pearson's r of average ranks counted by hand (ties share the mean of the ranks they span), both
unchanged by the transforms they are defined to ignore, NaN where they are undefined (a constant side, a value that
is not finite, for ranks a NaN); the mean squared error by its definition; empty inputs refused."""

import math
import statistics

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from train.metrics import load_metric

EXAMPLES = settings(max_examples=25, deadline=None, database=None, derandomize=True)
PEARSON, SPEARMAN, MSE = load_metric("pearsonr"), load_metric("spearmanr"), load_metric("mse")
SCORE = st.floats(-5, 5, allow_nan=False).map(lambda v: round(v, 1))  # coarse, so that ties are drawn


@st.composite
def paired(draw, values=SCORE) -> tuple[list[float], list[float]]:
    length = draw(st.integers(2, 30))
    series = st.lists(values, min_size=length, max_size=length)
    return draw(series), draw(series)


def pearson(predictions, references) -> float:
    return PEARSON.compute(predictions=predictions, references=references)["pearsonr"]


def spearman(predictions, references) -> float:
    return SPEARMAN.compute(predictions=predictions, references=references)["spearmanr"]


def average_ranks(values: list[float]) -> list[float]:
    """Each value's rank from 1, counted: the values below it, plus the middle of the run of values equal to it."""
    return [sum(v < x for v in values) + (sum(v == x for v in values) + 1) / 2 for x in values]


def varies(values: list[float]) -> bool:
    return len(set(values)) > 1


@EXAMPLES
@given(paired())
def test_pearson_is_the_standard_librarys_correlation(data):
    predictions, references = data
    assume(varies(predictions) and varies(references))
    assert pearson(predictions, references) == pytest.approx(statistics.correlation(predictions, references),
                                                             abs=1e-9)


@EXAMPLES
@given(paired())
def test_spearman_is_the_pearson_correlation_of_average_ranks(data):
    predictions, references = data
    assume(varies(predictions) and varies(references))
    expected = statistics.correlation(average_ranks(predictions), average_ranks(references))
    assert spearman(predictions, references) == pytest.approx(expected, abs=1e-9)


@EXAMPLES
@given(paired(), st.floats(0.1, 10), st.floats(-10, 10))
def test_pearson_ignores_a_rising_linear_map_and_spearman_any_rising_map(data, scale, shift):
    predictions, references = data
    assume(varies(predictions) and varies(references))
    assert pearson([scale * p + shift for p in predictions], references) == pytest.approx(
        pearson(predictions, references), abs=1e-9)
    assert spearman([math.exp(p) for p in predictions], references) == pytest.approx(
        spearman(predictions, references), abs=1e-12)


def test_ties_take_the_mean_of_their_ranks():
    """x ranks 1, 2.5, 2.5, 4 and y 1, 3, 2, 4: rho = 4.5 / sqrt(4.5 * 5), by hand."""
    assert spearman([1.0, 2.0, 2.0, 3.0], [1.0, 3.0, 2.0, 4.0]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    assert pearson([1.0, 2.0, 3.0], [2.0, 4.0, 7.0]) == pytest.approx(15 / math.sqrt(228))  # 5 / sqrt(2 * 114 / 9)


@pytest.mark.parametrize("predictions, references", [([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]),  # a constant predictor
                                                     ([1.0, 2.0, 3.0], [4.0, 4.0, 4.0]),  # constant references
                                                     ([1.0], [2.0]),  # one pair: both constant
                                                     ([1.0, math.nan], [1.0, 2.0])])
def test_a_correlation_that_is_undefined_is_nan(predictions, references):
    assert math.isnan(pearson(predictions, references)) and math.isnan(spearman(predictions, references))


def test_an_infinite_score_has_no_pearson_correlation_but_ranks_last():
    assert math.isnan(pearson([1.0, math.inf, 0.0], [1.0, 2.0, 0.0]))
    assert spearman([1.0, math.inf, 0.0], [1.0, 2.0, 0.0]) == 1.0


@EXAMPLES
@given(paired(st.floats(-1e3, 1e3)))
def test_mse_is_the_mean_squared_difference_and_its_root_on_request(data):
    predictions, references = data
    expected = sum((p - r) ** 2 for p, r in zip(predictions, references)) / len(references)
    assert MSE.compute(predictions=predictions, references=references)["mse"] == pytest.approx(expected)
    root = MSE.compute(predictions=predictions, references=references, squared=False)["mse"]
    assert root == pytest.approx(math.sqrt(expected))


@pytest.mark.parametrize("name, metric", [("pearsonr", PEARSON), ("spearmanr", SPEARMAN), ("mse", MSE)])
def test_empty_and_mismatched_inputs_are_refused_by_name(name, metric):
    with pytest.raises(ValueError, match=f"{name}: predictions and references are empty"):
        metric.compute(predictions=[], references=[])
    with pytest.raises(ValueError, match=r"predictions \(2\) and references \(1\)"):
        metric.compute(predictions=[0.5, 1.0], references=[0.5])
