"""wfctl/keys.py without a server: which of an id and a key names a run, how a key shows in a
message, and the range a key prefix search adds (keys.successor): in code point order, it holds
the strings that start with the prefix and no other."""

from __future__ import annotations

from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wfctl import keys
from wfctl.errors import InvalidInput

#: Text as PostgreSQL stores it: no NUL, no lone surrogates (they are not UTF-8).
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8)


@pytest.mark.parametrize(
    ("prefix", "after"),
    [
        ("order-7", "order-8"),
        ("a%", "a&"),
        ("p\U0010ffff", "q"),
        ("p\U0010ffff\U0010ffff", "q"),
        ("\ud7ff", "\ue000"),  # past the surrogates, which no text holds
        ("é", "ê"),
        ("", None),
        ("\U0010ffff", None),
    ],
)
def test_the_successor_of_a_prefix(prefix, after):
    assert keys.successor(prefix) == after


@given(prefix=TEXT, rest=TEXT, other=TEXT)
def test_the_range_holds_exactly_the_strings_with_the_prefix(prefix, rest, other):
    """In code point order (Python's order of str, and the C collations'), a string lies in
    [prefix, successor) if and only if it starts with the prefix."""
    after = keys.successor(prefix)

    def in_range(text: str) -> bool:
        return prefix <= text and (after is None or text < after)

    assert in_range(prefix + rest)
    assert in_range(other) == other.startswith(prefix)


def test_a_key_in_a_message_is_escaped_and_bounded():
    assert keys.shown("order-7") == "'order-7'"
    assert keys.shown("a\x1bb\u202ec\n") == "'a\\x1bb\\u202ec\\x0a'"
    assert keys.shown("k" * 101) == f"'{'k' * 100}...' (101 characters)"


def test_exactly_one_of_an_id_and_a_key():
    wid = UUID(int=1)
    keys.check_one(wid, None)
    keys.check_one(None, "order-7")
    with pytest.raises(InvalidInput, match=r"^name the workflow by its ID or by --key, not both$"):
        keys.check_one(wid, "order-7", id_name="its ID", key_name="--key")
    with pytest.raises(InvalidInput, match=r"^name the workflow by its id or by key=$"):
        keys.check_one(None, None)
    with pytest.raises(InvalidInput, match="NUL"):
        keys.check_one(None, "a\x00")
    with pytest.raises(InvalidInput, match="not valid UTF-8"):
        keys.check_one(None, "a\udcff")
    assert keys.workflow_uuid(str(wid)) == wid
    with pytest.raises(InvalidInput, match="is not a workflow id"):
        keys.workflow_uuid("order-7")
