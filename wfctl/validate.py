"""Input checks shared by the library and the CLI, so both refuse the same things: text that is
not UTF-8 or holds NUL, numbers a column cannot hold, JSON that is nested too deep, bigger than
the limit, or that jsonb cannot store."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from wfctl import jsonvalue
from wfctl.errors import InvalidInput
from wfctl.registry import MAX_TYPE_LENGTH

#: Largest input accepted, in bytes of JSON (documented in the README): the user's bytes, the
#: text as given in UTF-8 (for a Python value: its compact JSON in UTF-8). Postgres would take
#: far more; a workflow input this big is almost always a mistake (pass a reference instead).
MAX_INPUT_BYTES = 1_000_000
#: Messages a run may hold that no ``recv`` took yet (``wfctl_max_unconsumed_messages()``):
#: a send past it is refused (``InvalidState``) until the run reads some.
MAX_UNCONSUMED_MESSAGES = 10_000
#: Deepest nesting of arrays and objects accepted in an input: Python (the worker, ``show``)
#: reads JSON recursively, and fails somewhere below 1,000 levels.
MAX_JSON_DEPTH = 500
#: Python reads at most this many digits into an int (sys.get_int_max_str_digits()).
MAX_INT_DIGITS = jsonvalue.PYTHON_INT_DIGITS


def encode_input(value: Any, where: str = "workflow input") -> str:
    """The JSON text to store for a Python value; InvalidInput when it cannot be stored or is over
    the limit (measured as the value's compact JSON in UTF-8, not wfctl's escaped text)."""
    text = encode_value(value, where)
    if len(text) > MAX_INPUT_BYTES:  # escaped text is never shorter than the value's own bytes
        try:
            compact = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError):
            compact = text
        check_input_size(compact, where)
    return text


def encode_value(value: Any, where: str) -> str:
    check_depth(value, where)
    try:
        return jsonvalue.dumps(value)
    except jsonvalue.UnstorableJSON as exc:
        raise InvalidInput(f"{where} cannot be stored: {exc}") from None


def check_input_size(text: str, where: str = "workflow input") -> None:
    """Refuse JSON text over MAX_INPUT_BYTES, counted as the UTF-8 bytes of ``text`` as given."""
    size = len(utf8(text, where))
    if size > MAX_INPUT_BYTES:
        raise InvalidInput(f"{where} is {size} bytes, over the limit of {MAX_INPUT_BYTES} bytes")


def check_depth(value: Any, where: str = "workflow input") -> None:
    """Refuse arrays and objects nested deeper than MAX_JSON_DEPTH (iteratively: any depth, and
    a value that contains itself, are refused rather than overflowing the stack)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            raise InvalidInput(f"{where} is nested more than {MAX_JSON_DEPTH} levels deep (the limit)")
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list | tuple))


def utf8(text: str, what: str) -> bytes:
    """``text`` in UTF-8; InvalidInput when it cannot be (a command-line argument with bytes that
    are not UTF-8 arrives with surrogate escapes, U+DC80 to U+DCFF)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = ord(text[exc.start])
        offset = len(text[: exc.start].encode("utf-8", "surrogatepass"))
        if 0xDC80 <= char <= 0xDCFF:
            detail = f"byte 0x{char - 0xDC00:02x} at byte {offset}"
        else:
            detail = f"an unpaired surrogate U+{char:04X} at byte {offset}"
        raise InvalidInput(f"{what} is not valid UTF-8 ({detail})") from None


def check_text(value: str | None, what: str) -> None:
    """A string that goes to a text column (a type, a key, a reason, a filter): valid UTF-8 and no
    NUL, which PostgreSQL cannot store."""
    if value is None:
        return
    utf8(value, what)
    if "\x00" in value:
        raise InvalidInput(f"{what} contains a NUL character, which PostgreSQL cannot store")


INT32_MAX = 2**31 - 1


def check_int(value: int | None, what: str, *, minimum: int = -INT32_MAX - 1) -> None:
    """priority and max_retries are integer columns: refuse what they cannot hold."""
    if value is not None and minimum == 0 and value < 0:
        raise InvalidInput(f"{what} cannot be negative")
    if value is not None and not minimum <= value <= INT32_MAX:
        raise InvalidInput(f"{what} must be between {minimum} and {INT32_MAX}, not {value}")


def check_type(workflow_type: str) -> None:
    if not workflow_type or len(workflow_type) > MAX_TYPE_LENGTH:
        raise InvalidInput(f"a workflow type must have 1 to {MAX_TYPE_LENGTH} characters")
    check_text(workflow_type, "the workflow type")


def check_key(key: str | None) -> None:
    check_text(key, "the idempotency key")


def load_json(text: str, where: str) -> Any:
    """json.loads, with what it cannot read turned into one-line errors; JSONDecodeError (bad
    syntax) is left to the caller, which words it for its source."""
    try:
        # numbers with a fraction or exponent as Decimal: stored as the user wrote them
        # (a float would turn 0.12345678901234567890123 into 0.12345678901234568)
        value = json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise InvalidInput(f"{where} is nested more than {MAX_JSON_DEPTH} levels deep (the limit)") from None
    except ValueError:  # an integer longer than Python reads (sys.get_int_max_str_digits)
        raise InvalidInput(
            f"{where} holds an integer of more than {MAX_INT_DIGITS} digits, more than Python reads"
        ) from None
    return value
