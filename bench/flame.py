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
import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from data_plane import APPS, wait_ok
from wrk_run import wrk

from servefleet._private.testing import ControllerProcess, ProxyProcess
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("label", help="names the SVGs, e.g. before or after")
    parser.add_argument("--handler", choices=["async", "sync"], default="async")
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not shutil.which("wrk") or not Path(spy).exists():
        sys.exit("needs wrk (apt-get install wrk) and py-spy (pip install py-spy)")
    work = tempfile.mkdtemp(prefix="servefleet-flame-")
    controller = ControllerProcess(f"sqlite://{work}/state.db", log_dir=work,
                                   extra_args=["--allow-working-dir", APPS]).start()
    proxy = None
    try:
        while not controller.is_leader():
            time.sleep(0.05)
        with ControllerClient(controller.address) as client:
            client.deploy(d.DeploymentSpec(
                name="Noop", route_prefix="/noop",
                import_path="echo_app:async_noop" if args.handler == "async" else "echo_app:noop",
                runtime=d.RuntimeOptions(working_dir=APPS),
                replica_config=d.ReplicaConfig(num_replicas=1, max_ongoing_requests=100)))
            proxy = ProxyProcess([controller.address], log_dir=work).start()
            wait_ok(proxy.url + "/noop")
            (replica,) = client.replicas()
            replica_pid = int(replica.record.handle.split(":")[0])  # "pid:start time"
        assert proxy.proc is not None
        wrk(proxy.url + "/noop", 16, 2)  # warm up
        recorders = [subprocess.Popen(
            [spy, "record", "--pid", str(pid), "--duration", str(args.seconds), "--rate", "250",
             "--format", "flamegraph", "--output", str(HERE / f"flame-{name}-{args.label}.svg"),
             "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for name, pid in (("proxy", proxy.proc.pid), ("replica", replica_pid))]
        result = wrk(proxy.url + "/noop", 16, args.seconds)
        for recorder in recorders:
            recorder.wait(60)
        print(f"{result['rps']:.0f} rps while sampling; wrote bench/flame-proxy-{args.label}.svg "
              f"and bench/flame-replica-{args.label}.svg")
    finally:
        if proxy is not None:
            proxy.stop()
        with contextlib.suppress(Exception), ControllerClient(controller.address,
                                                              timeout=10) as client:
            client.shutdown()
        controller.stop()


if __name__ == "__main__":
    main()
