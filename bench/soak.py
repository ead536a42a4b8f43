"""The soak: the chaos suite's cluster and mixed traffic for 30 minutes (or
--minutes), with a deploy every 20-40 s (in-place changes and rollouts
that keep the number of replicas; nemesis/operations.py) and no faults, every process's
memory, file descriptors, threads and event-loop tasks sampled every 10 s.

    bench/soak.py                 30 minutes, 5 of them warm-up
    bench/soak.py --minutes 180   longer

Prints, per process alive from the end of the warm-up to the end, how much
each grew (the mean of its first three samples after warm-up against its
last three); goal (issue 38): no more than 10%. Saves the samples
(bench/results/soak.json), a chart of resident memory
(bench/results/soak-rss.svg) and the table (bench/results/soak.md).
Exit status 1 when a process grew past the goal.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nemesis.cluster import ChaosCluster
from nemesis.operations import Operations
from nemesis.sampler import Growth, Sampler, growth
from nemesis.traffic import Traffic

RESULTS = Path(__file__).resolve().parent / "results"
GOAL_PERCENT = 10.0
FIELDS = (("rss_bytes", "RSS"), ("fds", "fds"), ("threads", "threads"), ("tasks", "tasks"))


def _cell(g: Growth, field: str) -> str:
    before, after = getattr(g.first, field), getattr(g.last, field)
    if before is None:
        return "-"
    percent = g.percent(field)
    if field == "rss_bytes":
        before, after = f"{before / 2**20:.1f}", f"{after / 2**20:.1f} MiB"
    elif field == "tasks":
        before, after = f"{before:.0f}", f"{after:.0f}"
    return f"{before} -> {after} ({percent:+.1f}%)" if percent is not None else \
        f"{before} -> {after}"


def table(found: list[Growth]) -> tuple[str, list[str]]:
    rows = ["| process | " + " | ".join(label for _, label in FIELDS) + " |",
            "|---|" + "---|" * len(FIELDS)]
    over = []
    for g in found:
        rows.append(f"| {g.process} | " + " | ".join(_cell(g, f) for f, _ in FIELDS) + " |")
        for field, label in FIELDS:
            percent = g.percent(field)
            if percent is not None and percent > GOAL_PERCENT:
                over.append(f"{g.process}: {label} grew {percent:.1f}%")
    return "\n".join(rows), over


def chart(sampler: Sampler, warm_until: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5))
    start = min(s.time for series in sampler.series.values() for s in series)
    for name, series in sorted(sampler.series.items()):
        ax.plot([(s.time - start) / 60 for s in series], [s.rss_bytes / 2**20 for s in series],
                label=name, linewidth=1)
    ax.axvline((warm_until - start) / 60, color="grey", linestyle=":", label="end of warm-up")
    ax.set_xlabel("minutes")
    ax.set_ylabel("resident memory (MiB)")
    ax.set_title("servefleet soak: every process's RSS under steady traffic and deploys")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--warm-up", type=float, default=5.0, help="minutes not counted")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="servefleet-soak-"))
    cluster = ChaosCluster(work).start()
    sampler = Sampler(cluster.processes, args.every)
    try:
        client = cluster.client(timeout=30)
        ops = Operations(client, seed=1, every_s=(20.0, 40.0), served_changes=("reconfigure",),
                         steady=True)
        ops.setup()
        traffic = Traffic(cluster.proxy_urls(), cluster.grpc_targets()).start()
        started = time.time()
        warm_until = started + args.warm_up * 60
        sampler.start()
        ops.start()
        print(f"soak: {args.minutes:g} min in {work}, warm-up until "
              f"{time.strftime('%H:%M:%S', time.localtime(warm_until))}", flush=True)
        while time.time() < started + args.minutes * 60:
            time.sleep(30)
            done = traffic.requests
            print(f"  {(time.time() - started) / 60:5.1f} min: {len(done)} requests, "
                  f"{sum(not r.ok for r in done)} failed, {len(ops.ops)} deploys", flush=True)
        ops.stop()
        requests = traffic.stop()
        sampler.stop()
        client.close()
    finally:
        cluster.stop()
    found = growth(sampler.series, warm_until)
    text, over = table(found)
    failed = sum(not r.ok for r in requests)
    summary = (f"{args.minutes:g} min ({args.warm_up:g} warm-up), {len(requests)} requests "
               f"({failed} failed), {len(ops.ops)} deploys; growth after warm-up:\n\n{text}\n")
    print(summary)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "soak.md").write_text(summary)
    (RESULTS / "soak.json").write_text(json.dumps(
        {name: [dataclasses.asdict(s) for s in series]
         for name, series in sampler.series.items()}))
    chart(sampler, warm_until, RESULTS / "soak-rss.svg")
    for line in over:
        print(f"OVER THE GOAL ({GOAL_PERCENT:g}%): {line}")
    sys.exit(1 if over or failed else 0)


if __name__ == "__main__":
    main()
