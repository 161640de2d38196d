"""wfctl/keys.py without a server: which of an id and a key names a run, and how a key shows in
a message."""

from __future__ import annotations

from uuid import UUID

import pytest

from wfctl import keys
from wfctl.errors import InvalidInput


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
