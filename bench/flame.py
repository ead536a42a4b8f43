"""Flame graphs of the proxy and the replica under load (py-spy, SVG).

    .venv/bin/python bench/flame.py LABEL [--handler async|sync] [--seconds 10]
                                      (needs Debian's wrk and py-spy, a dev extra)

Starts what bench/data_plane.py measures (a controller on sqlite, one no-op
replica, `servefleet proxy`), drives the proxy with wrk at 16 connections,
and samples both processes with py-spy meanwhile (idle frames left out), into
bench/flame-proxy-LABEL.svg and bench/flame-replica-LABEL.svg. Each frame's
width is its share of the samples: where a request's time goes.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from data_plane import APPS, wait_ok
from sampled import py_spy, record, serving
from wrk_run import wrk

from servefleet.v1 import deployment_pb2 as d

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("label", help="names the SVGs, e.g. before or after")
    parser.add_argument("--handler", choices=["async", "sync"], default="async")
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    spy = py_spy()
    spec = d.DeploymentSpec(
        name="Noop", route_prefix="/noop",
        import_path="echo_app:async_noop" if args.handler == "async" else "echo_app:noop",
        runtime=d.RuntimeOptions(working_dir=APPS),
        replica_config=d.ReplicaConfig(num_replicas=1, max_ongoing_requests=100))
    work = tempfile.mkdtemp(prefix="servefleet-flame-")
    with serving(spec, work, APPS, wait_ok) as (proxy, replica_pid):
        assert proxy.proc is not None
        wrk(proxy.url + "/noop", 16, 2)  # warm up
        recorders = [record(spy, pid, args.seconds, "flamegraph",
                            HERE / f"flame-{name}-{args.label}.svg")
                     for name, pid in (("proxy", proxy.proc.pid), ("replica", replica_pid))]
        result = wrk(proxy.url + "/noop", 16, args.seconds)
        for recorder in recorders:
            recorder.wait(60)
    print(f"{result['rps']:.0f} rps while sampling; wrote bench/flame-proxy-{args.label}.svg "
          f"and bench/flame-replica-{args.label}.svg")


if __name__ == "__main__":
    main()
