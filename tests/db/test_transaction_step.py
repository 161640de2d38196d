"""``ctx.transaction``: the application's writes commit with the step's checkpoint, fenced by
the lease, exactly once however often the worker is killed, frozen, cancelled or cut off around
the step (docs/explanation/transactions.md)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import conninfo
from support.transaction_step import ledger, steps

import wfctl
from wfctl.context import Context, MemoryJournal, RecordedStep
from wfctl.worker.transactions import Fenced, TransactionPool, run_step


def test_steps_do_not_nest_in_memory_either() -> None:
    ctx = Context("wf-1", "t", None, 1, MemoryJournal())
    with pytest.raises(wfctl.StepError) as info:
        ctx.transaction("outer", lambda conn: ctx.step("inner", lambda: 1))
    assert isinstance(info.value.__cause__, wfctl.PermanentError)  # uncaught: the run fails at once
    assert "inside the function of transactional step 'outer'" in info.value.message
    assert ctx.step("after", lambda: 2) == 2  # the context is usable again afterwards


def test_a_replay_returns_the_checkpoint_without_calling_fn() -> None:
    calls: list[object] = []
    journal = MemoryJournal({1: RecordedStep(1, "debit", {"balance": 90})})
    ctx = Context("wf-1", "t", None, 2, journal)
    assert ctx.transaction("debit", calls.append) == {"balance": 90}
    assert calls == []


class CutAtCommit:
    """A Unix-socket proxy in front of the server that cuts one connection at its first COMMIT:
    ``reply`` forwards the COMMIT and drops the server's answer (committed, the client cannot
    know), ``request`` drops the COMMIT itself (not committed). Other connections pass."""

    def __init__(self, dsn: str, mode: str) -> None:
        params = conninfo.conninfo_to_dict(dsn)
        host, port = str(params.get("host") or "/tmp"), str(params.get("port") or "5432")
        self.upstream: Any = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, int(port))
        self.family = socket.AF_UNIX if host.startswith("/") else socket.AF_INET
        self.mode = mode
        self.dir = tempfile.mkdtemp(prefix="wfctl-cut-")
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(f"{self.dir}/.s.PGSQL.{port}")
        self.listener.listen()
        self.dsn = conninfo.make_conninfo(dsn, host=self.dir)
        self.armed = True
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.socket(self.family)
            server.connect(self.upstream)
            cut = threading.Event()
            threading.Thread(target=self._up, args=(client, server, cut), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, cut), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, cut: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if self.armed and b"COMMIT\x00" in data:
                    self.armed = False
                    self.cuts += 1
                    if self.mode == "request":
                        _hang_up(client, server)
                        return
                    cut.set()
                server.sendall(data)

    def _down(self, server: socket.socket, client: socket.socket, cut: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                if cut.is_set():  # the COMMIT's answer: the server has committed; the client never hears
                    _hang_up(client, server)
                    return
                client.sendall(data)

    def close(self) -> None:
        self.listener.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _hang_up(*ends: socket.socket) -> None:
    for end in ends:  # shutdown, not only close: it wakes the other thread's recv on the socket
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
        end.close()


@pytest.fixture
def running(dsn: str, conn) -> tuple[Any, int]:
    """A workflow as a worker's claim leaves it: running, under lease epoch 1."""
    wid = wfctl.submit(dsn, "held", None)
    (epoch,) = conn.execute(
        "UPDATE workflows SET status = 'running', lease_epoch = lease_epoch + 1, lease_owner = 'test'"
        " WHERE id = %s RETURNING lease_epoch",
        (wid,),
    ).fetchone()
    return wid, epoch


@contextlib.contextmanager
def cut_pool(dsn: str, mode: str) -> Iterator[tuple[CutAtCommit, TransactionPool]]:
    proxy = CutAtCommit(dsn, mode)
    pool = TransactionPool(proxy.dsn, 2, hold=5)
    try:
        yield proxy, pool
    finally:
        pool.close()
        proxy.close()


def test_a_lost_commit_reply_returns_the_stored_checkpoint_without_calling_fn_again(
    dsn: str, ledger_table, running
) -> None:
    wid, epoch = running
    calls: list[int] = []

    def fn(conn: psycopg.Connection[Any]) -> str:
        calls.append(1)
        conn.execute("INSERT INTO app_ledger (workflow_id, entry) VALUES (%s, 7)", (wid,))
        return '{"entry": 7}'

    with cut_pool(dsn, "reply") as (proxy, pool):
        output = run_step(pool, wid, epoch, 1, 1, "debit", datetime.now(UTC), fn)
    assert proxy.cuts == 1 and calls == [1]
    assert output == {"entry": 7}
    assert ledger(dsn) == [(wid, 7)]
    assert [(n, name, status, e) for n, name, status, e in steps(dsn, wid)] == [
        (1, "debit", "completed", epoch)
    ]


def test_a_lost_commit_request_raises_and_stores_nothing(dsn: str, ledger_table, running) -> None:
    wid, epoch = running

    def fn(conn: psycopg.Connection[Any]) -> str:
        conn.execute("INSERT INTO app_ledger (workflow_id, entry) VALUES (%s, 7)", (wid,))
        return "7"

    with cut_pool(dsn, "request") as (proxy, pool), pytest.raises(psycopg.OperationalError):
        run_step(pool, wid, epoch, 1, 1, "debit", datetime.now(UTC), fn)
    assert proxy.cuts == 1
    assert ledger(dsn) == []
    assert steps(dsn, wid) == []


def test_a_fenced_step_rolls_back_and_keeps_the_first_checkpoint(
    dsn: str, conn, ledger_table, running
) -> None:
    wid, epoch = running

    def write(c: psycopg.Connection[Any]) -> str:
        c.execute("INSERT INTO app_ledger (workflow_id, entry) VALUES (%s, 2)", (wid,))
        return "2"

    pool = TransactionPool(dsn, 1, hold=5)
    try:
        assert run_step(pool, wid, epoch, 1, 1, "debit", datetime.now(UTC), lambda c: "null") is None
        # the same step again under the same epoch (a worker never sends it twice): the stored
        # checkpoint (JSON null) is returned and fn's writes roll back
        assert run_step(pool, wid, epoch, 1, 1, "debit", datetime.now(UTC), write) is None
        conn.execute("UPDATE workflows SET lease_epoch = lease_epoch + 1 WHERE id = %s", (wid,))
        with pytest.raises(Fenced):
            run_step(pool, wid, epoch, 1, 2, "debit", datetime.now(UTC), write)
    finally:
        pool.close()
    assert ledger(dsn) == []
    assert [(n, name) for n, name, _, _ in steps(dsn, wid)] == [(1, "debit")]
