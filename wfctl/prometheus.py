"""The Prometheus text exposition format (version 0.0.4), as node_exporter's textfile collector
reads it: metric families with HELP and TYPE lines, and label values escaped.

Label values come from stored data (workflow types, step names) and may hold any character. The
format escapes only backslash, double quote and line feed; any other control character would
reach the file raw, and a CR (or VT, FF, NEL ...) ends a line for many readers. So each control
character but the line feed is written as a printable stand-in: a C0 control or DEL as its
Unicode control picture (CR as U+240D, ESC as U+241B), a C1 control as U+FFFD. Two stored values
can then give one label value ("a\\r" and "a\\u240d"): the report queries group by the label
value (the same translation, done by the database with :func:`label_translation`), so a series
is never written twice, and :class:`Family` refuses one that would be.

For the collector, :func:`write_atomically` puts the text in place so that a reader sees the
previous file or the new one, never a part; :func:`generated_family` is the gauge that tells how
old that file is when nothing has replaced it for a while.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
TYPES = ("counter", "gauge", "summary", "histogram", "untyped")

# The control characters a label value cannot carry (every C0 but the line feed, DEL, C1) and
# their stand-ins, position by position. NUL is apart: PostgreSQL text never holds it (and
# refuses it in a parameter), so the database's translation leaves it out.
_NUL = "\x00"
_CONTROLS = "".join(chr(c) for c in (*range(0x01, 0x0A), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0)))
_PICTURES = "".join(
    chr(0x2400 + c) if c < 0x20 else "\u2421" if c == 0x7F else "\ufffd" for c in map(ord, _CONTROLS)
)
_TRANSLATE = str.maketrans(_NUL + _CONTROLS, "\u2400" + _PICTURES)


@dataclass(frozen=True)
class Sample:
    """One line: ``name{labels} value``. ``suffix`` is appended to the family name (``_sum``)."""

    value: float
    labels: Mapping[str, str] = field(default_factory=dict)
    suffix: str = ""


@dataclass(frozen=True)
class Family:
    name: str
    type: str
    help: str
    samples: tuple[Sample, ...]

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"invalid metric name {self.name!r}")
        if self.type not in TYPES:
            raise ValueError(f"invalid metric type {self.type!r}")
        seen: set[tuple[str, frozenset[tuple[str, str]]]] = set()
        for sample in self.samples:
            for label in sample.labels:
                if not _LABEL.match(label) or label.startswith("__"):
                    raise ValueError(f"invalid label name {label!r}")
            # the series a reader stores: label values as written, an empty one is no label
            key = (sample.suffix, frozenset(_series_labels(sample.labels)))
            if key in seen:
                raise ValueError(f"{self.name}{sample.suffix}: two samples of the series {dict(key[1])}")
            seen.add(key)


def _series_labels(labels: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    for key, value in labels.items():
        text = label_value(str(value))
        if text:
            yield key, text


def label_value(value: str) -> str:
    """The label value ``value`` is written as (before escaping): control characters but the
    line feed replaced by their stand-ins."""
    return value.translate(_TRANSLATE)


def label_translation() -> dict[str, str]:
    """Parameters for the database's ``translate(x, %(controls)s, %(pictures)s)``, which gives
    :func:`label_value` of x, so that the report queries group by what the file will say; and
    ``x ~ %(control_class)s``, true when x holds one of the controls."""
    return {"controls": _CONTROLS, "pictures": _PICTURES, "control_class": f"[{_CONTROLS}]"}


def escape_label_value(value: str) -> str:
    """Backslash, double quote and line feed are the three characters a label value escapes;
    the other control characters are replaced (see :func:`label_value`)."""
    return label_value(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return label_value(text).replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{key}="{escape_label_value(str(val))}"' for key, val in labels.items())
    return "{" + inner + "}"


def exposition(families: Iterable[Family]) -> str:
    """The text of ``families``, each line ending in a line feed (the format requires it)."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for sample in family.samples:
            lines.append(f"{family.name}{sample.suffix}{_labels(sample.labels)} {format_value(sample.value)}")
    return "".join(line + "\n" for line in lines)


GENERATED = "wfctl_metrics_generated_timestamp_seconds"


def generated_family(timestamp: float) -> Family:
    """The Unix time the output was made: ``time() - wfctl_metrics_generated_timestamp_seconds``
    is the age of what a collector reads, which grows while runs that cannot reach the database
    leave the last good file in place."""
    return Family(
        GENERATED,
        "gauge",
        "Unix time at which wfctl metrics read these figures from the database.",
        (Sample(timestamp),),
    )


#: A new file's mode: node_exporter runs as its own user and must read it. A file that exists
#: keeps its mode.
NEW_FILE_MODE = 0o644


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that no reader ever sees a part of it: the text goes to a
    temporary file in the same directory (a hidden ``.NAME.*.tmp``, which the textfile collector
    does not read: it reads ``*.prom``), is flushed to disk, and is renamed over ``path`` in one
    step; then the directory is flushed, so the rename survives a crash. On any error the
    temporary file is removed and ``path`` is left as it was. Raises ``OSError``."""
    directory = path.parent
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = NEW_FILE_MODE
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
