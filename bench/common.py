"""What the ``python -m bench.*`` benchmarks share (scale, throughput, limits, coordination).

Where the databases' server comes from and the warning when it is not durable, the SIGTERM
handler, the work directory's clean-up at the end, and the medians and ratios of the reports.
Imported by the benchmarks run with ``-m`` from the repository root; bench/run.py, which runs as a
script (``python bench/run.py``), cannot import it, and keeps its own helpers (``base._num``,
``base._ratio``, ``base.table``, ...), which the others use too.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench import run as base

# -- the server ------------------------------------------------------------------------------------


def add_server_dsn(parser: argparse.ArgumentParser) -> None:
    """The option ``--server-dsn``, which server_dsn reads."""
    parser.add_argument(
        "--server-dsn",
        help="create the databases on this server (default: $WFCTL_DSN, else a durable embedded server)",
    )


@contextlib.contextmanager
def server_dsn(given: str | None, workdir: Path) -> Iterator[tuple[str, str]]:
    """(the server's DSN, its description): ``given`` (--server-dsn), else $WFCTL_DSN, else a
    durable embedded server in ``workdir``, stopped on the way out."""
    given = given or os.environ.get("WFCTL_DSN")
    if given:
        yield given, "fresh databases on --server-dsn/WFCTL_DSN's server"
        return
    with base.embedded_server(workdir) as dsn:
        yield dsn, "embedded, fresh databases"


def warn_if_not_durable(server: base.Server) -> None:
    """A warning in the log when the server does not flush its commits (fsync off, or
    synchronous_commit off or local): commits cost less there than on a durable one."""
    if server.fsync != "on" or server.synchronous_commit not in ("on", "remote_apply", "remote_write"):
        base.log(
            f"WARNING: the server is not durable (fsync={server.fsync}, "
            f"synchronous_commit={server.synchronous_commit}); commits cost less than they would"
        )


# -- the run -----------------------------------------------------------------------------------------


def stop(signum: int, _frame: object) -> None:
    """SIGTERM (a timeout, a CI job cancelled): unwind, so that the workers are killed and the
    databases dropped on the way out. Installed with ``signal.signal(signal.SIGTERM, stop)``."""
    raise SystemExit(128 + signum)


def clean_up(workdir: Path, failed: bool, keep: bool) -> None:
    """At the end of a run: the work directory (the worker logs) kept when the run failed or
    ``--keep`` asks for it, else removed."""
    if failed or keep:
        base.log(f"worker logs kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


# -- the report ------------------------------------------------------------------------------------


def median(values: Sequence[float | None]) -> float | None:
    """The median of the values given (None: not measured), None when there is none."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def ratio_text(value: float | None) -> str:
    """A ratio to three decimals, ``n/a`` when there is none."""
    return "n/a" if value is None else f"{value:.3f}"


def spread(values: Sequence[float | None]) -> str:
    """Per-round ratios as their median and range: ``median 0.981, rounds 0.950-1.012``."""
    present = [v for v in values if v is not None]
    if not present:
        return "n/a"
    low, high = ratio_text(min(present)), ratio_text(max(present))
    return f"median {ratio_text(statistics.median(present))}, rounds {low}-{high}"
