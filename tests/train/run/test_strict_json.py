"""`train.run.strict_json`: what Lineage writes as JSON is strict JSON, which `jq` and JavaScript's `JSON.parse` read:
a number that is NaN or infinite, at any depth, is written as null, never as the bare token Python's `json` writes."""

import json
import math

import numpy as np
import pytest

from train.run import strict_json


def strict(text: str):
    """`text` read as strict JSON: the constants NaN, Infinity and -Infinity refused as `JSON.parse` refuses them."""
    def refuse(token):
        raise ValueError(f"{token} is no JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_non_finite_number_at_any_depth_is_written_as_null_and_every_other_value_as_json_writes_it():
    data = {"eval_pearson": math.nan, "eval_mse": 0.25, "steps": 2, "done": True, "name": "run", "none": None,
            "curve": [[1, math.inf], (2, -math.inf)], "nested": {"score": np.float32("nan"), "rows": 16}}
    text = strict_json.dumps(data, indent=1)
    assert strict(text) == {"eval_pearson": None, "eval_mse": 0.25, "steps": 2, "done": True, "name": "run",
                            "none": None, "curve": [[1, None], [2, None]], "nested": {"score": None, "rows": 16}}
    with pytest.raises(ValueError, match="NaN is no JSON"):
        strict(json.dumps(data, default=float))  # what Python's json writes


def test_a_non_finite_number_that_reaches_the_encoder_otherwise_is_refused_not_written():
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        strict_json.dumps({"figure": object()}, default=lambda value: math.nan)
