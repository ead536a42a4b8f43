"""A deployment that prints a 5 MB line as it starts, then a short one
(GetLogs' bounds: tests/test_get_logs_bounds.py)."""

from __future__ import annotations


class LongLine:
    def __init__(self) -> None:
        print("start " + "x" * 5_000_000, flush=True)
        print("after the long line", flush=True)

    def __call__(self, request) -> str:
        return "ok"
