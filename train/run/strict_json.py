"""The JSON that Lineage writes: strict JSON (RFC 8259), as jq, JavaScript's `JSON.parse` and most tools read it.

Python's `json` writes a float that is NaN or infinite as the bare token `NaN` or `Infinity`, which none of them
accept; a figure can be undefined (a correlation of constant predictions, the loss of no batch), so every file
Lineage writes as JSON goes through `dumps`, which writes such a number as null. docs/training.md ("What a run
writes").
"""

from __future__ import annotations

import json
import math
import numbers
from typing import Any


def finite(data: Any) -> Any:
    """`data` with every real number that is NaN or infinite, at any depth of its dicts, lists and tuples, as None."""
    if isinstance(data, numbers.Real) and not isinstance(data, numbers.Integral):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: finite(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(value) for value in data]
    return data


def dumps(data: Any, **kwargs) -> str:
    """`data` as strict JSON text (`json.dumps` with `kwargs`): a non-finite number as null (`finite`), and one that
    reaches the encoder otherwise (through a `default`) refused by `allow_nan=False` rather than written bare."""
    return json.dumps(finite(data), allow_nan=False, **kwargs)


__all__ = ["dumps", "finite"]
