"""Every benchmark in a fixed order, each alone on the machine, each figure
at least three times: one results file, one Markdown table, charts.

    bench/run-all [--only NAMES] [--skip NAMES] [--ray-python PATH]
                  [--against bench/results/results.json] [--docs]

Each benchmark (BENCHES, in order) runs as its own process, in a session of
its own and marked in its environment, `runs` times; each run prints its
figures (bench/figures.py), and their samples are pooled: a benchmark that
alternates rounds inside one run (data_plane.py) gives three samples in one
run. Whatever a run leaves behind (a process carrying the mark, whoever its
parent is now) is killed and reported. A benchmark whose tool is missing
(wrk, a Docker engine) is skipped and says so.

Writes bench/results/results.json (every sample, the machine, the date),
bench/results/figures.md (median and min-max per figure, its goal, whether
it is met) and the charts (bench/results/*.svg, charts.py). `--against` an
earlier results.json says which medians fall outside its spread. `--docs`
(or its old name `--readme`) puts figures.md into docs/figures.md, and the
figures that have a goal into README.md, each between its figures markers.
A run with
`--only` or `--skip` replaces its benchmarks in the last results. With
`--ray-python PATH` (a Python with Ray Serve installed, in a venv of its
own: never a dependency of servefleet) the same no-op runs on Ray Serve too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from charts import draw_all  # noqa: E402
from figures import Figure, goal_met, parse  # noqa: E402

RESULTS = HERE / "results"
MARK_ENV = "SERVEFLEET_BENCH_RUN"
GRACE_S = 3.0  # for what a finished benchmark started to exit on its own
BEGIN, END = "<!-- figures:begin (bench/run-all --docs) -->", "<!-- figures:end -->"


@dataclass
class Bench:
    name: str
    args: list[str]
    runs: int = 3
    needs: str = ""  # "wrk", "docker", "k8s"
    timeout_s: float = 600.0
    python: str = ""  # another interpreter (Ray Serve's)


BENCHES = [
    Bench("control_plane", ["control_plane.py", "--deploys", "200", "--create", "300",
                            "--kills", "3"]),
    Bench("replicas", ["replicas.py", "--runs", "1", "--counts", "1,2,5,10,20",
                       "--ticks", "100"]),
    Bench("watch_fanout", ["watch_fanout.py", "--streams", "10,100,1000,5000"]),
    # The control plane over simulated clusters (issue 57, docs/scale.md): once,
    # each point a cluster of its own; the 10,000-replica point needs a quiet machine.
    Bench("scale", ["scale.py", "--points", "100:10:10,1000:100:100,1000:100:1000,"
                    "10000:1000:1000"], runs=1, timeout_s=1800.0),
    # Five rounds inside one run (this machine varies by a third between rounds):
    # raw and proxy alternate, each round's share.
    # ... and a proxy with --workers 2 beside the one-worker proxy, in the same rounds,
    # and one with the HAProxy engine at every count (issue 40), and a cluster
    # whose proxy -> replica hop is TLS at 16 connections (issue 41).
    Bench("data_plane", ["data_plane.py", "--rounds", "5", "--duration", "3", "--workers", "2",
                         "--haproxy", "--tls-hop", "--hop-pass"], runs=1, needs="wrk"),
    # Tracing off, on at 100% and at 1% sampling, alternating in the same rounds
    # (issue 37); five rounds: the 1% row's goal is within 5% of off.
    Bench("tracing", ["data_plane.py", "--handler", "async", "--connections", "16",
                      "--tracing", "--rounds", "5", "--duration", "4"], runs=1, needs="wrk"),
    Bench("websocket", ["ws_roundtrip.py", "--rounds", "3", "--messages", "1000"], runs=1),
    Bench("grpc_plane", ["grpc_plane.py", "--duration", "3"]),
    Bench("autoscaling", ["autoscaling.py"], runs=1),
    Bench("gray_failure", ["gray_failure.py", "--variants", "passive"]),
    # The same without passive health (issue 21's "before"): once, as its
    # replacement waits for the periodic health checks (~100 s).
    Bench("gray_failure_before", ["gray_failure.py", "--variants", "before"], runs=1),
    Bench("batching", ["batching.py", "--duration", "5"], needs="wrk"),
    Bench("multiplexing", ["multiplexing.py", "--runs", "5"], runs=1),  # 5 samples per run
    Bench("security", ["security.py", "--calls", "200"]),
    Bench("metrics", ["metrics.py"], runs=1),
    Bench("proxy_memory", ["proxy_memory.py", "--requests", "200000"], runs=1),
    Bench("containers", ["containers.py", "--runs", "3"], runs=1, needs="docker"),
    # One handle call with a 1 MB numpy array beside one with a ~1 KB value
    # (and on Ray Serve too, with --ray-python).
    Bench("handle_values", ["handle_values.py", "--calls", "300"]),
    # A real model (examples/digits, ONNX Runtime): baseline, servefleet with and
    # without @batch, the pipeline's hop (and Ray Serve, with --ray-python).
    Bench("models", ["models.py", "--duration", "5"], runs=1, needs="wrk"),
    # Token streams (servefleet.llm, NGramEngine): the engine in-process, a
    # plain starlette server and servefleet's OpenAI API through the proxy.
    Bench("llm", ["llm.py", "--duration", "3"]),
    # The share of a conversation's turns that find their prefix cached on the
    # replica that serves them, by power of two choices and by prefix affinity.
    Bench("llm_affinity", ["llm_affinity.py"], runs=1),
    # A transformer on CPU (issue 56): all-MiniLM-L6-v2's /v1/embeddings by hand
    # (the ceiling), servefleet with and without token-budget batching, and Ray
    # Serve and BentoML when their venvs exist (bench/embeddings_peers.py --setup).
    Bench("embeddings", ["embeddings.py", "--duration", "5"], runs=1, needs="wrk",
          timeout_s=1500.0),
    # servefleet on scripts/k8s's Kubernetes (issue 55): a ServeApplication's first
    # 200, a node's replicas replaced after kill-node, the Pod watch's cost at 1,000.
    Bench("k8s", ["k8s.py", "--pods", "1000"], runs=1, needs="k8s", timeout_s=900.0),
]


def machine() -> dict[str, object]:
    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return {"cores": os.cpu_count(), "cpu": model,
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "system": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M %Z")}


def missing(bench: Bench) -> str:
    if bench.needs == "wrk" and not shutil.which("wrk"):
        return "wrk not found (apt-get install wrk)"
    if bench.needs == "docker":
        try:
            import docker

            docker.from_env().ping()
        except Exception:
            return "no Docker engine (scripts/docker-engine start)"
    if bench.needs == "k8s" and subprocess.run([str(ROOT / "scripts" / "k8s"), "status"],
                                               capture_output=True).returncode:
        return "no scripts/k8s cluster (scripts/k8s start --image servefleet:latest)"
    return ""


def leftovers(mark: str, grace_s: float = 0.0) -> list[psutil.Process]:
    """Processes whose environment carries this run's mark, once those on their
    way out have had `grace_s` to go: a replica zygote notices its controller
    is gone within 0.2 s, multiprocessing's resource tracker when its parent's
    pipe closes."""
    deadline = time.monotonic() + grace_s
    while True:
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.environ().get(MARK_ENV) == mark:
                    found.append(proc)
            except (psutil.Error, OSError):
                continue
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.1)


def run_once(bench: Bench, log: Path) -> tuple[dict[str, Figure], str]:
    """(figures, problem): one run of a benchmark, and what went wrong if anything."""
    mark = uuid.uuid4().hex
    env = {**os.environ, MARK_ENV: mark, "PYTHONUNBUFFERED": "1"}
    command = [bench.python or sys.executable, str(HERE / bench.args[0]), *bench.args[1:]]
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(bench.timeout_s)
            problem = f"exited {code}" if code else ""
        except subprocess.TimeoutExpired:
            problem = f"timed out after {bench.timeout_s:.0f} s"
        finally:
            with_group = [proc] if proc.poll() is None else []
            stray = with_group + leftovers(mark, grace_s=0 if with_group else GRACE_S)
            for p in stray:
                with_signal(p, signal.SIGTERM)
            psutil.wait_procs([psutil.Process(p.pid) for p in stray
                               if psutil.pid_exists(p.pid)], timeout=5)
            for p in leftovers(mark):
                with_signal(p, signal.SIGKILL)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    left = [p for p in stray if p is not proc]
    if left:
        problem = (problem + "; " if problem else "") + f"left {len(left)} processes (killed)"
    figures = parse(log.read_text())
    print(f"  {bench.name}: {time.monotonic() - started:.0f} s, {len(figures)} figures"
          + (f" ({problem})" if problem else ""), flush=True)
    return figures, problem


def with_signal(proc: psutil.Process | subprocess.Popen[bytes], sig: int) -> None:
    try:
        proc.send_signal(sig)
    except (psutil.Error, ProcessLookupError):
        pass


def pooled(runs: list[dict[str, Figure]]) -> dict[str, Figure]:
    out: dict[str, Figure] = {}
    for figures in runs:
        for name, fig in figures.items():
            if name in out:
                out[name].samples.extend(fig.samples)
            else:
                out[name] = Figure(**{**asdict(fig), "samples": list(fig.samples)})
    return out


def fmt(value: float) -> str:
    magnitude = abs(value)
    digits = 0 if magnitude >= 100 else 1 if magnitude >= 10 else 2 if magnitude >= 0.1 else 3
    return f"{value:,.{digits}f}"


def reruns(results: dict[str, Any]) -> str:
    """Benchmarks measured by later, partial runs, by when those began:
    "a, b on D1; c on D2"."""
    full = results["machine"]["date"]
    later: dict[str, list[str]] = {}
    for name, entry in results["benchmarks"].items():
        if entry.get("run", full) != full:
            later.setdefault(entry["run"], []).append(name)
    return "; ".join(f"{', '.join(names)} on {date}" for date, names in sorted(later.items()))


def table(results: dict[str, Any], goals_only: bool = False) -> str:
    """The figures table: every headline figure, or only those with a goal
    (`goals_only`, the README's)."""
    m = results["machine"]
    assert isinstance(m, dict)
    since = reruns(results)
    lines = [f"Measured by `bench/run-all` on {m['date']}: {m['cores']} cores ({m['cpu']}), "
             f"{m['memory_gb']} GB, {m['system']}, Python {m['python']}"
             + (f"; rerun since: {since}" if since else "")
             + ". Median [min-max] over every sample (runs x rounds).", "",
             "| Benchmark | Figure | Median [min-max] | Samples | Goal |",
             "| --- | --- | --- | --- | --- |"]
    benches = results["benchmarks"]
    assert isinstance(benches, dict)
    for name, entry in benches.items():
        if entry.get("skipped"):
            lines.append(f"| {name} | skipped: {entry['skipped']} | | | |")
            continue
        for label, fields in entry["figures"].items():
            fig = Figure(**fields)
            if not fig.headline or not fig.samples:
                continue
            median = statistics.median(fig.samples)
            met = goal_met(fig.goal, median)
            if goals_only and met is None:
                continue
            goal = "" if met is None else f"{fig.goal} {fig.unit}: {'met' if met else 'not met'}"
            lines.append(f"| {name} | {label} | {fmt(median)} [{fmt(min(fig.samples))}-"
                         f"{fmt(max(fig.samples))}] {fig.unit} | {len(fig.samples)} | {goal} |")
        if entry.get("problems"):
            lines.append(f"| {name} | problems: {'; '.join(entry['problems'])} | | | |")
    return "\n".join(lines) + "\n"


def compare(results: dict[str, Any], earlier_path: Path) -> list[str]:
    """Headline figures whose median falls outside the earlier run's spread
    (the table's figures; the rest are in results.json for a closer look)."""
    earlier = json.loads(earlier_path.read_text())["benchmarks"]
    outside = []
    benches = results["benchmarks"]
    assert isinstance(benches, dict)
    for name, entry in benches.items():
        for label, fields in entry.get("figures", {}).items():
            before = earlier.get(name, {}).get("figures", {}).get(label)
            if (not fields.get("headline", True) or not before or not before["samples"]
                    or not fields["samples"]):
                continue
            median = statistics.median(fields["samples"])
            if not min(before["samples"]) <= median <= max(before["samples"]):
                outside.append(f"{name}: {label}: {fmt(median)} outside "
                               f"[{fmt(min(before['samples']))}-{fmt(max(before['samples']))}]")
    return outside


def into_page(page: Path, markdown: str) -> None:
    """Replace what `page` holds between the figures markers."""
    text = page.read_text()
    if BEGIN not in text or END not in text:
        sys.exit(f"{page.relative_to(ROOT)} has no {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    page.write_text(f"{head}{BEGIN}\n{markdown}{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated benchmark names")
    parser.add_argument("--skip", default="", help="comma-separated benchmark names")
    parser.add_argument("--ray-python", default="", metavar="PATH",
                        help="a Python with Ray Serve installed: run the same no-op on it")
    parser.add_argument("--against", default="", metavar="RESULTS_JSON",
                        help="say which medians fall outside this earlier run's spread")
    parser.add_argument("--docs", "--readme", action="store_true", dest="docs",
                        help="put the table into docs/figures.md, and the figures with a "
                             "goal into README.md, between their figures markers")
    args = parser.parse_args()
    only = {n for n in args.only.split(",") if n}
    skip = {n for n in args.skip.split(",") if n}
    benches = [b for b in BENCHES if (not only or b.name in only) and b.name not in skip]
    if args.ray_python:
        for bench in benches:
            if bench.name in ("handle_values", "models"):
                bench.args = [*bench.args, "--ray-python", args.ray_python]
        benches.append(Bench("ray_serve", ["ray_noop.py", "--duration", "3"], runs=1,
                             needs="wrk", python=args.ray_python))
    (RESULTS / "logs").mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"machine": machine(), "benchmarks": {}}
    results["started"] = results["machine"]["date"]  # this run's, full or partial
    entries: dict[str, dict[str, Any]] = {}
    if (only or skip) and (RESULTS / "results.json").exists():
        # A partial run replaces its benchmarks in the last full results.
        earlier = json.loads((RESULTS / "results.json").read_text())
        entries.update(earlier["benchmarks"])
        # The machine and date of the full run; reruns() lists what came after.
        results["machine"] = {k: v for k, v in earlier["machine"].items() if k != "rerun"}
    results["benchmarks"] = entries
    began = time.monotonic()
    print(f"bench/run-all: {len(benches)} benchmarks", flush=True)
    for bench in benches:
        why = missing(bench)
        if why:
            print(f"  {bench.name}: skipped, {why}", flush=True)
            entries[bench.name] = {"skipped": why}
            continue
        runs, problems = [], []
        for i in range(bench.runs):
            figures, problem = run_once(bench, RESULTS / "logs" / f"{bench.name}-{i + 1}.log")
            runs.append(figures)
            if problem:
                problems.append(f"run {i + 1} {problem}")
        entries[bench.name] = {"args": bench.args, "runs": bench.runs, "problems": problems,
                               "date": time.strftime("%Y-%m-%d %H:%M %Z"),
                               "run": results["started"],
                               "figures": {k: asdict(v) for k, v in pooled(runs).items()}}
    results["seconds"] = round(time.monotonic() - began)
    (RESULTS / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    markdown = table(results)
    (RESULTS / "figures.md").write_text(markdown)
    for chart in draw_all(results, RESULTS):
        print(f"  wrote {chart.relative_to(ROOT)}")
    print(f"bench/run-all took {results['seconds']} s; wrote bench/results/results.json "
          "and figures.md")
    if args.against:
        outside = compare(results, Path(args.against))
        print(f"{len(outside)} medians outside the earlier run's spread"
              + "".join(f"\n  {line}" for line in outside))
    if args.docs:
        into_page(ROOT / "docs" / "figures.md", markdown)
        into_page(ROOT / "README.md", table(results, goals_only=True))
        print("docs/figures.md: figures table replaced; README.md: the figures with a goal")


if __name__ == "__main__":
    main()
