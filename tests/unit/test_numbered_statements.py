"""Numbered statements (wfctl.queries.numbered): a named block rewritten once into PostgreSQL's
own $n placeholders for a RawCursor, its comment lines but the first dropped."""

from __future__ import annotations

import re

import pytest

from wfctl.queries import _numbered, numbered, numbered_spliced, q, spliced


def test_a_name_keeps_its_number_and_the_values_come_in_that_order():
    statement = _numbered("-- Pick: by %(kind)s\nSELECT %(b)s, %(a)s, %(b)s\n  -- why\nWHERE x LIKE 'a%%'")
    assert statement.text == b"-- Pick: by $1\nSELECT $2, $3, $2\nWHERE x LIKE 'a%'"
    assert statement.names == ("kind", "b", "a")
    assert statement.args({"a": 1, "b": 2, "kind": "k", "unused": 0}) == ["k", 2, 1]
    with pytest.raises(KeyError):
        statement.args({"a": 1})


def test_a_positional_placeholder_is_refused():
    with pytest.raises(ValueError, match="named placeholders only"):
        _numbered("-- Bad\nSELECT %s")


@pytest.mark.parametrize(
    ("made", "source"),
    [
        (numbered("worker.claim"), q("worker.claim")),
        (
            numbered_spliced("worker.claim", "worker.claim_pruned"),
            spliced("worker.claim", "worker.claim_pruned"),
        ),
        (
            numbered("worker.flush", workflows="workflows", workflow_attempts="workflow_attempts"),
            q("worker.flush"),
        ),
    ],
)
def test_the_hot_blocks_keep_every_parameter_and_their_first_line(made, source):
    text = made.text.decode()
    named = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", source)))
    assert sorted(made.names) == sorted(named)
    assert "%(" not in text and "{workflows}" not in text and "{workflow_attempts}" not in text
    for k in range(1, len(made.names) + 1):
        assert f"${k}" in text
    first = re.sub(r"%\((\w+)\)s", lambda m: f"${made.names.index(m.group(1)) + 1}", source.split("\n", 1)[0])
    assert first.startswith("-- ") and text.split("\n", 1)[0] == first
    assert [line for line in text.splitlines()[1:] if line.lstrip().startswith("--")] == []


def test_identifiers_are_quoted_into_the_text():
    made = numbered(
        "worker.flush", workflows=("wfctl_parts", "workflows_p1"), workflow_attempts="workflow_attempts"
    )
    assert b'"wfctl_parts"."workflows_p1"' in made.text
