"""Data-plane throughput and latency, with wrk, beside the raw app ceiling.

    .venv/bin/python bench/data_plane.py [--duration 5] [--rounds 3]
        [--handler async|sync|both] [--workers N] [--tls] [--tls-hop] [--hop-pass] [--metrics]
                                                         (needs Debian's wrk)

Runs, all on 127.0.0.1 in one go: a bare uvicorn + starlette hello app (the
ceiling of this machine), and `servefleet proxy` in front of one no-op
replica (controller on sqlite, process runtime), for `async def` and plain
`def` no-ops. The share is always of the raw app with an `async def`
handler (the machine's ceiling); beside the plain-def rows, the raw app
with a plain def handler (which Starlette runs in its thread pool) is shown
too. For 1, 16 and 64 connections, raw and proxy run alternately `--rounds`
times, and it prints the median and the min-max spread of requests/s, p50
and p99, and of the proxy's share of the raw app (each round's proxy over
the same round's raw). Goals (issue 20), at 16 connections: async >= 0.45 of raw,
sync >= 0.35; p50 at 1 connection <= 0.4 ms.

The 1-connection rounds (counts not in --side-connections) run first, with
only raw, the proxy and (--haproxy) the engine up: the clusters and proxies
of the other rows start after them, so their idle work does not land in the
p50 at 1 connection.

With --workers N a second proxy runs with `--workers N` in front of the
same replica, measured in the same rounds.

What is measured beside raw and proxy (--workers, --tls, the raw app with
a plain def) runs at `--side-connections` only (default 16, where the
goals are), which keeps bench/run-all within its time.

With --tls a proxy serves HTTPS (--tls-cert/--tls-key, a certificate from
`servefleet certs init`) in front of the same replica, measured in the same
rounds: TLS on vs off, side by side (issue 13).

With --tracing, beside them: a proxy and replicas exporting OpenTelemetry
spans to an OTLP receiver in this process, at 100% sampling and at 1%
(parentbased_traceidratio; the proxy is the root), each through its own
proxy and replica (tracing is per process: the replicas' through their
runtime env). Goal (issue 37): at 1% within 5% of tracing off.

With --haproxy, at every count: a proxy with `--engine haproxy` in front of
the same replica. Goals (issue 40), async: at 16 connections >= 0.85 of
raw, p50 at 1 connection at most 0.1 ms above raw's. (A plain-def replica
runs its handler in a thread: it, not the proxy, bounds the sync rows,
which the raw app with a plain def shows beside them.) That engine starts
once every replica runs, so its replicas are servers of its configuration
file; at --side-connections it also serves two deployments changed after it
started (bench/haproxy_changes.py): one rolled out to a new version
("haproxy, rolled out": its replica added over HAProxy's runtime API), one
scaled from 1 to 2 replicas ("haproxy, scaled up"); the rolled-out row has
the engine's goal too (issue 51, 13). For each of the three rows it prints
the connections HAProxy opened to replicas per 1,000 requests.

With --tls-hop, at --side-connections: a second cluster whose replicas serve
TLS (--replica-tls on) and its proxy, beside the plain hop (bench/tls_hop.py);
with --hop-pass, one with tokens, whose replicas check every request's hop
pass.

With --metrics, at 16 connections: a proxy started with --no-metrics beside
the default one, and the default one again while a client scrapes its
/-/metrics every 100 ms (issue 14: the cost of counting and of scraping).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from data_plane_report import report
from haproxy_changes import (
    CHANGED,
    HAPROXY,
    change_replicas,
    connection_counters,
    opened_per_1000,
    wait_running,
)
from tls_hop import HOP_PASS, TLS_HOP, hop_pass_proxy, tls_hop_proxy
from wrk_run import scraped, wrk

from servefleet._private.security.certs import init_certs
from servefleet._private.testing import ControllerProcess, ProxyProcess, free_port, wait_tcp
from servefleet._private.tracing.otlp_sink import OtlpSink
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d

HERE = Path(__file__).resolve().parent
APPS = str(HERE.parent / "tests" / "apps")
MAIN = ("raw", "proxy", HAPROXY)  # measured at every count; the others at --side-connections
# After a tracing row: time for the spans its processes still queue to drain.
SETTLE_S = 3.0


def _with_cpu(pids: list[int], run: Any, *args: Any) -> dict[str, float]:
    """run(*args) (a wrk result), with the CPU time the processes `pids` spent per
    request meanwhile, in microseconds: what tracing costs, steadier than
    requests/s on a shared 2-core machine."""
    if not pids:
        return run(*args)
    procs = [psutil.Process(pid) for pid in pids]
    before = sum(sum(p.cpu_times()[:2]) for p in procs)
    result = run(*args)
    spent = sum(sum(p.cpu_times()[:2]) for p in procs) - before
    return {**result, "cpu_us": spent / max(1.0, result["rps"] * result["seconds"]) * 1e6}


def tracing_env(sink: OtlpSink, ratio: str) -> dict[str, str]:
    """The variables that turn tracing on, exporting to `sink`, sampling `ratio`."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint,
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": ratio}


def noop_name(h: str, prefix: str) -> str:
    """The no-op deployment of handler `h` under route `prefix` + "/" + h."""
    return f"Noop{h}{prefix.replace('/', '')}"


def _prefix(kind: str) -> str:
    """The route prefix of a tracing row's deployments: "traced 1%" -> /traced1."""
    return "/" + kind.replace(" ", "").replace("%", "")


@contextlib.contextmanager
def _environment(env: dict[str, str]):
    """`env` added to os.environ while a child process starts (it inherits it)."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def wait_ok(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(url)


def measure(args: argparse.Namespace, handlers: list[str], raw_ports: dict[str, int],
            targets: dict[str, str], counts: list[int], side_counts: set[int],
            results: dict[str, Any], pids: dict[tuple[str, str], list[int]] | None = None
            ) -> None:
    """`args.rounds` rounds at `counts` of every row there is a target for:
    raw and those in MAIN at every count, the others at `side_counts`. Rows
    alternate within a round; results[handler][kind][connections] gets one wrk
    result per round."""
    for h in handlers:
        raws_here = {"raw": raw_ports["async"]}
        if h == "sync":
            raws_here["raw (plain def)"] = raw_ports["sync"]
        urls = {**{kind: f"http://127.0.0.1:{port}" for kind, port in raws_here.items()},
                **targets}
        by_kind = results.setdefault(h, {})
        for kind in urls:
            for c in counts:
                if kind in MAIN or c in side_counts:
                    by_kind.setdefault(kind, {})[c] = []
        for _ in range(args.rounds):
            for c in counts:
                for kind, url in urls.items():
                    if c in by_kind.get(kind, {}):
                        by_kind[kind][c].append(_with_cpu(
                            (pids or {}).get((h, kind), []), wrk, f"{url}/{h}", c,
                            args.duration))
                        if kind.startswith("traced"):
                            # The spans still queued drain (and the
                            # receiver here decodes them) before the next row.
                            time.sleep(SETTLE_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--handler", choices=["async", "sync", "both"], default="both")
    parser.add_argument("--connections", default="1,16,64")
    parser.add_argument("--side-connections", default="16",
                        help="connection counts for what is measured beside raw and proxy "
                             "(--workers, --tls, the raw app with a plain def, the HAProxy "
                             "engine after a rollout and a scale-up)")
    parser.add_argument("--workers", type=int, default=1,
                        help="also measure a proxy with this many --workers")
    parser.add_argument("--metrics", action="store_true",
                        help="also measure --no-metrics, and scraping every 100 ms")
    parser.add_argument("--tracing", action="store_true",
                        help="also measure tracing on at 100%% and at 1%% sampling")
    parser.add_argument("--haproxy", action="store_true",
                        help="also measure a proxy with --engine haproxy, at every count")
    parser.add_argument("--engine-threads", type=int, default=0, metavar="N",
                        help="HAProxy's threads for --haproxy (default 0: one per CPU)")
    parser.add_argument("--tls-hop", action="store_true",
                        help="also measure a cluster whose proxy -> replica hop is TLS")
    parser.add_argument("--hop-pass", action="store_true",
                        help="also measure a cluster with tokens, whose replicas check each "
                             "request's hop pass")
    parser.add_argument("--tls", action="store_true",
                        help="also measure a proxy serving HTTPS in front of the same replica")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk not found: apt-get install wrk")
    handlers = ["async", "sync"] if args.handler == "both" else [args.handler]
    counts = [int(c) for c in args.connections.split(",")]
    side_counts = {int(c) for c in args.side_connections.split(",")}
    work = tempfile.mkdtemp(prefix="servefleet-dataplane-")
    raw_ports = {h: free_port() for h in ["async", *(["sync"] if "sync" in handlers else [])]}
    started: list[Any] = []
    raws = {h: subprocess.Popen([sys.executable, str(HERE / "hello_app.py"), str(port),
                                 *(["sync"] if h == "sync" else [])])
            for h, port in raw_ports.items()}
    controller = ControllerProcess(f"sqlite://{work}/state.db", log_dir=work)
    # results[handler][kind][connections] = one wrk result per round
    results: dict[str, dict[str, dict[int, list[dict[str, float]]]]] = {}
    # opened[handler][kind]: connections the HAProxy engine opened per 1,000 requests
    opened: dict[str, dict[str, float]] = {}
    metrics_results: dict[str, dict[str, float]] = {}
    sink = OtlpSink(count_only=True).start() if args.tracing else None
    hop = contextlib.ExitStack()
    try:
        controller.start()
        for h, port in raw_ports.items():
            wait_tcp(port, 30, raws[h], "hello app")
        while not controller.is_leader():
            time.sleep(0.05)
        # 1% right after tracing off, 100% last: a row measured after the 100%
        # row shares the machine with its processes' span exports still draining.
        traced = {f"traced {share}": tracing_env(sink, ratio)
                  for share, ratio in (("1%", "0.01"), ("100%", "1"))} if sink else {}
        # Deployments the HAProxy engine serves after a rollout or a scale-up.
        changed: dict[str, dict[str, str]] = \
            {prefix: {} for prefix in CHANGED.values()} if args.haproxy else {}
        specs = {noop_name(h, prefix): d.DeploymentSpec(
            name=noop_name(h, prefix), route_prefix=f"{prefix}/{h}",
            import_path="echo_app:async_noop" if h == "async" else "echo_app:noop",
            runtime=d.RuntimeOptions(working_dir=APPS, env=env),
            replica_config=d.ReplicaConfig(num_replicas=1, max_ongoing_requests=100))
            for h in handlers for prefix, env in {
                "": {}, **{_prefix(k): v for k, v in traced.items()}, **changed}.items()}
        with ControllerClient(controller.address) as client:
            for spec in specs.values():
                client.deploy(spec)

        def proxy(*extra: str, env: dict[str, str] | None = None) -> ProxyProcess:
            with _environment(env or {}):
                started.append(ProxyProcess([controller.address], log_dir=work,
                                            extra_args=list(extra)).start())
            return started[-1]
        targets = {"proxy": proxy().url}
        processes = {"proxy": started[-1]}  # the proxy process of each row that has its own
        engine = None
        if args.haproxy:
            with ControllerClient(controller.address) as client:
                wait_running(client)  # the engine starts with their servers in its file
            engine = proxy("--engine", "haproxy", "--engine-threads", str(args.engine_threads))
            targets[HAPROXY] = engine.url
        for h in handlers:
            for url in targets.values():
                wait_ok(f"{url}/{h}")
        # First the counts only raw, proxy and the engine are measured at (1
        # connection): before the other rows' proxies and clusters start. Idle
        # beside it, they added 0.1-0.15 ms to the proxy's p50 at 1 connection
        # on this 2-core machine (2026-12-07), which says nothing of the proxy.
        alone = [c for c in counts if c not in side_counts]
        measure(args, handlers, raw_ports, targets, alone, side_counts, results)
        if args.haproxy:
            targets.update({kind: engine.url + prefix for kind, prefix in CHANGED.items()})
        for kind, env in traced.items():
            processes[kind] = proxy(env=env)
            targets[kind] = processes[kind].url + _prefix(kind)
        if args.workers > 1:
            targets[f"{args.workers} workers"] = proxy("--workers", str(args.workers)).url
        if args.tls:
            init_certs(f"{work}/certs")
            https = proxy("--tls-cert", f"{work}/certs/proxy.crt",
                          "--tls-key", f"{work}/certs/proxy.key")
            targets["https"] = f"https://127.0.0.1:{https.port}"
        if args.tls_hop:
            targets[TLS_HOP] = hop.enter_context(tls_hop_proxy(work, handlers, APPS)).url
        if args.hop_pass:
            targets[HOP_PASS] = hop.enter_context(hop_pass_proxy(work, handlers, APPS)).url
        for h in handlers:
            for url in targets.values():
                wait_ok(f"{url}/{h}")
        if engine is not None:  # its servers from now on: added at run time
            with ControllerClient(controller.address) as client:
                change_replicas(client, engine.url, {
                    noop_name(h, prefix): specs[noop_name(h, prefix)]
                    for h in handlers for prefix in CHANGED.values()})
            counted = connection_counters(engine.url)
        # The processes a tracing row's requests cross, for its CPU per request.
        pids = {}
        if traced:
            with ControllerClient(controller.address) as client:
                for h in handlers:
                    for kind, prefix in (("proxy", ""), *((k, _prefix(k)) for k in traced)):
                        (replica,) = client.replicas(deployment=noop_name(h, prefix))
                        pids[(h, kind)] = [processes[kind].proc.pid,
                                           int(replica.record.handle.split(":")[0])]
        measure(args, handlers, raw_ports, targets, [c for c in counts if c in side_counts],
                side_counts, results, pids)
        if engine is not None:
            after = connection_counters(engine.url)
            opened = {h: {kind: opened_per_1000(counted, after, noop_name(h, prefix))
                          for kind, prefix in {HAPROXY: "", **CHANGED}.items()}
                      for h in handlers}
        if args.metrics:
            bare = proxy("--no-metrics")
            h = handlers[0]
            wait_ok(f"{bare.url}/{h}")
            metrics_results = {
                "on": wrk(f"{targets['proxy']}/{h}", 16, args.duration),
                "off": wrk(f"{bare.url}/{h}", 16, args.duration),
                "scraped": scraped(targets["proxy"], args.duration, f"/{h}")}
    finally:
        hop.close()
        for proc in started:
            proc.stop()
        for raw in raws.values():
            raw.terminate()
            raw.wait()
        with contextlib.suppress(Exception), ControllerClient(controller.address,
                                                              timeout=10) as client:
            client.shutdown()
        controller.stop()
        if sink is not None:
            print(f"spans the OTLP receiver got: {sink.received}")
            sink.stop()
    report(results, metrics_results, opened, args)


if __name__ == "__main__":
    main()
