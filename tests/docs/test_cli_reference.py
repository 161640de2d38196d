"""The generated command-line reference in docs/reference/cli/ matches the CLI: every command has
a page (a group's subcommands a section of its page), no page lacks a command, and the pages are
what ``python -m wfctl.cli.docgen docs/reference/cli`` writes from the commands' help."""

from __future__ import annotations

import html
import re
import subprocess
import sys

import pytest
import typer
import yaml
from helpers import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

from wfctl.cli import docgen
from wfctl.cli.app import app
from wfctl.cli.completion import command_tree

REFERENCE = REPO / "docs" / "reference" / "cli"
pytestmark = pytest.mark.skipif(not REFERENCE.is_dir(), reason="needs the source tree")


def committed() -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(REFERENCE.glob("*.md"))}


def test_reference_pages_are_up_to_date():
    wanted = docgen.pages(typer.main.get_command(app))
    found = committed()
    stale = sorted(name for name in wanted.keys() & found.keys() if wanted[name] != found[name])
    missing = sorted(wanted.keys() - found.keys())
    extra = sorted(found.keys() - wanted.keys())
    assert not (stale or missing or extra), (
        f"docs/reference/cli is out of date (differ: {stale}, missing: {missing}, no command: {extra}): "
        f"run `{docgen.REGENERATE}`"
    )


@pytest.mark.parametrize(
    "leak",
    [
        "list[str]",  # a repeatable option's Python type, not a word the user types
        "[[",  # an optional argument whose metavar already has brackets
        "<=x<=",  # Typer's bounds, where the command says its range in its own words
    ],
)
def test_no_page_shows_the_help_s_python_types_or_typer_s_bounds(leak):
    shown = {page.name for page in REFERENCE.glob("*.md") if leak in page.read_text(encoding="utf-8")}
    assert not shown, f"{leak!r} in the help of {sorted(shown)}"


def test_every_command_has_a_page_and_every_page_a_command():
    """Read from the command tree the completions use, not from the generator."""
    tree = [c for c in command_tree(typer.main.get_command(app)) if c.path]
    tops = {c.path[0] for c in tree}
    expected = {docgen.INDEX} | {f"{name}.md" for name in tops}
    missing, extra = sorted(expected - set(committed())), sorted(set(committed()) - expected)
    assert not (missing or extra), (
        f"commands without a page: {missing}; pages without a command: {extra} (run `{docgen.REGENERATE}`)"
    )
    index = (REFERENCE / docgen.INDEX).read_text(encoding="utf-8")
    for command in tree:
        page = f"{command.path[0]}.md"
        text = (REFERENCE / page).read_text(encoding="utf-8")
        path = " ".join(("wfctl", *command.path))
        heading = "#" if len(command.path) == 1 else "##"
        assert f"\n{heading} {path}\n" in f"\n{text}", f"{page} has no heading for `{path}`"
        link = page if len(command.path) == 1 else f"{page}#{path.replace(' ', '-')}"
        assert f"[`{path}`]({link})" in index, f"the index does not link `{path}`"
        section = text.split(f"{heading} {path}\n", 1)[1]
        for option in command.options:
            for name in option.names:
                assert f"`{name}`" in section, f"{page}: `{path}` lacks its option {name}"


def test_every_reference_page_is_in_the_navigation():
    """mkdocs build --strict fails on a page left out of the nav; this says which, without mkdocs."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))

    def paths(node: object) -> set[str]:
        if isinstance(node, str):
            return {node}
        if isinstance(node, list):
            return set().union(*(paths(n) for n in node))
        if isinstance(node, dict):
            return set().union(*(paths(n) for n in node.values()))
        return set()

    listed = paths(config["nav"])
    pages = {f"reference/cli/{name}" for name in committed()} | {"reference/api.md"}
    assert pages <= listed, f"not in mkdocs.yml's nav: {sorted(pages - listed)}"


def frobnicating_app(markup_mode: str | None) -> typer.Typer:
    extra = typer.Typer(rich_markup_mode=markup_mode)  # type: ignore[arg-type]

    @extra.command()
    def frobnicate(
        target: str = typer.Argument(..., help="What to [bold]frobnicate[/bold]."),
        level: int = typer.Option(3, "--level", "-l", help="How hard (1-5)."),
        mode: str = typer.Option("fast", help="fast or slow."),
    ) -> None:
        """[bold]Frobnicate[/bold] a target: see `wfctl frobnicate --help`.

        Second paragraph, kept.

        \b
        keep
          this layout
        \f
        Not shown: after the form feed.
        """

    @extra.command()
    def other() -> None:
        """Another command."""

    return extra


def test_a_new_command_gets_a_page_with_its_options():
    """What makes the tests above fail when someone adds a command and forgets to regenerate."""
    extra = typer.Typer()
    extra.registered_commands = list(app.registered_commands)
    extra.registered_groups = list(app.registered_groups)
    extra.registered_callback = app.registered_callback
    extra.registered_commands += frobnicating_app(None).registered_commands[:1]
    wanted = docgen.pages(typer.main.get_command(extra))
    assert set(wanted) - set(docgen.pages(typer.main.get_command(app))) == {"frobnicate.md"}
    page = wanted["frobnicate.md"]
    assert "wfctl frobnicate [OPTIONS] {target}" in page
    assert "| `-l`, `--level` | `<int>` | `3` | How hard (1-5). |" in page
    assert "| `target` | `<str>` | required |" in page
    assert "[`wfctl frobnicate`](frobnicate.md)" in wanted[docgen.INDEX]


def test_help_text_as_help_prints_it():
    """Without a markup mode (wfctl's) brackets are text; in the "rich" mode Rich markup is
    dropped; paragraphs as Click lays them out: up to the form feed, a \\b paragraph verbatim."""
    plain = docgen.pages(typer.main.get_command(frobnicating_app(None)))["frobnicate.md"]
    assert r"\[bold\]Frobnicate\[/bold\] a target: see `wfctl frobnicate --help`." in plain
    assert "Second paragraph, kept." in plain
    assert "```text\nkeep\n  this layout\n```" in plain
    assert "Not shown" not in plain
    assert "| `--mode` | `<str>` | `fast` | fast or slow. |" in plain
    rich = docgen.pages(typer.main.get_command(frobnicating_app("rich")))["frobnicate.md"]
    assert "\nFrobnicate a target: see `wfctl frobnicate --help`.\n" in rich
    assert "What to frobnicate." in rich
    assert "bold" not in rich
    worker = (REFERENCE / "worker.md").read_text(encoding="utf-8")
    assert r"(default: \[worker\] app)" in worker  # wfctl's help: the config section, as text


TRICKY = [
    "PG* variables and *emphasis* and **strong**",
    "snake_case_name and _under_ and __dunder__",
    "[reports] dsn, [link](http://example.com) and [ref][1]",
    "a <b>tag</b>, <http://example.com> and &amp; &lt;",
    "# not a heading",
    "- not a list item",
    "+ nor this",
    "1. not an ordered list",
    "!!! note not an admonition",
    "> not a quote",
    "a | b | c",
    "trailing attributes {: .red} and {#id}",
    "back\\slash \\* escaped",
    'cron "*/5 * * * * *" and 1<=x<=9',
    "`code [kept] *as* is` around text_with_underscores",
    "x__y and z__w, 1_000_000, _lead and trail_",
]


def assert_renders_as_itself(text: str) -> None:
    """``escape(text)`` rendered by Python-Markdown with the site's extensions is one paragraph
    whose text is ``text``: no emphasis, link, tag, list, heading or admonition."""
    markdown = pytest.importorskip("markdown", reason="the docs extra (pip install '.[docs]')")
    rendered = markdown.markdown(
        docgen.escape(text), extensions=["tables", "attr_list", "admonition", "toc", "pymdownx.superfences"]
    )
    assert rendered.startswith("<p>") and rendered.endswith("</p>"), rendered
    body = re.sub(r"</?code>", "`", rendered[3:-4])
    assert "<" not in body, rendered  # no element but the code spans
    assert html.unescape(body) == text


@pytest.mark.parametrize("text", TRICKY)
def test_escaped_text_renders_as_itself(text):
    assert_renders_as_itself(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab1 _*[]()<>&#|{}!+-.:\\=~^\"'/", min_size=1, max_size=30))
def test_any_text_without_code_renders_as_itself(text):
    text = " ".join(text.split())  # help texts are single lines, stripped, by then
    if text:
        assert_renders_as_itself(text)


def test_escaped_text_in_a_table_cell_stays_in_its_cell():
    markdown = pytest.importorskip("markdown", reason="the docs extra (pip install '.[docs]')")
    row = docgen.Row("`--x`", "`<str>`", "", docgen.escape("a | b, c* d_e"))
    rendered = markdown.markdown("\n".join(docgen._table("Option", [row])), extensions=["tables"])
    assert re.findall(r"<td>(.*?)</td>", rendered) == [
        "<code>--x</code>",
        "<code>&lt;str&gt;</code>",
        "",
        "a | b, c* d_e",
    ]


def test_regenerating_writes_the_pages_and_removes_stale_ones(tmp_path):
    (tmp_path / "gone.md").write_text("a command that no longer exists\n")
    assert docgen.main([str(tmp_path)]) == 0
    assert {p.name: p.read_text(encoding="utf-8") for p in sorted(tmp_path.glob("*.md"))} == committed()


@pytest.mark.parametrize("args", [[], ["a", "b"], ["--help"]])
def test_the_generator_refuses_bad_arguments_in_one_line(args):
    out = subprocess.run(
        [sys.executable, "-m", "wfctl.cli.docgen", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr == "usage: python -m wfctl.cli.docgen DIRECTORY\n"
    assert out.stdout == ""


def test_a_directory_that_cannot_be_written_is_one_line_and_exit_1(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    out = subprocess.run(
        [sys.executable, "-m", "wfctl.cli.docgen", str(blocker / "cli")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert out.returncode == 1
    assert (
        out.stderr
        == f"wfctl.cli.docgen: error: cannot write the pages into {blocker / 'cli'}: Not a directory\n"
    )
    assert blocker.read_text() == "not a directory\n"
