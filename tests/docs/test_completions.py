"""Shell completions in completions/ match the CLI; regenerate with `wfctl completion SHELL`."""

from __future__ import annotations

import subprocess

import pytest
import typer
from helpers import REPO

from wfctl.cli import completion
from wfctl.cli.app import app

COMPLETIONS = REPO / "completions"
pytestmark = pytest.mark.skipif(not COMPLETIONS.is_dir(), reason="needs the source tree")


@pytest.mark.parametrize("shell", sorted(completion.GENERATORS))
def test_completion_files_are_up_to_date(shell):
    path = COMPLETIONS / completion.FILENAMES[shell]
    assert path.read_text() == completion.script(shell, typer.main.get_command(app)), (
        f"{path} is out of date: run `wfctl completion {shell} > {path.relative_to(REPO)}`"
    )


def test_a_new_command_changes_every_script():
    """What makes the test above fail when someone adds a command and forgets to regenerate."""
    extra = typer.Typer()
    extra.registered_commands = list(app.registered_commands)
    extra.registered_groups = list(app.registered_groups)
    extra.registered_callback = app.registered_callback

    @extra.command()
    def frobnicate(level: int = typer.Option(1, "--level")) -> None:
        """Frobnicate things."""

    tree = completion.command_tree(typer.main.get_command(extra))
    for shell, generate in completion.GENERATORS.items():
        text = generate(tree)
        assert "frobnicate" in text and "level" in text
        assert text != completion.script(shell, typer.main.get_command(app))


def complete(words: str) -> list[str]:
    parts = words.split(" ")
    script = (
        f"source {COMPLETIONS / 'wfctl.bash'}\n"
        f"COMP_WORDS=({' '.join(repr(p) for p in parts)}); COMP_CWORD={len(parts) - 1}\n"
        "_wfctl; printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_bash_completes_commands_options_and_values():
    assert complete("wfctl su") == ["submit"]
    assert complete("wfctl db s") == ["start", "status", "stop"]
    assert "--max-retries" in complete("wfctl submit order --m")
    assert complete("wfctl --dsn x worker --log-format j") == ["json"]
    assert "--older-than" in complete("wfctl prune --")
