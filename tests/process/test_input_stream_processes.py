"""Inputs as the user gave them; the catalogue in test_bad_input.py has a row for each refusal, these
check what a row cannot: memory, caps, the values stored, and what `show` draws of a value Python
cannot read whole.

The tests of it that start processes (wfctl, a server, a build); those that need only the database
are in tests/db/test_input_stream.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from support.input_stream import count

from wfctl.validate import MAX_INPUT_BYTES

# VmHWM, not ru_maxrss: Linux carries ru_maxrss over an exec, so a child of a big pytest
# would report pytest's peak
PEAK = textwrap.dedent(
    """
    import runpy, sys
    sys.argv = ["wfctl", *sys.argv[1:]]
    code = 0
    try:
        runpy.run_module("wfctl", run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    print("peak-kb", peak, code, file=sys.stderr)
    """
)


def peak_kb(*args: str, cwd: object) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", PEAK, *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )
    last = proc.stderr.strip().splitlines()[-1].split()
    assert last[0] == "peak-kb" and last[2] == "0", proc.stderr[-2000:]
    return int(last[1])


def test_input_file_is_streamed(dsn, clean_env):
    """48 lines of almost 1 MB: the peak memory grows by far less than the file (reading it
    whole, decoding and splitting it, and keeping every input took four times its size)."""
    line = json.dumps({"blob": "x" * (MAX_INPUT_BYTES - 20)}) + "\n"
    (clean_env / "big.jsonl").write_text(line * 48)
    (clean_env / "small.jsonl").write_text('{"n": 1}\n')
    base = peak_kb("submit", "order", "--input-file", "small.jsonl", "--force", "--dsn", dsn, cwd=clean_env)
    big = peak_kb("submit", "order", "--input-file", "big.jsonl", "--force", "--dsn", dsn, cwd=clean_env)
    assert count(dsn) == 49
    grown_mb = (big - base) / 1024
    assert grown_mb < 48, f"submitting a 48 MB file took {grown_mb:.0f} MB more than a 9-byte one"
