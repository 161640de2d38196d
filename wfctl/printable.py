"""Stored strings made safe to write to a terminal or a log, in one place.

A workflow type, a step name, an error message, a worker id or a message topic is written by any
client of the database. Written raw, a control character would act on the reader's terminal
(ESC and the 8-bit CSI start escape sequences that move the cursor, clear the screen or retitle
the window; CR and BS overwrite what a line said) or forge lines in a log (a line feed, or CR for
readers that take it as a line end); and a Unicode format character would change what a line
shows without showing itself (a right-to-left override draws ``ord\\u202eredro`` as
``ordorder``; a zero-width space makes two names look the same).

``printable`` writes each of them as an escape that shows: C0 controls, DEL and C1 controls as
``\\xNN``; the bidirectional controls (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to
U+2069), the zero-width characters (U+200B to U+200D, U+2060, U+FEFF) and the line and paragraph
separators U+2028 and U+2029 as ``\\uNNNN``. Everything else, other scripts and emoji included,
is kept. The worker's log lines and everything the CLI draws go through it; JSON output escapes
the same characters as JSON escapes (``wfctl/cli/render.py``), the Prometheus text its own way
(``wfctl/prometheus.py``).
"""

from __future__ import annotations

import re

#: The C0 controls, DEL and the C1 controls.
CONTROLS = "\x00-\x1f\x7f-\x9f"
#: Characters that change how text shows without showing themselves: bidirectional controls,
#: zero-width characters, and the line and paragraph separators.
INVISIBLE = "\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060\u2066-\u2069\ufeff"
_UNSAFE = re.compile(f"[{CONTROLS}{INVISIBLE}]")


def escape(char: str) -> str:
    """The escape ``printable`` writes for one unsafe character."""
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str, *, keep: str = "") -> str:
    """``text`` with every control and invisible format character escaped (but those in
    ``keep``, e.g. the line feed of a multi-line block)."""
    if text.isascii() and text.isprintable():  # no control character: nothing to escape
        return text

    def replace(match: re.Match[str]) -> str:
        char = match.group()
        return char if char in keep else escape(char)

    return _UNSAFE.sub(replace, text)
