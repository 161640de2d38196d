"""What ``wfctl top``'s cancel and retry keys run: set by the command (on the primary, as
``wfctl cancel`` and ``wfctl retry``), called by the live view."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID


@dataclass(frozen=True)
class Actions:
    """Cancel and retry, each returning its one-line result (raising a WfctlError when
    refused), and where they run in words ("on the primary"; empty: where the view reads)."""

    cancel: Callable[[UUID], str]
    retry: Callable[[UUID], str]
    where: str = ""
