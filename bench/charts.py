"""Charts of bench/run_all.py's results (matplotlib, SVG under bench/results/).

Each chart reads figures by their names, as the benchmarks emit them:

- data-plane.svg: requests/s, p50 and p99 by connection count, for the raw
  app, servefleet's proxy and (with --ray-python) Ray Serve: data_plane.py's
  "async no-op, KIND, C connections: requests/s|p50|p99" and ray_noop.py's
  "Ray Serve, C connections: ...";
- watch-fanout.svg: p50 and p99 by stream count (watch_fanout.py's
  "N streams: p50|p99");
- models.svg: the same three panels for the digits model (models.py's
  "SYSTEM, C connections: requests/s|p50|p99");
- deploy-running.svg: deploy -> all RUNNING by replica count (replicas.py's
  "deploy -> RUNNING, N replicas").

Points are medians; bars show the min-max spread.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

Series = dict[str, dict[float, list[float]]]  # label -> x -> samples


def _collect(results: dict[str, Any], bench: str, pattern: str) -> dict[str, Series]:
    """{metric: {label: {x: samples}}} from the figures of `bench` whose
    names match `pattern` (named groups: label, x, metric)."""
    out: dict[str, Series] = defaultdict(lambda: defaultdict(dict))
    entry = results["benchmarks"].get(bench, {})
    for name, fig in entry.get("figures", {}).items():
        found = re.fullmatch(pattern, name)
        if found and fig["samples"]:
            label = found.groupdict().get("label") or bench
            out[found["metric"]][label][float(found["x"])] = fig["samples"]
    return out


def _plot(axis: Any, series: Series, logx: bool = False) -> None:
    for label, points in sorted(series.items()):
        xs = sorted(points)
        medians = [statistics.median(points[x]) for x in xs]
        low = [m - min(points[x]) for x, m in zip(xs, medians, strict=True)]
        high = [max(points[x]) - m for x, m in zip(xs, medians, strict=True)]
        axis.errorbar(xs, medians, yerr=[low, high], marker="o", capsize=3, label=label)
    if logx:
        axis.set_xscale("log")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)


def draw_all(results: dict[str, Any], outdir: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("  charts skipped: matplotlib is not installed (scripts/setup installs it)")
        return []
    written = []
    plane = _collect(results, "data_plane",
                     r"async no-op, (?P<label>[^,]+), (?P<x>\d+) connections: (?P<metric>.+)")
    ray = _collect(results, "ray_serve", r"(?P<label>Ray Serve), (?P<x>\d+) connections: "
                                         r"(?P<metric>.+)")
    for metric, series in ray.items():
        plane[metric].update(series)
    if plane:
        written.append(_by_connections(plt, plane, "no-op handler", outdir / "data-plane.svg"))
    models = _collect(results, "models", r"(?P<label>[^,]+), (?P<x>\d+) "
                                         r"connections: (?P<metric>requests/s|p50|p99)")
    if models:
        written.append(_by_connections(plt, models, "digits model", outdir / "models.svg"))
    fanout = _collect(results, "watch_fanout", r"(?P<x>\d+) streams: (?P<metric>p50|p99)")
    if fanout:
        fig, axis = plt.subplots(figsize=(6, 4))
        _plot(axis, {metric: series["watch_fanout"] for metric, series in fanout.items()},
              logx=True)
        axis.axhline(50, color="grey", linestyle="--", linewidth=1)
        axis.set_title("Watch fan-out: one change to N streams")
        axis.set_xlabel("open Watch streams")
        axis.set_ylabel("ms from Deploy to the stream")
        written.append(_save(fig, outdir / "watch-fanout.svg"))
    running = _collect(results, "replicas",
                       r"deploy -> RUNNING, (?P<x>\d+) replicas?(?P<metric>)")
    if running:
        fig, axis = plt.subplots(figsize=(6, 4))
        _plot(axis, {"process runtime": running[""]["replicas"]})
        axis.set_title("Deploy -> all replicas RUNNING")
        axis.set_xlabel("replicas")
        axis.set_ylabel("seconds")
        written.append(_save(fig, outdir / "deploy-running.svg"))
    return written


def _by_connections(plt: Any, series: dict[str, Series], what: str, path: Path) -> Path:
    """Three panels (requests/s, p50, p99) by connection count, a line per system."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for axis, metric, unit in zip(axes, ("requests/s", "p50", "p99"),
                                  ("requests/s", "ms", "ms"), strict=True):
        _plot(axis, series.get(metric, {}), logx=True)
        axis.set_title(f"{metric} by connections ({what})")
        axis.set_xlabel("connections")
        axis.set_ylabel(unit)
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})  # no timestamp: reruns diff cleanly
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
