"""The control plane at scale: a sweep over simulated clusters (issue 57).

    .venv/bin/python bench/scale.py [--points 100:10:10,1000:100:100] [--quick]
                                    [--updates 10] [--failures 3] [--window-s 10]

A point R:D:W is R replicas over D deployments, W watchers and W load
reporters (one report a second each). The controllers are real, on a real
etcd; the replicas are simulated (controller/runtime/sim_host.py) and answer
the controller's calls as real ones do; the watchers and reporters are
bench/scale_load.py processes (scale_cluster.py). At each point, in order:

1. start: R replicas deployed, until every one is RUNNING;
2. steady state over --window-s: controller CPU (cores) and RSS, etcd's
   database size and writes per second, the mean reconcile pass;
3. updates: a deployment scaled by one, up then down, --updates times:
   Deploy latency; time from the Deploy, and from the new replica becoming
   ready, until every watcher has the new replica set (p50, p99);
4. failures: a replica exits, --failures times: time until every watcher
   has a set without it;
5. autoscaling: 20 requests in flight appear on a deployment that
   autoscales (at 1 replica, target 1 request each, no delay): time until
   the controller decides more replicas, and until every watcher has them;
   then GetStatus latency under that load;
6. failover: the leader SIGKILLed; time until the standby leads, until it
   has adopted every replica (all RUNNING again), and until every watcher
   has the first update it sends (a scale sent as soon as it leads).

--quick is one small point (20 replicas, 5 watchers) in seconds, for
tests/test_scale_sim.py. Between each point and the next, each cost's
exponent in the replicas (or watchers, or deployments) says how it grows
(docs/scale.md).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import dataclass, field

import psutil
from figures import Figure, emit
from scale_cluster import SimCluster, total

from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2

RUNNING = replica_pb2.REPLICA_STATE_RUNNING
WATCHERS_PER_LOAD_PROCESS = 1000
AUTOSCALED = "auto"
# Scales on each second's load, at once: the decision's delay is the controller's own.
AUTOSCALING = d.AutoscalingConfig(min_replicas=1, max_replicas=50, target_ongoing_requests=1,
                                  upscale_delay_s=0, metrics_interval_s=0.5,
                                  look_back_period_s=1)


@dataclass(frozen=True)
class Point:
    replicas: int
    deployments: int
    watchers: int

    @classmethod
    def parse(cls, text: str) -> Point:
        try:
            replicas, deployments, watchers = (int(x) for x in text.split(":"))
        except ValueError:
            raise SystemExit(f"--points {text!r}: expected REPLICAS:DEPLOYMENTS:WATCHERS") from None
        if not 0 < deployments <= replicas or watchers < 1:
            raise SystemExit(f"--points {text!r}: 1 <= deployments <= replicas, watchers >= 1")
        return cls(replicas, deployments, watchers)

    @property
    def label(self) -> str:
        return f"{self.replicas} replicas, {self.watchers} watchers"


@dataclass
class Measured:
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, *samples: float) -> None:
        self.values.setdefault(name, []).extend(samples)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else math.nan


def spec(name: str, replicas: int, routed: bool) -> d.DeploymentSpec:
    """With `routed`, a route of its own: the route table, which goes to every
    proxy and replica, holds one route per deployment."""
    return d.DeploymentSpec(name=name, import_path="examples.model:Model",
                            route_prefix=f"/{name}" if routed else None,
                            replica_config=d.ReplicaConfig(num_replicas=replicas))


def running(client: ControllerClient) -> list:
    """The RUNNING replicas of the point's deployments (not the autoscaled one)."""
    return [r for r in client.replicas()
            if r.state == RUNNING and r.record.deployment != AUTOSCALED]


def wait_running(client: ControllerClient, count: int, timeout: float) -> float:
    began = time.monotonic()
    while len(running(client)) != count:
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"{len(running(client))} of {count} replicas RUNNING "
                               f"after {timeout:.0f}s")
        time.sleep(0.1)
    return time.monotonic() - began


def watchers_seen(cluster: SimCluster, key: str, after: float, timeout: float,
                  **test: object) -> list[float]:
    """Per watcher, seconds from `after` until it had the set; missing ones raise."""
    seen = [v for answer in cluster.ask_loads({"op": "seen", "key": key, "after": after,
                                               "timeout": timeout, **test}) for v in answer]
    missing = sum(v is None for v in seen)
    if missing:
        raise TimeoutError(f"{missing} of {len(seen)} watchers never saw {key} {test}")
    return seen


class CpuMeter:
    """Cores a process used between `__init__` and `cores()`."""

    def __init__(self, proc: psutil.Process) -> None:
        self.proc = proc
        self.began, self.cpu = time.monotonic(), self._cpu()

    def _cpu(self) -> float:
        times = self.proc.cpu_times()
        return times.user + times.system

    def cores(self) -> float:
        return (self._cpu() - self.cpu) / (time.monotonic() - self.began)


def steady_state(cluster: SimCluster, window_s: float, out: Measured) -> None:
    leader = cluster.leader()
    proc = cluster.usage(leader)
    etcd0, ctl0 = cluster.etcd_metrics(), cluster.controller_metrics(leader)
    meters = [CpuMeter(proc), CpuMeter(cluster.sim_process()),
              *(CpuMeter(psutil.Process(load.proc.pid)) for load in cluster.loads)]
    t0 = time.monotonic()
    time.sleep(window_s)
    t1 = time.monotonic()
    etcd1, ctl1 = cluster.etcd_metrics(), cluster.controller_metrics(leader)
    out.add("controller CPU", meters[0].cores())
    # Neither should near a core: the cluster would measure its simulation.
    out.add("sim host CPU", meters[1].cores())
    out.add("load generators CPU", sum(m.cores() for m in meters[2:]))
    out.add("controller RSS", proc.memory_info().rss / 2**20)
    out.add("etcd database", etcd1.get("etcd_mvcc_db_total_size_in_bytes", 0) / 2**20)
    writes = r"etcd_mvcc_(put|delete)_total.*"
    out.add("etcd writes", (total(etcd1, writes) - total(etcd0, writes)) / (t1 - t0))
    passes = r"servefleet_controller_reconcile_seconds_(sum|count).*"
    spent = total(ctl1, passes.replace("(sum|count)", "sum")) - total(
        ctl0, passes.replace("(sum|count)", "sum"))
    count = total(ctl1, passes.replace("(sum|count)", "count")) - total(
        ctl0, passes.replace("(sum|count)", "count"))
    out.add("reconcile pass", 1000 * spent / count if count else math.nan)


def updates(cluster: SimCluster, client: ControllerClient, sizes: dict[str, int], app: str,
            count: int, timeout: float, routed: bool, out: Measured) -> None:
    names = sorted(sizes)
    for u in range(count):
        name = names[u // 2 % len(names)]
        sizes[name] += 1 if u % 2 == 0 else -1
        began = time.time()
        client.deploy(spec(name, sizes[name], routed))
        out.add("Deploy", 1000 * (time.time() - began))
        seen = watchers_seen(cluster, f"replicas/{app}/{name}", began, timeout,
                             count=sizes[name])
        out.add("Deploy to every watcher", *(1000 * s for s in seen))
        if u % 2 == 0:  # the new replica: from its ready instant on
            ready = max(r["ready_at"] for r in cluster.sim_ask({"op": "replicas"})
                        if r["deployment"] == name)
            out.add("ready to every watcher", *(1000 * (began + s - ready) for s in seen))


def failures(cluster: SimCluster, client: ControllerClient, sizes: dict[str, int], app: str,
             count: int, timeout: float, out: Measured) -> None:
    names = sorted(sizes)
    for f in range(count):
        name = names[f % len(names)]
        victim = next(r.record.replica_id for r in running(client)
                      if r.record.deployment == name)
        at = cluster.sim_ask({"op": "act", "action": "exit", "replica_ids": [victim]})["at"]
        seen = watchers_seen(cluster, f"replicas/{app}/{name}", at, timeout, lacks=victim)
        out.add("exit to every watcher", *(1000 * s for s in seen))
        wait_running(client, sum(sizes.values()), timeout)


def autoscaled_target(client: ControllerClient) -> int:
    for application in client.status().applications:
        for deployment in application.deployments:
            if deployment.name == AUTOSCALED:
                return deployment.autoscaling.target_replicas
    return 0


def autoscaling(cluster: SimCluster, client: ControllerClient, app: str, reporters: int,
                timeout: float, out: Measured) -> None:
    """Load of 20 requests in flight appears on the autoscaled deployment (at 1
    replica): time until the controller decides more replicas, and until every
    watcher has them."""
    before = autoscaled_target(client)
    began = time.time()
    cluster.ask_loads({"op": "load", "deployment": f"{app}/{AUTOSCALED}",
                       "ongoing": math.ceil(20 / reporters)})
    while autoscaled_target(client) <= before:
        if time.time() - began > timeout:
            raise TimeoutError(f"no autoscaling decision within {timeout:.0f}s")
        time.sleep(0.02)
    out.add("autoscaling: decision", time.time() - began)
    seen = watchers_seen(cluster, f"replicas/{app}/{AUTOSCALED}", began, timeout,
                         more_than=before)
    out.add("autoscaling: every watcher has the new replicas", max(seen))


def status_latency(client: ControllerClient, calls: int, out: Measured) -> None:
    for _ in range(calls):
        began = time.perf_counter()
        client.status()
        out.add("GetStatus", 1000 * (time.perf_counter() - began))


def failover(cluster: SimCluster, client: ControllerClient, sizes: dict[str, int], app: str,
             timeout: float, routed: bool, out: Measured) -> None:
    old = cluster.leader()
    began, sim = time.time(), CpuMeter(cluster.sim_process())
    old.kill()
    cluster.leader(timeout)
    out.add("failover: leading", time.time() - began)
    name = sorted(sizes)[0]
    sizes[name] += 1
    client.deploy(spec(name, sizes[name], routed))
    out.add("failover: Deploy answered", time.time() - began)
    seen = watchers_seen(cluster, f"replicas/{app}/{name}", began, timeout, count=sizes[name])
    out.add("failover: first update at every watcher", max(seen))
    wait_running(client, sum(sizes.values()), timeout)
    out.add("failover: every replica adopted", time.time() - began)
    out.add("sim host CPU in failover", sim.cores())


def run_point(point: Point, args: argparse.Namespace) -> Measured:
    out = Measured()
    timeout = 60 + point.replicas / 50
    cluster = SimCluster(lease_ttl=args.lease_ttl, ready_delay_s=args.ready_delay_s)
    try:
        cluster.start()
        client = ControllerClient(cluster.addresses)
        sizes = {f"d{i}": point.replicas // point.deployments
                 + (1 if i < point.replicas % point.deployments else 0)
                 for i in range(point.deployments)}
        began = time.monotonic()
        for name, size in sizes.items():
            client.deploy(spec(name, size, args.routes))
        client.deploy(d.DeploymentSpec(name=AUTOSCALED, import_path="examples.model:Model",
                                       replica_config=d.ReplicaConfig(
                                           autoscaling_config=AUTOSCALING)))
        wait_running(client, point.replicas, timeout)
        out.add("start every replica", time.monotonic() - began)
        app = client.replicas()[0].record.application
        cluster.start_load(point.watchers, point.watchers, [f"{app}/{n}" for n in sizes],
                           max(1, math.ceil((point.watchers + point.replicas)
                                            / WATCHERS_PER_LOAD_PROCESS)),
                           args.replica_streams)
        ready = sum(cluster.ask_loads({"op": "ready", "timeout": timeout}))
        if ready != point.watchers:
            raise TimeoutError(f"{ready} of {point.watchers} watchers got the route table")
        streams = sum(cluster.ask_loads({"op": "replicas ready", "timeout": timeout}))
        if args.replica_streams and streams < point.replicas:
            raise TimeoutError(f"{streams} of {point.replicas} replicas' Watch streams open")
        steady_state(cluster, args.window_s, out)
        updates(cluster, client, sizes, app, args.updates, timeout, args.routes, out)
        failures(cluster, client, sizes, app, args.failures, timeout, out)
        autoscaling(cluster, client, app, point.watchers, timeout, out)
        status_latency(client, args.status_calls, out)
        failover(cluster, client, sizes, app, timeout, args.routes, out)
        client.close()
    except BaseException:
        cluster.close(keep=True)  # its logs say why
        print(f"{point.label}: failed; logs kept in {cluster.dir}", flush=True)
        raise
    cluster.close()
    return out


# name -> (unit, statistic, goal); percentiles of pooled samples, else the median.
REPORTED = [
    ("start every replica", "s", "", ""),
    ("controller CPU", "cores", "", "<= 1"),
    ("controller RSS", "MB", "", "<= 2048"),
    ("sim host CPU", "cores", "", ""),
    ("load generators CPU", "cores", "", ""),
    ("etcd database", "MB", "", ""),
    ("etcd writes", "/s", "", ""),
    ("reconcile pass", "ms", "", ""),
    ("Deploy", "ms", "p99", "<= 1000"),
    ("Deploy to every watcher", "ms", "p50", ""),
    ("Deploy to every watcher", "ms", "p99", ""),
    ("ready to every watcher", "ms", "p99", "<= 2000"),
    ("exit to every watcher", "ms", "p99", ""),
    ("autoscaling: decision", "s", "", ""),
    ("autoscaling: every watcher has the new replicas", "s", "", ""),
    ("GetStatus", "ms", "p99", ""),
    ("failover: leading", "s", "", ""),
    ("failover: Deploy answered", "s", "", ""),
    ("failover: first update at every watcher", "s", "", ""),
    ("failover: every replica adopted", "s", "", ""),
    ("sim host CPU in failover", "cores", "", ""),
]


def summarise(point: Point, measured: Measured, lease_ttl: float,
              figures: dict[str, Figure]) -> dict[str, float]:
    print(f"\n{point.label} ({point.deployments} deployments)")
    row: dict[str, float] = {}
    for name, unit, stat, goal in REPORTED:
        samples = measured.values.get(name, [])
        value = (percentile(samples, 0.5 if stat == "p50" else 0.99) if stat
                 else statistics.median(samples) if samples else math.nan)
        label = f"{name} {stat}".strip()
        if name.startswith("failover") and goal == "":
            goal = f"<= {lease_ttl + 5:g}"
        print(f"  {label:50} {value:10.2f} {unit:6} {'goal ' + goal if goal else ''}")
        row[label] = value
        figures[f"scale {point.label}: {label}"] = Figure(
            [value], unit, goal=goal, headline=False)
    return row


def exponents(points: list[Point], rows: list[dict[str, float]]) -> None:
    """Between each point and the next, each cost's exponent: log(cost ratio)
    over log(growth), the growth being that of replicas, or else of watchers,
    or else of deployments."""
    for i in range(1, len(points)):
        (a, first), (b, last) = (points[i - 1], rows[i - 1]), (points[i], rows[i])
        growth = next(((name, y / x) for name, x, y in (
            ("replicas", a.replicas, b.replicas), ("watchers", a.watchers, b.watchers),
            ("deployments", a.deployments, b.deployments)) if x != y), None)
        if growth is None:
            continue
        print(f"\nexponent of each cost in {growth[0]}, "
              f"{a.replicas}:{a.deployments}:{a.watchers} -> "
              f"{b.replicas}:{b.deployments}:{b.watchers}")
        for label, before in first.items():
            after = last[label]
            if before > 0 and after > 0:
                print(f"  {label:50} {math.log(after / before) / math.log(growth[1]):6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", default="100:10:10,1000:100:100",
                        help="REPLICAS:DEPLOYMENTS:WATCHERS,... (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="one point, 20:2:5, in seconds")
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--failures", type=int, default=3)
    parser.add_argument("--status-calls", type=int, default=20)
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--lease-ttl", type=float, default=5.0)
    parser.add_argument("--ready-delay-s", type=float, default=0.2,
                        help="seconds a simulated replica takes to be ready (default 0.2)")
    parser.add_argument("--no-replica-streams", dest="replica_streams", action="store_false",
                        help="leave out the Watch stream each replica holds (a real one does)")
    parser.add_argument("--no-routes", dest="routes", action="store_false",
                        help="deployments without a route (by default each has one)")
    args = parser.parse_args()
    if args.quick:
        args.points, args.updates, args.failures = "20:2:5", 2, 1
        args.status_calls, args.window_s, args.lease_ttl = 5, 2.0, 2.0
    points = [Point.parse(p) for p in args.points.split(",")]
    figures: dict[str, Figure] = {}
    rows = [summarise(p, run_point(p, args), args.lease_ttl, figures) for p in points]
    exponents(points, rows)
    emit(figures)


if __name__ == "__main__":
    main()
