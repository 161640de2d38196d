"""The wfctl side of the benchmark: one workflow type of S no-op steps.

Run by ``wfctl worker --app bench.noop_app`` from the repository root (``bench/run.py`` does).
"""

import wfctl


def noop(i: int) -> int:
    return i


@wfctl.workflow("noop3")
def noop3(ctx: wfctl.Context, data: dict) -> dict:
    for i in range(data.get("steps", 3)):
        ctx.step(f"s{i + 1}", noop, i)
    return {"ok": True}
