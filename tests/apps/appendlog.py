"""One line per real execution, appended with a single write(2) to the file an environment
variable names: whole lines from many threads and processes, even under SIGKILL. Shared by the
chaos and stateful workflow apps."""

from __future__ import annotations

import os
import threading

_fds: dict[str, int] = {}
_lock = threading.Lock()


def append_line(variable: str, line: str) -> None:
    """Append ``line`` and a newline to the file $``variable`` names (nothing when unset)."""
    fd = _fds.get(variable)
    if fd is None:
        path = os.environ.get(variable)
        if not path:
            return
        with _lock:
            fd = _fds.get(variable)
            if fd is None:
                fd = _fds[variable] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{line}\n".encode())
