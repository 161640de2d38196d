"""The connection pool's own log lines (psycopg_pool, logger ``psycopg.pool``) in the worker's
log, in its format, as ``pool`` events at level info.

The pool of the transactional steps logs when it throws away a connection the server closed
and when it fails to connect (during a PostgreSQL restart, several times a second): expected
while the server is away, and the worker says itself what that means for its runs (its
heartbeat, claim and flush lines). Without this they reached stderr raw, in Python's default
format, among the worker's lines.
"""

from __future__ import annotations

import logging

from wfctl.connection import scrub
from wfctl.worker.log import WorkerLog

LOGGER = "psycopg.pool"


class PoolLogHandler(logging.Handler):
    def __init__(self, log: WorkerLog, dsn: str) -> None:
        super().__init__(level=logging.WARNING)  # what reached stderr before: its warnings
        self._log = log
        self._dsn = dsn

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = " ".join(record.getMessage().split())
            self._log.event("pool", scrub(text, self._dsn), level="info")
        except Exception:  # a log line must never take the worker down
            self.handleError(record)


def route(log: WorkerLog, dsn: str) -> PoolLogHandler:
    """Send the pool's records to ``log`` from now on (and not to the root logger's handlers);
    ``unroute`` takes the handler back."""
    handler = PoolLogHandler(log, dsn)
    logger = logging.getLogger(LOGGER)
    logger.addHandler(handler)
    logger.propagate = False
    return handler


def unroute(handler: PoolLogHandler) -> None:
    logger = logging.getLogger(LOGGER)
    logger.removeHandler(handler)
    if not logger.handlers:
        logger.propagate = True
