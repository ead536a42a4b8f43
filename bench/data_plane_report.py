"""bench/data_plane.py's table and figures: every row's requests/s, p50,
p99 and share of the raw app (median [min-max] over its rounds), and the
same as figures for bench/run_all.py (bench/figures.py)."""

from __future__ import annotations

import argparse
import json
import statistics

from figures import Figure, emit
from haproxy_changes import HAPROXY, ROLLED, SCALED
from tls_hop import HOP_PASS, TLS_HOP

# results[handler][kind][connections] = one wrk result per round
Results = dict[str, dict[str, dict[int, list[dict[str, float]]]]]


def spread(values: list[float], digits: int = 0) -> str:
    """median [min-max]"""
    return (f"{statistics.median(values):,.{digits}f} "
            f"[{min(values):,.{digits}f}-{max(values):,.{digits}f}]")


def report(results: Results, metrics_results: dict[str, dict[str, float]],
           opened: dict[str, dict[str, float]], args: argparse.Namespace) -> None:
    """The table; then the figures (`opened`: haproxy_changes.opened_per_1000 by
    handler and row)."""
    print(f"servefleet data plane: wrk, 1 thread, {args.duration} s per run, raw and proxy "
          f"alternately, {args.rounds} rounds; median [min-max]. Goals at 16 connections: "
          "async >= 0.45 of raw, sync >= 0.35; p50 at 1 connection <= 0.4 ms")
    for h, kinds in results.items():
        print(f"  {h} no-op (share: of the raw app with an async def handler):")
        print(f"    {'':<22}{'connections':>11}{'rps':>24}{'p50 ms':>22}{'p99 ms':>22}"
              f"{'share of raw':>22}")
        for kind, by_count in kinds.items():
            for c, runs in by_count.items():
                raw_runs = kinds["raw"][c]
                share = "" if kind == "raw" else spread(
                    [r["rps"] / w["rps"] for r, w in zip(runs, raw_runs, strict=True)], 2)
                if kind.startswith("traced"):
                    share += " (" + spread([r["rps"] / o["rps"] for r, o in zip(
                        runs, by_kind_off(kinds, c), strict=True)], 2) + " of off)"
                errors = sum(r["non2xx"] for r in runs)
                print(f"    {kind:<22}{c:>11}{spread([r['rps'] for r in runs]):>24}"
                      f"{spread([r['p50'] for r in runs], 2):>22}"
                      f"{spread([r['p99'] for r in runs], 2):>22}{share:>22}"
                      + (f"  {errors:.0f} non-2xx" if errors else ""))
    for h, kinds in results.items():
        cpu = {kind: [r["cpu_us"] for r in by_count.get(16, []) if "cpu_us" in r]
               for kind, by_count in kinds.items()}
        if any(cpu.get(k) for k in kinds if k.startswith("traced")):
            print(f"  CPU per request at 16 connections, proxy + replica ({h}): " + "; ".join(
                f"{kind} {spread(v, 1)} us" for kind, v in cpu.items() if v))
    if metrics_results:
        on, off, scraped_r = (metrics_results[k] for k in ("on", "off", "scraped"))
        print("  Metrics at 16 connections (same replica, same run):")
        print(f"    --no-metrics {off['rps']:.0f} rps; metrics on {on['rps']:.0f} rps "
              f"({on['rps'] / off['rps']:.2f} of off); on and scraped every 100 ms "
              f"{scraped_r['rps']:.0f} rps ({scraped_r['rps'] / on['rps']:.2f} of on, "
              f"{scraped_r['scrapes']:.0f} scrapes, {scraped_r['scrape_ms']:.1f} ms each)")
    for h, by_kind in opened.items():
        print(f"  HAProxy engine ({h}), connections it opened to replicas per 1,000 requests "
              "(its counters, every round): " + "; ".join(
                  f"{kind} {value:.2f}" for kind, value in by_kind.items()))
    print(json.dumps(results))
    emit({**figures_of(results), **connection_figures(opened)})


def by_kind_off(kinds: dict[str, dict[int, list[dict[str, float]]]], c: int
                ) -> list[dict[str, float]]:
    """The rounds of the proxy with tracing off at `c` connections."""
    return kinds["proxy"][c]


def connection_figures(opened: dict[str, dict[str, float]]) -> dict[str, Figure]:
    """Connections the HAProxy engine opened per 1,000 requests, per row: one
    sample per run (HAProxy's counters over all its rounds)."""
    return {f"{h} no-op, {kind}: connections opened per 1,000 requests": Figure(
        [value], "per 1,000 requests", headline=(h, kind) == ("async", ROLLED))
        for h, by_kind in opened.items() for kind, value in by_kind.items()}


def figures_of(results: Results) -> dict[str, Figure]:
    """Every series as figures (bench/figures.py); the headline ones are the
    issue's goals and what they are measured against."""
    figures = {}
    for h, kinds in results.items():
        for kind, by_count in kinds.items():
            for c, runs in by_count.items():
                name = f"{h} no-op, {kind}, {c} connections"
                workers = kind.endswith(" workers")  # --workers N, beside one worker
                top = c == 16 and (h == "async" or kind == "proxy" or workers)
                figures[f"{name}: requests/s"] = Figure([r["rps"] for r in runs], "rps",
                                                        lower_is_better=False, headline=top)
                figures[f"{name}: p50"] = Figure(
                    [r["p50"] for r in runs], "ms", headline=c == 1 and kind == "proxy",
                    goal="<= 0.4" if (h, kind, c) == ("async", "proxy", 1) else "")
                figures[f"{name}: p99"] = Figure([r["p99"] for r in runs], "ms",
                                                 headline=False)
                if all("cpu_us" in r for r in runs):  # the rows --tracing measures
                    figures[f"{name}: CPU per request, proxy + replica"] = Figure(
                        [r["cpu_us"] for r in runs], "us", headline=c == 16)
                if kind.startswith("traced"):  # beside the proxy with tracing off
                    figures[f"{name}: of tracing off"] = Figure(
                        [r["rps"] / o["rps"] for r, o in zip(runs, by_kind_off(kinds, c),
                                                             strict=True)],
                        "x off", lower_is_better=False, headline=c == 16,
                        goal=">= 0.95" if kind == "traced 1%" else "")
                if kind in (TLS_HOP, HOP_PASS):  # beside the plain hop ("proxy"), same run
                    figures[f"{name}: of the plain hop"] = Figure(
                        [r["rps"] / p["rps"] for r, p in zip(runs, kinds["proxy"][c], strict=True)],
                        "x plain", lower_is_better=False, headline=c == 16)
                if kind == HAPROXY:  # goals for async: its replica is as fast as the raw app
                    figures[f"{name}: p50 above raw"] = Figure(
                        [r["p50"] - w["p50"] for r, w in zip(runs, kinds["raw"][c], strict=True)],
                        "ms", headline=c == 1, goal="<= 0.1" if (h, c) == ("async", 1) else "")
                if kind != "raw":
                    figures[f"{name}: share of raw"] = Figure(
                        [r["rps"] / w["rps"] for r, w in zip(runs, kinds["raw"][c], strict=True)],
                        "x raw", lower_is_better=False,
                        headline=c == 16 and (kind in ("proxy", HAPROXY, ROLLED, SCALED)
                                              or workers),
                        # The engine's goal holds after a rollout too (issue 51, 13);
                        # scaled up, two replicas share the machine's 2 cores.
                        goal=(">= 0.45" if h == "async" else ">= 0.35")
                        if (kind, c) == ("proxy", 16) else ">= 0.85"
                        if h == "async" and kind in (HAPROXY, ROLLED) and c == 16 else "")
    return figures
