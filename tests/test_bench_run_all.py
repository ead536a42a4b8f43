"""bench/run_all.py's plumbing, with tiny stand-in benchmarks: figures are
pooled over runs, what a run leaves behind is killed and reported, the table
says whether goals are met, and a second run is compared with the first."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import run_all  # noqa: E402
from figures import Figure  # noqa: E402

STANDIN = """
import subprocess, sys, time
sys.path.insert(0, {bench!r})
from figures import Figure, emit
if "--leave" in sys.argv:  # a child that outlives the benchmark, as a leaked server would
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
if "--linger" in sys.argv:  # a child on its way out, as a replica zygote is
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
emit({{"latency": Figure([float(sys.argv[1])], "ms", goal="<= 5"),
       "hidden": Figure([1.0], "ms", headline=False)}})
"""


@pytest.fixture
def standin(tmp_path, monkeypatch) -> Path:
    script = tmp_path / "standin.py"
    script.write_text(textwrap.dedent(STANDIN.format(bench=str(BENCH))))
    monkeypatch.setattr(run_all, "HERE", tmp_path)
    return script


def test_a_run_gives_its_figures_and_what_it_leaves_is_killed(standin, tmp_path) -> None:
    figures, problem = run_all.run_once(run_all.Bench("s", ["standin.py", "4", "--leave"]),
                                        tmp_path / "s.log")
    assert figures["latency"].samples == [4.0] and figures["latency"].goal == "<= 5"
    assert problem == "left 1 processes (killed)"
    assert not [p for p in psutil.process_iter(["cmdline"])
                if "time.sleep(60)" in " ".join(p.info["cmdline"] or [])]
    figures, problem = run_all.run_once(run_all.Bench("s", ["standin.py", "6", "--linger"]),
                                        tmp_path / "s2.log")
    assert problem == "" and figures["latency"].samples == [6.0]


def test_runs_pool_and_the_table_and_comparison_say_what_they_saw(tmp_path) -> None:
    runs = [{"latency": Figure([v], "ms", goal="<= 5")} for v in (4.0, 6.0, 4.5)]
    pooled = run_all.pooled(runs)
    assert pooled["latency"].samples == [4.0, 6.0, 4.5]
    results = {"machine": {"date": "today", "cores": 2, "cpu": "cpu", "memory_gb": 1,
                           "system": "Linux", "python": "3.11"},
               "benchmarks": {"s": {"figures": {"latency": pooled["latency"].__dict__},
                                    "problems": []},
                              "gone": {"skipped": "no Docker engine"}}}
    table = run_all.table(results)
    assert "| s | latency | 4.50 [4.00-6.00] ms | 3 | <= 5 ms: met |" in table
    assert "| gone | skipped: no Docker engine |" in table
    earlier = {"benchmarks": {"s": {"figures": {"latency": {"samples": [1.0, 2.0]}}}}}
    path = tmp_path / "before.json"
    path.write_text(json.dumps(earlier))
    assert run_all.compare(results, path) == ["s: latency: 4.50 outside [1.00-2.00]"]


def test_the_table_names_every_partial_run_since_the_full_one() -> None:
    """Two partial runs after a full one: the header names both (a second
    partial run used to replace the first's mention)."""
    full = "2026-12-03 22:40 UTC"
    figure = {"samples": [1.0], "unit": "ms"}
    results = {"machine": {"date": full, "cores": 2, "cpu": "x", "memory_gb": 1,
                           "system": "Linux", "python": "3.11"},
               "benchmarks": {name: {"run": run, "figures": {"f": figure}} for name, run in [
                   ("a", full), ("b", "2026-12-04 05:10 UTC"), ("c", "2026-12-04 05:54 UTC"),
                   ("d", "2026-12-04 05:10 UTC")]}}
    header = run_all.table(results).splitlines()[0]
    assert "rerun since: b, d on 2026-12-04 05:10 UTC; c on 2026-12-04 05:54 UTC." in header


def test_the_charts_draw_each_system_by_connections(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from charts import draw_all

    def fig(value: float) -> dict:
        return {"samples": [value], "unit": "ms"}
    models = {f"{system}, {c} connections: {metric}": fig(c * 1.0)
              for system in ("baseline (one process)", "servefleet batched")
              for c in (1, 16, 64) for metric in ("requests/s", "p50", "p99")}
    models["pipeline hop: p50"] = fig(0.5)  # not by connections: not drawn
    written = draw_all({"benchmarks": {"models": {"figures": models}}}, tmp_path)
    assert [p.name for p in written] == ["models.svg"]
    drawn = (tmp_path / "models.svg").read_text()
    assert "servefleet batched" in drawn and "baseline (one process)" in drawn
    assert "pipeline hop" not in drawn
