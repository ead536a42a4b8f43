"""The metric names the docs and the Grafana dashboard use exist in the code (pure)."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = ("_total", "_bucket", "_sum", "_count")


def base(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def defined() -> set[str]:
    names = set()
    for folder in ("servefleet", "controller", "proxy", "replica"):
        for path in (ROOT / folder).rglob("*.py"):
            names |= set(re.findall(r'"(servefleet_[a-z_]+)"', path.read_text()))
    return {base(n) for n in names}


def test_every_documented_metric_exists_and_every_metric_is_documented() -> None:
    docs = (ROOT / "docs" / "observability.md").read_text()
    documented = {base(n) for n in re.findall(r"`(servefleet_[a-z_]+)`", docs)}
    assert documented - defined() == set()
    assert defined() - documented == set()


def test_the_grafana_dashboard_queries_real_metrics() -> None:
    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {base(n) for e in exprs for n in re.findall(r"servefleet_[a-z_]+", e)}
    assert used and used - defined() == set()
