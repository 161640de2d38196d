"""Every command's --dsn, --config and --json against one table: a new
command fails here until it is classified, and the configuration reference's paragraph on these options names
every command that lacks one of them."""

from __future__ import annotations

import re

import pytest
import typer
from helpers import REPO

from wfctl.cli.app import app
from wfctl.cli.completion import command_tree

CONFIGURATION = REPO / "docs" / "reference" / "configuration.md"
COMMON = frozenset({"--dsn", "--config", "--json"})
ALL = COMMON
NO_JSON = frozenset({"--dsn", "--config"})

#: What each command takes of COMMON, and (for what it lacks) why.
EXPECTED: dict[str, frozenset[str]] = {
    "init": ALL,
    "submit": ALL,
    "worker": NO_JSON,  # it writes a log; --log-format json
    "recover": ALL,
    "stats": ALL,
    "list": ALL,
    "show": ALL,
    "workers": ALL,
    "metrics": ALL,
    "top": NO_JSON,  # a live view for people; `stats --json` is the report for scripts
    "cancel": ALL,
    "retry": ALL,
    "prune": ALL,
    "send": ALL,
    "event": ALL,
    "wait": ALL,
    "limit": ALL,
    "limits": ALL,
    "demo": NO_JSON,  # a guided tour for people
    "db status": ALL,
    "db partition": ALL,
    "db url": NO_JSON,  # stdout is the DSN alone
    "db start": frozenset({"--config"}),  # the embedded server: a DSN names no server to start
    "db stop": frozenset({"--config"}),
    "completion": frozenset(),  # prints a shell script; touches no database
    "schedule add": ALL,
    "schedule pause": ALL,
    "schedule resume": ALL,
    "schedule trigger": ALL,
    "schedule delete": ALL,
    "schedules": ALL,
    "tick": ALL,
}


def leaf_commands() -> dict[str, frozenset[str]]:
    tree = command_tree(typer.main.get_command(app))
    return {
        " ".join(c.path): frozenset(n for o in c.options for n in o.names) & COMMON
        for c in tree
        if not c.children
    }


def test_every_command_is_classified():
    found = leaf_commands()
    assert sorted(found) == sorted(EXPECTED), "a command was added or removed: classify it in EXPECTED"
    wrong = {name: sorted(options) for name, options in found.items() if options != EXPECTED[name]}
    assert wrong == {}


def test_the_global_options_are_all_three():
    root = command_tree(typer.main.get_command(app))[0]
    assert frozenset(n for o in root.options for n in o.names) >= COMMON


@pytest.mark.skipif(not CONFIGURATION.exists(), reason="needs the source tree")
def test_the_configuration_reference_names_every_exception():
    text = CONFIGURATION.read_text()
    match = re.search(r"^Every command takes `--dsn` and `--config`.*?(?=\n\n)", text, re.S | re.M)
    assert match, "the configuration reference's paragraph on --dsn, --config and --json is gone"
    paragraph = " ".join(match.group(0).split())
    for name, options in EXPECTED.items():
        if options != ALL:
            assert f"`wfctl {name}`" in paragraph, f"the reference does not say what `wfctl {name}` lacks"
    for name, options in EXPECTED.items():
        if options == ALL:
            assert f"`wfctl {name}`" not in paragraph, f"the reference names `wfctl {name}` as an exception"
