"""Reading workflow inputs given to ``wfctl submit``: one JSON document on the command line, or a
JSON Lines file (``--input-file``, ``-`` for stdin) checked line by line before anything is
stored. Only the CLI needs this; the library takes Python values (``wfctl/validate.py``)."""

from __future__ import annotations

import io
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from wfctl.errors import InvalidInput, WfctlError
from wfctl.validate import MAX_INPUT_BYTES, check_input_size, encode_value, load_json

#: An --input-file holds at most this many lines and bytes (README: submit). It is read line by
#: line; the validated inputs wait in a temporary file (in memory up to SPOOL_MEMORY bytes)
#: until every line has been checked, then go to the database in batches.
MAX_FILE_LINES = 1_000_000
MAX_FILE_BYTES = 1_000_000_000
SPOOL_MEMORY = 4_000_000
_BOM = b"\xef\xbb\xbf"
#: One read: a line at the limit, plus a BOM, CR and LF, plus one byte to see that it is longer.
_LINE_READ = MAX_INPUT_BYTES + len(_BOM) + 2 + 1
_JSON_WHITESPACE = " \t\r\n"


def parse_input(text: str, where: str = "workflow input", label: str = "JSON input") -> str:
    """Validate one JSON document given on the command line; return the JSON text to store.
    The size limit counts ``text`` itself, in UTF-8. ``where`` and ``label`` name the value in
    messages (``wfctl send`` parses a "message payload", its "JSON payload")."""
    check_input_size(text, label)
    try:
        value = load_json(text, where)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"malformed {label}: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    return encode_value(value, where)


@dataclass
class SpooledInputs:
    """The validated inputs of an --input-file, one JSON text per line of a temporary file."""

    file: IO[bytes]
    count: int

    def batches(self, rows: int, size: int) -> Iterator[list[str]]:
        """The inputs in file order, in lists of at most ``rows`` inputs and about ``size`` bytes
        (a single input bigger than ``size`` is a batch of its own)."""
        self.file.seek(0)
        batch: list[str] = []
        total = 0
        for line in self.file:
            if batch and (len(batch) >= rows or total + len(line) > size):
                yield batch
                batch, total = [], 0
            batch.append(line[:-1].decode("utf-8"))
            total += len(line)
        if batch:
            yield batch

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> SpooledInputs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_jsonl(stream: IO[bytes], source: str) -> SpooledInputs:
    """Read and validate a JSON Lines stream (one workflow input per non-blank line) before
    anything is stored. Lines end at LF only (U+2028 or U+0085 inside a string are text); a
    UTF-8 BOM at the start is skipped. The stream is read a line at a time, each line at most
    MAX_INPUT_BYTES (so /dev/zero or a huge line without a newline stops at the limit), the
    file at most MAX_FILE_LINES lines and MAX_FILE_BYTES bytes. The first bad line is an
    error naming its number; then nothing is stored."""
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)  # noqa: SIM115 - returned, or closed below
    try:
        count = _spool_jsonl(stream, source, spool)
    except BaseException:
        spool.close()
        raise
    if not count:
        spool.close()
        raise InvalidInput(f"{source} holds no workflow input (expected one JSON value per line)")
    return SpooledInputs(spool, count)


def _spool_jsonl(stream: IO[bytes], source: str, spool: IO[bytes]) -> int:
    nothing = "nothing was submitted"
    count = offset = number = 0
    while True:
        try:
            raw = stream.readline(_LINE_READ)
        except OSError as exc:
            raise InvalidInput(f"cannot read {source}: {exc.strerror}; {nothing}") from None
        if not raw:
            return count
        number += 1
        start, offset = offset, offset + len(raw)
        if number > MAX_FILE_LINES:
            raise InvalidInput(
                f"{source} has more than {MAX_FILE_LINES} lines, the limit for one file: split it; {nothing}"
            )
        if offset > MAX_FILE_BYTES:
            raise InvalidInput(
                f"{source} has more than {MAX_FILE_BYTES} bytes, the limit for one file: split it; {nothing}"
            )
        complete = raw.endswith(b"\n")
        cut = not complete and len(raw) == _LINE_READ  # the line goes on: it is over the limit
        if number == 1 and raw.startswith(_BOM):
            raw, start = raw[len(_BOM) :], start + len(_BOM)
        body = raw[:-1] if complete else raw
        if body.endswith(b"\r"):
            body = body[:-1]
        where = f"{source} line {number}"
        if len(body) > MAX_INPUT_BYTES:
            size = f"more than {MAX_INPUT_BYTES} bytes" if cut else f"{len(body)} bytes"
            raise InvalidInput(f"{where} is {size}, over the limit of {MAX_INPUT_BYTES} bytes; {nothing}")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(
                f"{source} is not valid UTF-8 (line {number}, byte offset {start + exc.start}); {nothing}"
            ) from None
        if not text.strip(_JSON_WHITESPACE):
            continue
        try:
            value = load_json(text, where)
        except json.JSONDecodeError as exc:
            raise InvalidInput(
                f"{where}: malformed JSON: {exc.msg} (column {exc.colno}); {nothing}"
            ) from None
        except InvalidInput as exc:
            raise InvalidInput(f"{exc.message}; {nothing}") from None
        try:
            encoded = encode_value(value, where)
        except InvalidInput as exc:
            raise InvalidInput(f"{exc.message}; {nothing}") from None
        try:
            spool.write(encoded.encode("utf-8") + b"\n")
        except OSError as exc:
            raise WfctlError(
                f"cannot keep the checked inputs of {source} in a temporary file in "
                f"{tempfile.gettempdir()} (set TMPDIR to change it): {exc.strerror}; {nothing}"
            ) from None
        count += 1


def parse_jsonl(data: bytes, source: str) -> list[str]:
    """Validate a JSON Lines document held in memory (see ``read_jsonl``, which streams); return
    the JSON text to store for each input."""
    with read_jsonl(io.BytesIO(data), source) as spool:
        return [text for batch in spool.batches(MAX_FILE_LINES, MAX_FILE_BYTES) for text in batch]
