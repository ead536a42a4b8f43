"""Control-plane figures, each printed next to its baseline from the same run.

    .venv/bin/python bench/control_plane.py [--deploys 500] [--create 1000] [--kills 10]

1. Deploy RPC latency against a local etcd (goal p50 <= 5 ms, p99 <= 20 ms);
   baseline: one fenced etcd transaction of the same size sent straight from
   this process, i.e. the store's share of the cost.
2. 1,000 deployments created: total time and controller RSS after (goal
   <= 150 MB); baselines: the same number of raw etcd transactions, and the
   controller's RSS before.
3. Failover after SIGKILL of the leader with --lease-ttl 2, p50 over the kills
   (goal <= 3 s); baseline: the lease TTL, the least a lease-based election can
   take without the old leader's help.

Everything runs on 127.0.0.1: a fresh etcd on free ports and controller
processes started here.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import psutil
from figures import Figure, emit

from servefleet._private.external_servers import EtcdServer
from servefleet._private.testing import ControllerProcess
from servefleet.client import ControllerClient
from servefleet.controller.store import Guard, Put
from servefleet.controller.store.etcd import EtcdStore
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import records_pb2


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.2f} ms"


FIGURES: dict[str, Figure] = {}


def row(label: str, *cells: str) -> None:
    print(f"  {label:<42}" + "".join(f"{c:>16}" for c in cells))


def wait_leader(procs: list[ControllerProcess], timeout: float = 30) -> ControllerProcess:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.proc is not None and proc.proc.poll() is None and proc.is_leader():
                return proc
        time.sleep(0.01)
    raise TimeoutError("no leader")


def spec(name: str, user_config: str = "") -> d.DeploymentSpec:
    return d.DeploymentSpec(name=name, import_path="examples.model:Model",
                            replica_config=d.ReplicaConfig(user_config_json=user_config))


async def raw_txn_latencies(endpoint: str, count: int, payload: bytes) -> list[float]:
    """Fenced puts straight to etcd: the floor under a Deploy."""
    store = EtcdStore([endpoint])
    leader = "/bench/raw/leader"
    won = await store.txn([Guard(leader, 0)], [Put(leader, b"me")])
    samples = []
    for i in range(count):
        start = time.perf_counter()
        await store.txn([Guard(leader, won.revision)], [Put(f"/bench/raw/{i}", payload)])
        samples.append(time.perf_counter() - start)
    await store.close()
    return samples


def bench_deploy_latency(etcd: EtcdServer, count: int) -> None:
    proc = ControllerProcess(etcd.url, cluster="latency", runtime="none").start()
    try:
        wait_leader([proc])
        with ControllerClient(proc.address) as client:
            client.deploy(spec("warm"))
            samples = []
            for i in range(count):
                start = time.perf_counter()
                client.deploy(spec("Model", user_config=f'{{"step": {i}}}'))
                samples.append(time.perf_counter() - start)
            record = client.get("Model")
        payload = records_pb2.DeploymentRecord(spec=record.spec).SerializeToString()
        raw = asyncio.run(raw_txn_latencies(etcd.endpoint, count, payload))
    finally:
        proc.stop()
    print(f"\n1. Deploy RPC latency, {count} sequential updates (goal p50 <= 5 ms, p99 <= 20 ms)")
    row("", "p50", "p99", "mean")
    row("Deploy RPC via SDK client -> controller -> etcd",
        ms(percentile(samples, 0.5)), ms(percentile(samples, 0.99)), ms(statistics.mean(samples)))
    row("baseline: fenced etcd txn from this process",
        ms(percentile(raw, 0.5)), ms(percentile(raw, 0.99)), ms(statistics.mean(raw)))
    FIGURES["Deploy RPC: p50"] = Figure([percentile(samples, 0.5) * 1e3], "ms", goal="<= 5")
    FIGURES["Deploy RPC: p99"] = Figure([percentile(samples, 0.99) * 1e3], "ms", goal="<= 20")
    FIGURES["baseline: a fenced etcd txn: p50"] = Figure([percentile(raw, 0.5) * 1e3], "ms")


def bench_create_many(etcd: EtcdServer, count: int) -> None:
    proc = ControllerProcess(etcd.url, cluster="many", runtime="none").start()
    try:
        wait_leader([proc])
        assert proc.proc is not None
        rss_before = psutil.Process(proc.proc.pid).memory_info().rss
        with ControllerClient(proc.address) as client:
            start = time.perf_counter()
            for i in range(count):
                client.deploy(spec(f"model-{i}"))
            total = time.perf_counter() - start
            assert len(client.list()) == count
            client.status()
        rss_after = psutil.Process(proc.proc.pid).memory_info().rss
        payload = records_pb2.DeploymentRecord(spec=spec("x")).SerializeToString()
        raw_start = time.perf_counter()
        asyncio.run(raw_txn_latencies(etcd.endpoint, count, payload))
        raw_total = time.perf_counter() - raw_start
    finally:
        proc.stop()
    print(f"\n2. {count} deployments created one Deploy at a time (goal RSS <= 150 MB)")
    row("", "total", "per deploy", "RSS")
    row(f"{count} Deploy RPCs", f"{total:8.2f} s", ms(total / count),
        f"{rss_after / 2**20:8.1f} MB")
    row(f"baseline: {count} raw etcd txns / idle RSS", f"{raw_total:8.2f} s",
        ms(raw_total / count), f"{rss_before / 2**20:8.1f} MB")
    FIGURES[f"{count} deployments created: controller RSS"] = Figure(
        [rss_after / 2**20], "MB", goal="<= 150")
    FIGURES["idle controller RSS"] = Figure([rss_before / 2**20], "MB")


def bench_failover(etcd: EtcdServer, kills: int, ttl: float) -> None:
    procs = [ControllerProcess(etcd.url, cluster="failover", lease_ttl=ttl,
                               runtime="none").start() for _ in range(3)]
    times = []
    try:
        for _ in range(kills):
            leader = wait_leader(procs)
            killed_at = time.monotonic()
            leader.kill()
            wait_leader([p for p in procs if p is not leader], timeout=ttl + 30)
            times.append(time.monotonic() - killed_at)
            procs.remove(leader)
            procs.append(ControllerProcess(etcd.url, cluster="failover", lease_ttl=ttl,
                                           runtime="none").start())
    finally:
        for proc in procs:
            proc.stop()
    print(f"\n3. Failover after SIGKILL of the leader, --lease-ttl {ttl:g}, {kills} kills "
          "(goal p50 <= 3 s)")
    row("", "p50", "max", "min")
    row("SIGKILL -> a standby serves as leader", f"{percentile(times, 0.5):8.2f} s",
        f"{max(times):8.2f} s", f"{min(times):8.2f} s")
    row("baseline: the lease TTL", f"{ttl:8.2f} s", "", "")
    FIGURES[f"failover after SIGKILL, --lease-ttl {ttl:g}"] = Figure(times, "s", goal="<= 3")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deploys", type=int, default=500)
    parser.add_argument("--create", type=int, default=1000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--lease-ttl", type=float, default=2.0)
    args = parser.parse_args()
    etcd = EtcdServer().start()
    print(f"servefleet control-plane bench: etcd at {etcd.endpoint}, "
          f"{psutil.cpu_count()} cores")
    try:
        bench_deploy_latency(etcd, args.deploys)
        bench_create_many(etcd, args.create)
        bench_failover(etcd, args.kills, args.lease_ttl)
    finally:
        etcd.stop()
    emit(FIGURES)


if __name__ == "__main__":
    main()
