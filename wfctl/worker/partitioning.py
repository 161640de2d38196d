"""The partitions duty: in the partitioned layout (wfctl/partitions.py), the partitions ahead of
time, looked for at the start and every ``partitions.DUTY_INTERVAL`` (one catalog lookup when
they exist; nothing when the layout is unpartitioned). What it finds also tells the claim
whether its scans are bounded by partitions (``claims.Frontier.bounded``)."""

from __future__ import annotations

from collections.abc import Callable

from wfctl import partitions
from wfctl.worker.claims import Frontier
from wfctl.worker.duties import Duty
from wfctl.worker.log import WorkerLog
from wfctl.worker.session import Session


class PartitionDuty(Duty):
    """``partitions.ensure`` through ``session``; off while ``enabled()`` is false."""

    def __init__(
        self,
        session: Session,
        log: WorkerLog,
        frontier: Frontier,
        *,
        enabled: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__("partitions", partitions.DUTY_INTERVAL, self._ensure, active=enabled)
        self.session = session
        self.log = log
        self.frontier = frontier

    def _ensure(self) -> None:
        made = self.session.guarded("partition check", partitions.ensure)
        if made is None:
            return
        self.frontier.bounded = made.partitioned
        if made.created:
            moved = f", {made.moved} row(s) moved out of the default partitions" if made.moved else ""
            self.log.info(f"created the partitions of {made.created} interval(s) ahead{moved}")
