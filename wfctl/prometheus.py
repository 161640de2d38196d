"""The Prometheus text exposition format (version 0.0.4), as node_exporter's textfile collector
reads it: metric families with HELP and TYPE lines, and label values escaped."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
TYPES = ("counter", "gauge", "summary", "histogram", "untyped")


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
        for sample in self.samples:
            for label in sample.labels:
                if not _LABEL.match(label) or label.startswith("__"):
                    raise ValueError(f"invalid label name {label!r}")


def escape_label_value(value: str) -> str:
    """Backslash, double quote and line feed are the three characters a label value escapes."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


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
