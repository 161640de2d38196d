"""JSON the database can store: jsonb refuses U+0000 and unpaired surrogates, which Python's
json module accepts. Every input, step result and workflow output goes through ``dumps``."""

from __future__ import annotations

import json
import re
from typing import Any

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class UnstorableJSON(ValueError):
    """The value cannot be stored as jsonb (not JSON-serialisable, or holds \\u0000 / a lone
    surrogate)."""


def _check(value: Any) -> None:
    if isinstance(value, str):
        if _UNSTORABLE.search(value):
            raise UnstorableJSON(
                "it holds \\u0000 or an unpaired surrogate, which PostgreSQL's jsonb cannot store"
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            _check(key)
            _check(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _check(item)


def dumps(value: Any) -> str:
    """JSON text for ``value``, or UnstorableJSON saying why it cannot be stored."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UnstorableJSON(str(exc)) from None
    _check(value)
    return text
