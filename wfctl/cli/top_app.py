"""``wfctl top``'s live view, in Textual: the panes of wfctl/cli/top_panes.py refreshed from a
Source (wfctl/top/source.py) every ``refresh`` seconds, a run opened as ``wfctl show`` draws
it, and cancel and retry after a confirmation. Imported only when ``wfctl top`` runs: no other
command loads Textual.

A refresh that fails shows a banner and keeps the last data, marked stale; the next one
reconnects. Reads run in a thread (the screen stays live while the database is slow); the
actions go through ``Actions``, which the command points at the primary."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar
from uuid import UUID

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Input, Label, Sparkline, Static

from wfctl import reports
from wfctl.cli import render, render_reports, render_waits
from wfctl.cli.top_panes import Pane, cells, panes
from wfctl.connection import translate
from wfctl.errors import WfctlError
from wfctl.top.actions import Actions
from wfctl.top.snapshot import Snapshot
from wfctl.top.source import Source

#: The panes whose rows are runs: Enter opens one.
RUN_PANES = ("stuck", "failures")


def one_line(exc: BaseException) -> str:
    """An error as the one line ``wfctl`` would print for it (no traceback)."""
    if isinstance(exc, WfctlError):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    try:
        return str(translate(exc)).splitlines()[0]
    except Exception:
        return f"internal error: {type(exc).__name__}: {exc}"


class Confirm(ModalScreen[bool]):
    """A question answered y (True) or n / Escape (False)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "yes"),
        Binding("n", "answer(False)", "no"),
        Binding("escape", "answer(False)", "no", show=False),
    ]
    DEFAULT_CSS = """
    Confirm { align: center middle; }
    Confirm > Label { width: 80%; border: thick $warning; padding: 1 2; background: $surface; }
    """

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        yield Label(Text(f"{self.question} (y/n)"), id="question")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class TypeFilter(ModalScreen[str | None]):
    """The type to show (empty: every type); Escape leaves the filter as it is."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "leave", "leave as it is")]
    DEFAULT_CSS = """
    TypeFilter { align: center middle; }
    TypeFilter > Vertical { width: 70%; height: auto; border: thick $accent; background: $surface; }
    """

    def __init__(self, current: str | None) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Show only the workflow type (empty: every type), then Enter:")
            yield Input(value=self.current or "", id="type-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip())

    def action_leave(self) -> None:
        self.dismiss(None)


class RunScreen(Screen[None]):
    """One run as ``wfctl show`` draws it; c cancels it, r retries it (after a confirmation)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "back"),
        Binding("c", "cancel_run", "cancel"),
        Binding("r", "retry_run", "retry"),
        Binding("q", "app.quit", "quit"),
    ]

    def __init__(self, run_id: UUID, detail: Text) -> None:
        super().__init__()
        self.run_id = run_id
        self.detail = detail

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="run-scroll"):
            yield Static(self.detail, id="run-detail")
        yield Static("", id="run-result")
        yield Footer()

    def say(self, line: str, *, error: bool = False) -> None:
        self.query_one("#run-result", Static).update(Text(line, style="bold red" if error else "green"))

    def show_detail(self, detail: Text) -> None:
        self.detail = detail
        self.query_one("#run-detail", Static).update(detail)

    def action_cancel_run(self) -> None:
        app = self.app
        assert isinstance(app, TopApp)
        app.confirm_and_act("cancel", self.run_id)

    def action_retry_run(self) -> None:
        app = self.app
        assert isinstance(app, TopApp)
        app.confirm_and_act("retry", self.run_id)


class TopApp(App[int]):
    """The live view. ``refresh_now`` reads and shows one snapshot (the timer calls it; tests
    await it)."""

    TITLE = "wfctl top"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),
        Binding("tab", "focus_next", "next pane"),
        Binding("shift+tab", "focus_previous", "previous pane"),
        Binding("slash", "filter", "filter by type", key_display="/"),
        Binding("f", "filter", "filter by type", show=False),
        Binding("enter", "open", "open run", show=False),
        Binding("g", "refresh_now", "refresh"),
    ]
    DEFAULT_CSS = """
    #banner { display: none; background: $error; color: $text; padding: 0 1; }
    #banner.shown { display: block; }
    #summary { padding: 0 1; }
    #throughput { height: 3; margin: 0 1; }
    .pane { height: auto; max-height: 14; border: round $primary-darken-2; }
    .pane:focus-within { border: round $accent; }
    .pane DataTable { height: auto; max-height: 12; }
    #panes.stale { opacity: 55%; }
    #result { padding: 0 1; }
    """

    def __init__(
        self, source: Source, actions: Actions, *, refresh: float, first: Snapshot | None = None
    ) -> None:
        super().__init__()
        self.source = source
        self.actions = actions
        self.refresh_seconds = refresh
        self.snapshot: Snapshot | None = first
        self.failure: str | None = None  # the last refresh's error, None when it succeeded
        self.refreshes = 0  # refreshes finished (succeeded or failed)
        self._reading = False

    def compose(self) -> ComposeResult:
        yield Static("", id="banner")
        yield Static("", id="summary")
        yield Sparkline([0], id="throughput")
        with VerticalScroll(id="panes"):
            for pane in panes(self.snapshot) if self.snapshot else []:
                with Vertical(classes="pane", id=f"pane-{pane.id}"):
                    table: DataTable[Any] = DataTable(id=pane.id, cursor_type="row", zebra_stripes=True)
                    yield table
        yield Static("", id="result")
        yield Footer()

    def on_mount(self) -> None:
        if self.snapshot is not None:
            self.show(self.snapshot)
        self.set_interval(self.refresh_seconds, self._tick)

    def _tick(self) -> None:
        if not self._reading:
            self.run_worker(self.refresh_now(), group="refresh", exclusive=True)

    async def action_refresh_now(self) -> None:
        await self.refresh_now()

    async def refresh_now(self) -> None:
        """Read one snapshot (in a thread) and show it; on a failure, the banner."""
        self._reading = True
        try:
            snap = await asyncio.to_thread(self.source.take)
        except Exception as exc:  # shown in the banner: never a traceback
            self.failed(one_line(exc))
        else:
            self.failure = None
            self.show(snap)
        finally:
            self._reading = False
            self.refreshes += 1

    def failed(self, line: str) -> None:
        self.failure = line
        banner = self.query_one("#banner", Static)
        banner.update(Text(f"database unreachable: {line}; retrying every {self._every()}"))
        banner.add_class("shown")
        self.query_one("#panes").add_class("stale")
        if self.snapshot is not None:
            self._summary(self.snapshot, stale=True)

    def _every(self) -> str:
        return render.seconds(self.refresh_seconds)

    def show(self, snap: Snapshot) -> None:
        self.snapshot = snap
        self.query_one("#banner", Static).remove_class("shown")
        self.query_one("#panes").remove_class("stale")
        self._summary(snap, stale=False)
        self.query_one("#throughput", Sparkline).data = list(snap.completions)
        for pane in panes(snap):
            self._fill(pane)

    def _summary(self, snap: Snapshot, *, stale: bool) -> None:
        as_of = snap.as_of.astimezone().strftime("%H:%M:%S")
        parts = [
            f"{snap.per_second:.1f} completions/s",
            f"{sum(t.running for t in snap.types)} running",
            f"{sum(t.pending for t in snap.types)} pending",
            f"{sum(t.parked_total for t in snap.types)} parked",
            f"{len(snap.stuck)} stuck",
            f"type: {snap.workflow_type}" if snap.workflow_type else "every type",
            f"{'STALE, ' if stale else ''}as of {as_of}, every {self._every()}",
        ]
        if snap.replica is not None:
            parts.append(_replica(snap))
        summary = render.plain(" · ".join(parts), style="dim" if stale else "")
        self.query_one("#summary", Static).update(summary)

    def _fill(self, pane: Pane) -> None:
        table = self.query_one(f"#{pane.id}", DataTable)
        box = self.query_one(f"#pane-{pane.id}")
        box.border_title = f"{pane.title} [{len(pane.rows)}]"
        row, keep = table.cursor_row, table.cursor_type
        table.clear(columns=not table.columns)
        if not table.columns:
            table.add_columns(*pane.columns)
        for key, values in pane.rows:
            table.add_row(*cells(values), key=key)
        if pane.rows:
            table.move_cursor(row=min(row, len(pane.rows) - 1))
        table.cursor_type = keep

    def say(self, line: str, *, error: bool = False) -> None:
        self.query_one("#result", Static).update(Text(line, style="bold red" if error else "green"))

    # -- the keys ---------------------------------------------------------------------------

    def action_filter(self) -> None:
        self.push_screen(TypeFilter(self.source.workflow_type), self._filtered)

    async def _filtered(self, answer: str | None) -> None:
        if answer is None:
            return
        if answer:
            try:
                await asyncio.to_thread(self.source.check_type, answer)
            except Exception as exc:
                self.say(one_line(exc), error=True)
                return
        self.source.filter(answer or None)
        self.say(f"showing {answer}" if answer else "showing every type")
        await self.refresh_now()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id in RUN_PANES and event.row_key.value is not None:
            self.run_worker(self.open_run(UUID(event.row_key.value)), group="open", exclusive=True)

    async def action_open(self) -> None:
        focused = self.focused
        if isinstance(focused, DataTable) and focused.id in RUN_PANES and focused.row_count:
            key = focused.coordinate_to_cell_key(focused.cursor_coordinate).row_key.value
            if key is not None:
                await self.open_run(UUID(key))

    async def open_run(self, run_id: UUID) -> None:
        """Open the run: its ``wfctl show`` report on a screen of its own."""
        try:
            detail = await asyncio.to_thread(self._detail, run_id)
        except Exception as exc:
            self.say(one_line(exc), error=True)
            return
        await self.push_screen(RunScreen(run_id, detail))

    def _detail(self, run_id: UUID) -> Text:
        found = self.source.read(lambda conn: reports.show_workflow(conn, run_id))
        width = max(60, self.size.width - 4)

        def draw() -> None:
            render_reports.workflow_detail(found, traceback=False, extra=render_waits.summary(found))
            render_waits.tables(found)

        return render.drawn(draw, width)

    def confirm_and_act(self, action: str, run_id: UUID) -> None:
        where = f" {self.actions.where}" if self.actions.where else ""
        question = f"{action.capitalize()} run {run_id}{where}?"

        async def answered(yes: bool | None) -> None:
            if yes:
                await self.act(action, run_id)
            else:
                self._say_on_run(f"{action}: answered no, nothing changed")

        self.push_screen(Confirm(question), answered)

    async def act(self, action: str, run_id: UUID) -> None:
        """Cancel or retry the run (as ``wfctl cancel`` / ``wfctl retry``), then show it again."""
        do = self.actions.cancel if action == "cancel" else self.actions.retry
        try:
            line = await asyncio.to_thread(do, run_id)
        except Exception as exc:
            self._say_on_run(one_line(exc), error=True)
            return
        self._say_on_run(line)
        try:
            detail = await asyncio.to_thread(self._detail, run_id)
        except Exception as exc:
            self._say_on_run(f"{line}; reading it again failed: {one_line(exc)}", error=True)
            return
        if isinstance(self.screen, RunScreen):
            self.screen.show_detail(detail)

    def _say_on_run(self, line: str, *, error: bool = False) -> None:
        if isinstance(self.screen, RunScreen):
            self.screen.say(line, error=error)
        self.say(line, error=error)

    def screen_text(self) -> str:
        """The screen as plain text, as ``export_screenshot`` draws it (for the docs' capture)."""
        import io

        from rich.console import Console

        width, height = self.size
        console = Console(width=width, height=height, file=io.StringIO(), record=True, force_terminal=True)
        console.print(self.screen._compositor.render_update(full=True))
        return console.export_text()

    async def action_quit(self) -> None:
        self.exit(0)


def _replica(snap: Snapshot) -> str:
    status = snap.replica
    assert status is not None
    if not status.standby:
        return "read from a server that is not a standby"
    age = "-" if status.replayed_age is None else render.seconds(status.replayed_age)
    worry = ""
    if status.paused:
        worry = " (replay PAUSED)"
    elif status.receiver != "streaming":
        worry = " (NOT streaming)"
    return f"standby: as of {age} ago{worry}"
