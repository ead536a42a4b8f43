"""Machine-readable figures from a benchmark run, for bench/run_all.py.

A benchmark prints its table for people as before, and at the end one line
`BENCH-FIGURES {json}` made by `emit`: per figure its samples (one per
round or run), its unit, whether lower is better, an optional goal, and
whether it belongs in the README's table (`headline`). run_all.py collects
the samples of every run of every benchmark, and reports the median and the
min-max spread.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

MARK = "BENCH-FIGURES "


@dataclass
class Figure:
    samples: list[float]
    unit: str
    lower_is_better: bool = True
    # "<= 50" or ">= 0.45": met when the median is on the right side.
    goal: str = ""
    headline: bool = True
    # The figure this one is measured against in the same run, by name.
    baseline: str = ""
    extra: dict[str, float] = field(default_factory=dict)


def emit(figures: dict[str, Figure]) -> None:
    print(MARK + json.dumps({name: asdict(f) for name, f in figures.items()}), flush=True)


def parse(output: str) -> dict[str, Figure]:
    """The figures of every BENCH-FIGURES line in `output`."""
    found: dict[str, Figure] = {}
    for line in output.splitlines():
        if line.startswith(MARK):
            for name, fields in json.loads(line[len(MARK):]).items():
                found[name] = Figure(**fields)
    return found


def goal_met(goal: str, value: float) -> bool | None:
    """Whether `value` meets a goal such as "<= 50"; None without a goal."""
    if not goal:
        return None
    op, _, bound = goal.partition(" ")
    limit = float(bound)
    return value <= limit if op == "<=" else value >= limit if op == ">=" else None
