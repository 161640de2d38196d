"""The steady load of the rolling-upgrade test, run by a release's own interpreter (the one
before the upgrade: its client must keep working on the new schema):

    python upgrade_load.py DSN IDS_FILE STOP_FILE

It submits an ``upgrade_order`` every 20 ms with the library of the release that runs it, and
sends each run its "go" message a second after submitting it (so most runs wait for it,
parked). Each id is appended to IDS_FILE once submitted. Once STOP_FILE exists it sends the
messages still owed and exits 0; an error of the library exits 1 with its message.
"""

from __future__ import annotations

import os
import sys
import time

import wfctl


def main(dsn: str, ids_file: str, stop_file: str) -> int:
    owed: list[tuple[float, str]] = []
    n = 0
    with open(ids_file, "a", encoding="utf-8") as ids:
        while not os.path.exists(stop_file):
            run = str(wfctl.submit(dsn, "upgrade_order", {"n": n, "sleep": 0.5}))
            ids.write(f"{run} {n}\n")
            ids.flush()
            owed.append((time.monotonic() + 1.0, run))
            n += 1
            while owed and owed[0][0] <= time.monotonic():
                wfctl.send(dsn, owed.pop(0)[1], "go", {"from": wfctl.__version__})
            time.sleep(0.02)
    for _, run in owed:
        wfctl.send(dsn, run, "go", {"from": wfctl.__version__})
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
