"""JSON the database can store, and that reads back as what was written.

jsonb refuses U+0000 and unpaired surrogates, which Python's json module accepts. And jsonb
keeps numbers as ``numeric``: a float that Python writes with a positive exponent (``1e+16``)
reads back as the integer ``10000000000000000``, so a step's result would change type between
the first run and a replay. Such floats are written as their exact digits plus ``.0``, which
jsonb keeps as a fraction and Python reads back as the same float. A ``Decimal`` (how wfctl
parses the numbers a user writes, and what a step may return) is written exactly as it is,
never through a float. Every input, step result and workflow output goes through ``dumps``.

Python reads an integer of at most 4300 digits (``sys.get_int_max_str_digits()``): a
``Decimal`` that jsonb would keep as a longer integer (``1E+5000`` is stored as 1 and 5000
zeros, since a numeric without a fraction is written without one) is refused, or no worker
could read the value back.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

# jsonb numbers are PostgreSQL numerics: up to 131072 digits before the point, 16383 after
NUMERIC_MAX_INTEGER_DIGITS = 131072
NUMERIC_MAX_SCALE = 16383
#: Python reads at most this many digits into an int (sys.get_int_max_str_digits()).
PYTHON_INT_DIGITS = 4300
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class UnstorableJSON(ValueError):
    """The value cannot be stored as jsonb (not JSON-serialisable, or holds \\u0000 / a lone
    surrogate)."""


def _is_big_float(value: float) -> bool:
    return "e+" in repr(value)


def _check(value: Any) -> bool:
    """Raise UnstorableJSON for what jsonb refuses; True when a float needs exact digits."""
    if isinstance(value, str):
        if _UNSTORABLE.search(value):
            raise UnstorableJSON(
                "it holds \\u0000 or an unpaired surrogate, which PostgreSQL's jsonb cannot store"
            )
        return False
    if isinstance(value, float):
        return _is_big_float(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise UnstorableJSON(f"{value} is not a JSON number")
        exponent = value.as_tuple().exponent
        if value and (value.adjusted() >= NUMERIC_MAX_INTEGER_DIGITS or -int(exponent) > NUMERIC_MAX_SCALE):
            raise UnstorableJSON(f"the number {str(value)[:40]} is beyond what PostgreSQL's numeric holds")
        if value and int(exponent) >= 0 and value.adjusted() >= PYTHON_INT_DIGITS:
            raise UnstorableJSON(
                f"the number {str(value)[:40]} is stored as an integer of {value.adjusted() + 1} digits, "
                f"more than Python reads ({PYTHON_INT_DIGITS})"
            )
        return True
    big = False
    if isinstance(value, dict):
        for key, item in value.items():
            _check(key)
            big = _check(item) or big
    elif isinstance(value, list | tuple):
        for item in value:
            big = _check(item) or big
    return big


def _float_text(value: float) -> str:
    if _is_big_float(value):
        return f"{int(value)}.0"  # the float's exact value: reads back as the same float
    return json.dumps(value, allow_nan=False)


def _key(key: Any) -> str:
    """An object key as json.dumps writes it (non-string keys become strings)."""
    return json.dumps(key) if isinstance(key, str) else json.dumps({key: 0})[1:-4]


def _encode(value: Any) -> str:
    """The slow path, only for values holding a float written with a positive exponent."""
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)}: {_encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_encode(v) for v in value) + "]"
    return json.dumps(value, allow_nan=False)


class _Exact(Exception):
    """The value holds a Decimal: it takes the slow path."""


def _default(value: Any) -> Any:
    if isinstance(value, Decimal):
        raise _Exact
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


#: json.dumps with options other than its defaults builds an encoder per call: one, kept
_ENCODER = json.JSONEncoder(allow_nan=False, default=_default)


def dumps(value: Any) -> str:
    """JSON text for ``value``, or UnstorableJSON saying why it cannot be stored."""
    try:
        text: str | None = _ENCODER.encode(value)
    except _Exact:
        text = None
    except (TypeError, ValueError) as exc:
        raise UnstorableJSON(str(exc)) from None
    if _check(value) or text is None:
        return _encode(value)
    return text
