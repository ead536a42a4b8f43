"""Faults on purpose: a cluster under mixed traffic and a steady loop of
deploys, while a nemesis kills, stops and restarts its processes; then the
invariants (bench/nemesis/checks.py) are checked on what was recorded.

    bench/chaos.py --short                 CI: a fixed seed, one of each kind of fault
    bench/chaos.py --minutes 20            the full run: a fault every 10-20 s
    bench/chaos.py --check RUN.json        check a saved history again

1. start the cluster: 3 controllers on a 3-member etcd, 2 proxies
   (nemesis/cluster.py), each controller and proxy in a network namespace
   of its own when the run may make them (as root, with iproute2 and
   nftables; nemesis/hosts.py: the run itself goes into the "main" one),
   else all on loopback and partitions are skipped; the embedded side
   (sqlite on a small tmpfs: nemesis/embedded.py) and the Docker side
   (replicas as containers on an engine of the run's own:
   nemesis/docker_side.py; skipped, saying why, where Docker is not to be
   had, unless SERVEFLEET_DOCKER_TESTS=required); deploy the served
   deployments and wait for them;
2. start the traffic (nemesis/traffic.py) and the operations loop
   (nemesis/operations.py);
3. the nemesis carries out the seed's plan (nemesis/schedule.py, faults.py);
4. stop the operations, heal what is still broken, wait for the cluster to
   converge (every deployment RUNNING at its target), stop the traffic;
5. read the final state, the leaders' actions from their logs, every
   revision a leader wrote from etcd's history (nemesis/store_journal.py)
   and what the runtime runs; check; print the table; save the history as
   JSON.

Exit status 1 when an invariant is broken.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nemesis import report, schedule
from nemesis.cluster import CLUSTER, ChaosCluster, off_target
from nemesis.disk_full import MountRefused
from nemesis.docker_engine import MACHINE_MOUNTS, DockerUnavailable
from nemesis.docker_side import DockerSide
from nemesis.embedded import EmbeddedSide
from nemesis.faults import Nemesis
from nemesis.history import Final, History
from nemesis.hosts import Hosts, unavailable
from nemesis.log_keeper import LogKeeper
from nemesis.operations import Operations, final_state
from nemesis.store_journal import leader_writes, process_starts
from nemesis.traffic import Traffic

from servefleet._private.xds_bootstrap import render

RESULTS = Path(__file__).resolve().parent / "results" / "chaos"
SHORT_SEED = 38
# After the nemesis stops: how long the cluster may take to converge (a
# rollout of 3 replicas on a loaded 2-core machine, after a failover).
CONVERGE_BOUND_S = 60.0
# Set in the run's own environment when it runs inside its hosts: their tag.
INSIDE = "SERVEFLEET_CHAOS_HOSTS"


def converged(cluster: ChaosCluster) -> bool:
    """Every deployment RUNNING at its target, and nothing else."""
    return not unconverged(cluster)


def unconverged(cluster: ChaosCluster) -> list[str]:
    """What keeps the cluster from having converged (cluster.off_target)."""
    with cluster.client(timeout=5) as client:
        return off_target(client)


def leftovers(cluster: ChaosCluster) -> list[str]:
    """Replica processes no record accounts for, and records with no process."""
    from servefleet.controller.runtime.process import scan

    running = {r.replica_id: r.handle for r, _ in scan(CLUSTER)}
    with cluster.client() as client:
        records = {r.record.replica_id for r in client.replicas() if not r.record.stopping}
    return ([f"process {handle} of replica {rid}: no record" for rid, handle in running.items()
             if rid not in records]
            + [f"record of replica {rid}: no process" for rid in records if rid not in running])


def wait_converged(cluster: ChaosCluster, docker: DockerSide | None, nemesis_end: float,
                   wait_s: float) -> float | None:
    deadline = nemesis_end + wait_s
    while time.time() < deadline:
        if converged(cluster) and not leftovers(cluster) and (docker is None
                                                              or docker.converged()):
            return time.time()
        time.sleep(0.5)
    return None


def run(args: argparse.Namespace) -> History:
    seed = SHORT_SEED if args.short and args.seed is None else (args.seed or 1)
    every = (8.0, 12.0) if args.short else (10.0, 20.0)
    steps = schedule.plan(seed, args.minutes * 60, every, short=args.short)
    history = History(seed, schedule.digest(steps), {"short": args.short,
                                                     "minutes": args.minutes})
    print(f"chaos: seed {seed}, {len(steps)} faults, schedule {history.schedule_digest}")
    work = Path(tempfile.mkdtemp(prefix="servefleet-chaos-"))
    hosts = Hosts(os.environ[INSIDE]) if os.environ.get(INSIDE) else None
    cluster = ChaosCluster(work, hosts=hosts).start()
    print(f"  cluster up in {work} (leader {cluster.leader()}"
          f"{', each controller and proxy in a network namespace' if hosts else ''})")
    embedded = docker = None
    # Replica logs outlive their replicas: WORK/replica-logs.
    logs = LogKeeper([work / "runtime", work / "embedded"], work / "replica-logs").start()
    nemesis = Nemesis(cluster)
    if hosts is None:
        nemesis.no_hosts = args.no_hosts_why
    try:
        try:
            embedded = nemesis.embedded = EmbeddedSide(work).start(seed)
        except MountRefused as e:
            print(f"  no embedded side ({e}): the disk-full fault will be skipped")
        try:
            docker = nemesis.docker = DockerSide(work).start(seed)
            print(f"  Docker side up: {len(docker.replicas())} replicas as containers")
        except DockerUnavailable as e:
            if os.environ.get("SERVEFLEET_DOCKER_TESTS") == "required":
                raise SystemExit(f"no Docker side, and SERVEFLEET_DOCKER_TESTS=required: {e}"
                                 ) from None
            print(f"  no Docker side ({e}): every replica is a process")
        client = cluster.client(timeout=30)
        ops = Operations(client, seed)
        ops.setup()
        if not _poll(lambda: converged(cluster), 120):
            raise SystemExit("the served deployments did not start within 120 s")
        traffic = Traffic(cluster.proxy_urls(), cluster.grpc_targets(),
                          sides={n: s.url for n, s in (("embedded", embedded),
                                                       ("docker", docker)) if s},
                          xds_bootstrap=render(list(cluster.controller_addresses()))).start()
        ops.start()
        if docker:
            docker.start_ops()
        time.sleep(3)  # traffic under way before the first fault
        nemesis.run(steps, time.time(), stopping=lambda: False)
        history.ops = ops.stop() + (embedded.recorded_ops() if embedded else []) + (
            docker.recorded_ops() if docker else [])
        nemesis.heal_all()
        nemesis_end = time.time()
        converged_at = wait_converged(cluster, docker, nemesis_end, CONVERGE_BOUND_S * 2)
        history.requests = traffic.stop()
        history.options["websocket_reconnects"] = traffic.reconnects
        history.faults = nemesis.faults
        state = final_state(client.list()) | (embedded.final_state() if embedded else {}) | (
            docker.final_state() if docker else {})
        history.final = Final(nemesis_end, state, converged_at,
                              [] if converged_at else unconverged(cluster) + leftovers(cluster)
                              + (docker.unconverged() if docker else []),
                              time.time() - nemesis_end)
        history.actions = report.actions_from_logs(cluster.leader_log_lines())
        history.writes = leader_writes(cluster.etcd.members[0].endpoint, CLUSTER)
        history.starts = process_starts(cluster.etcd.members[0].endpoint, CLUSTER,
                                        history.writes)
        client.close()
    finally:
        damage = (embedded.stop() if embedded else []) + (docker.stop() if docker else [])
        cluster.stop()
        logs.stop()
    from servefleet.controller.runtime.process import scan
    if history.final is not None:
        history.final.leftovers += damage
        history.final.leftovers += [f"after shutdown: replica {r.replica_id} still runs"
                                    for r, _ in scan(CLUSTER)]
    history.options["skipped"] = nemesis.skipped
    return history


def _in_hosts() -> int:
    """Make the run's hosts, run this same command inside "main", remove them."""
    hosts = Hosts().create()
    try:
        return subprocess.call([*hosts.wrap("main"), sys.executable, *sys.argv],
                               env={**os.environ, INSIDE: hosts.tag,
                                    MACHINE_MOUNTS: f"/proc/{os.getpid()}/ns/mnt"})
    finally:
        hosts.remove()


def _poll(predicate, timeout: float) -> bool:
    """Whether `predicate()` came true within the timeout (asked every 0.5 s)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true",
                        help=f"CI's run: seed {SHORT_SEED} unless --seed, one of each fault")
    parser.add_argument("--seed", type=int, default=None, help="the nemesis's seed")
    parser.add_argument("--minutes", type=float, default=20.0,
                        help="how long the nemesis works (not with --short)")
    parser.add_argument("--check", metavar="RUN.json", help="check a saved history again")
    parser.add_argument("--loopback", action="store_true",
                        help="no network namespaces: everything on loopback, no partitions")
    args = parser.parse_args()
    args.no_hosts_why = "--loopback" if args.loopback else unavailable() or ""
    if not args.check and not args.no_hosts_why and not os.environ.get(INSIDE):
        sys.exit(_in_hosts())
    if args.check:
        history = History.load(args.check)
    else:
        history = run(args)
        RESULTS.mkdir(parents=True, exist_ok=True)
        saved = RESULTS / f"seed-{history.seed}{'-short' if args.short else ''}.json"
        history.save(saved)
        print(f"  history saved to {saved}")
    found = report.verdicts(history, CONVERGE_BOUND_S)
    text = report.table(history, found, history.options.get("skipped", []))
    print(text)
    if not args.check:  # the table beside the (uncommitted) history, for the README
        (RESULTS / f"seed-{history.seed}{'-short' if args.short else ''}.md").write_text(
            f"bench/chaos.py {'--short' if args.short else f'--minutes {args.minutes:g}'}, "
            f"{time.strftime('%Y-%m-%d')}\n\n{text}\n")
    sys.exit(0 if all(v.ok for v in found) else 1)


if __name__ == "__main__":
    main()
