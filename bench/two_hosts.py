"""Two hosts on this machine: deploy/stack.yml on a two-node Docker Swarm.

    .venv/bin/python bench/two_hosts.py [--keep]

Hosts "manager" and "worker" are network namespaces joined by one veth pair
(10.232.0.1 and 10.232.0.2: the addresses exist only inside them), each with
a Docker engine of its own (bench/nemesis/docker_engine.py: own data root,
exec root and socket, `--bridge=none --iptables=false`, the servefleet image
loaded from the machine's engine). The manager's engine starts a swarm, the
worker's joins it over the veth. The script then runs itself on the manager
host and deploys the stack there with `docker stack deploy`: etcd and the
controller on the manager (the etcd label, manager-only), a proxy on each
node (global), the deploy service applying a config of this run's, and the
code bind-mounted from the node (deploy/stack.code-mount.yml: the two hosts
share this machine's files, as hosts sharing a file system would). Checks,
printing each result:

1. the stack across both nodes: a proxy answers on each host; the deployed
   application, constrained to `node.labels.zone == b`, runs on the worker
   and answers through both proxies (the manager's across the veth); then 2
   replicas spread over the zones run one on each host, both answering;
2. the worker lost: under steady load through the manager's proxy, every
   process of the worker host (its engine, containerd, its proxy and
   replica) is killed; the controller replaces the replica on the manager
   and the load goes on (failures counted);
3. the worker back: its engine restarts with its data and rejoins; Swarm
   runs its proxy again, and a scale-up to 3 may place a replica there.

Replicas use host networking on their node (the Swarm runtime's default);
the overlay network is not used. Exit status 0 when every step held.
`--keep` leaves the namespaces and engines for a look (remove them with
`ip netns del` and by stopping the dockerds).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from nemesis.docker_engine import IMAGE, PrivateEngine, binary_image  # noqa: E402

NET = "10.232.0"
MANAGER, WORKER = f"{NET}.1", f"{NET}.2"
ROOT = HERE.parent
APPS = str(ROOT / "tests" / "apps")
ETCD_IMAGE = "servefleet-etcd:test"  # Debian's etcd in the servefleet image (no registry)
CONTROLLER, PORT = f"{MANAGER}:7373", 8000  # the stack's defaults: each host is fresh
STACK = "twohosts"
PINNED = f"""\
applications:
  - name: pinned
    route_prefix: /pinned
    import_path: routed_app:Routed
    runtime:
      working_dir: {APPS}
      placement: {{constraints: ["node.labels.zone == b"]}}
"""


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if check and done.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done


def _ns(tag: str, host: str) -> str:
    return f"sf2h{tag}-{host}"


def make_hosts(tag: str) -> None:
    manager, worker = _ns(tag, "manager"), _ns(tag, "worker")
    _run("ip", "netns", "add", manager)
    _run("ip", "netns", "add", worker)
    for ns in (manager, worker):
        _run("ip", "-n", ns, "link", "set", "lo", "up")
    _run("ip", "-n", manager, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0",
         "netns", worker)
    for ns, address in ((manager, MANAGER), (worker, WORKER)):
        _run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")


def remove_hosts(tag: str) -> None:
    for host in ("manager", "worker"):
        _run("ip", "netns", "del", _ns(tag, host), check=False)


def outside(args: argparse.Namespace) -> int:
    """Make the hosts, run the rest on the manager host, remove the hosts."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("nsenter") is None:
        sys.exit("two_hosts: needs root, iproute2 and nsenter")
    tag = uuid.uuid4().hex[:6]
    make_hosts(tag)
    try:
        return subprocess.call(["nsenter", f"--net=/run/netns/{_ns(tag, 'manager')}", "--",
                                sys.executable, __file__, "--inside", tag,
                                *(["--keep"] if args.keep else [])])
    finally:
        if not args.keep:
            remove_hosts(tag)


def kill_host(tag: str, host: str) -> int:
    """SIGKILL every process of the host (its network namespace); how many."""
    pids = _run("ip", "netns", "pids", _ns(tag, host), check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    return len(pids)


class Load(threading.Thread):
    """GET the proxy's route back to back; counts answers per replica and failures."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.by_replica: dict[str, int] = {}
        self.failed: list[str] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        import httpx

        with httpx.Client(timeout=10) as http:
            while not self.stopped.is_set():
                try:
                    reply = http.get(self.url)
                    reply.raise_for_status()
                    replica = reply.json()["replica"]
                    self.by_replica[replica] = self.by_replica.get(replica, 0) + 1
                except Exception as e:
                    self.failed.append(f"{type(e).__name__}: {e}")
                time.sleep(0.01)

    def stop(self) -> None:
        self.stopped.set()
        self.join(30)


def _answered(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def swarm_of_two(mgr: PrivateEngine, wrk: PrivateEngine) -> str:
    """The manager's engine starts a swarm, the worker's joins; labels: zone a
    and etcd-1's on the manager, zone b on the worker. The worker's node id."""
    mgr.docker("swarm", "init", "--advertise-addr", MANAGER, "--listen-addr", f"{MANAGER}:2377")
    token = mgr.docker("swarm", "join-token", "-q", "worker").stdout.strip()
    wrk.docker("swarm", "join", "--token", token, "--advertise-addr", WORKER,
               "--listen-addr", f"{WORKER}:2377", f"{MANAGER}:2377")
    # (Both nodes carry this machine's hostname: known by their ids.)
    worker_id = ""
    for node_id in mgr.docker("node", "ls", "--format", "{{.ID}}").stdout.split():
        address = mgr.docker("node", "inspect", "-f", "{{.Status.Addr}}", node_id).stdout.strip()
        labels = ["zone=b"] if address == WORKER else ["zone=a", "servefleet.etcd-1=true"]
        for label in labels:
            mgr.docker("node", "update", "--label-add", label, node_id)
        worker_id = node_id if address == WORKER else worker_id
    return worker_id


def deploy_stack(mgr: PrivateEngine, work: Path) -> None:
    """deploy/stack.yml on the swarm, as its header says, with this run's settings."""
    apps = work / "apps.yaml"
    apps.write_text(PINNED)
    env = {"PATH": os.environ["PATH"], "DOCKER_HOST": mgr.url,
           "SF_ETCD1_ADDR": f"{MANAGER}:2379", "SF_ETCD1_PEER": f"{MANAGER}:2380",
           "SF_ETCD_CLUSTER": f"etcd-1=http://{MANAGER}:2380",
           "SF_STORE": f"etcd://{MANAGER}:2379", "SF_CONTROLLERS": CONTROLLER,
           "SF_CLUSTER": STACK, "SERVEFLEET_IMAGE": IMAGE, "ETCD_IMAGE": ETCD_IMAGE,
           "SF_APPS": str(apps), "SF_DOCKER_SOCKET": str(mgr.socket),
           "SF_DOCKER_CODE": "mount", "SF_CODE_DIR": APPS}
    mgr.docker("stack", "deploy", "--resolve-image", "never",
               "-c", str(ROOT / "deploy" / "stack.yml"),
               "-c", str(ROOT / "deploy" / "stack.code-mount.yml"), STACK, env=env, timeout=300)


def inside(tag: str, keep: bool) -> int:
    from servefleet._private.testing import wait_for
    from servefleet.client import ControllerClient
    from servefleet.v1 import deployment_pb2 as d
    from servefleet.v1 import replica_pb2

    work = Path(tempfile.mkdtemp(prefix="servefleet-2h-"))
    engines = {"manager": PrivateEngine(work, name="manager", containerd="sf2h-manager"),
               "worker": PrivateEngine(work, netns=_ns(tag, "worker"), name="worker",
                                       containerd="sf2h-worker")}
    proxies = {host: f"http://{host}:{PORT}" for host in (MANAGER, WORKER)}
    results: dict[str, object] = {}
    ok = True
    try:
        began = time.monotonic()
        binary_image(ETCD_IMAGE, "etcd", "etcd-server", work)
        for engine in engines.values():
            engine.start()
        mgr, wrk = engines["manager"], engines["worker"]
        mgr.load(ETCD_IMAGE)
        results["engines up with the images (s)"] = round(time.monotonic() - began, 1)
        worker_id = swarm_of_two(mgr, wrk)

        def worker_state() -> str:
            return mgr.docker("node", "inspect", "-f", "{{.Status.State}}", worker_id,
                              check=False).stdout.strip()

        wait_for(lambda: worker_state() == "ready", 60, "the worker ready")
        began = time.monotonic()
        deploy_stack(mgr, work)
        client = ControllerClient([CONTROLLER], timeout=60)

        def spec(replicas: int, name: str = "Where", **placement) -> d.DeploymentSpec:
            return d.DeploymentSpec(
                name=name, import_path="routed_app:Routed", route_prefix=f"/{name.lower()}",
                runtime=d.RuntimeOptions(working_dir=APPS,
                                         placement=d.Placement(**placement)),
                replica_config=d.ReplicaConfig(num_replicas=replicas,
                                               graceful_shutdown_timeout_s=2,
                                               graceful_shutdown_wait_loop_s=0.1,
                                               health_check_period_s=1,
                                               health_check_timeout_s=2))

        def running(application: str = "default", name: str = "Where") -> dict[str, str]:
            try:
                found = client.replicas(application, name)
            except Exception:  # the stack's controller not up yet
                return {}
            return {r.record.replica_id: r.record.http_address.rpartition(":")[0]
                    for r in found if r.state == replica_pb2.REPLICA_STATE_RUNNING}

        # 1. The stack across both nodes: its deploy service's application
        # runs on the worker and answers through the proxies of both hosts.
        wait_for(lambda: len(running("pinned", "Routed")) == 1, 300,
                 "the stack's application running")
        wait_for(lambda: all(_answered(f"{url}/pinned") for url in proxies.values()), 60,
                 "the application answering through both proxies")
        results["1. stack up, application answering on both hosts (s)"] = round(
            time.monotonic() - began, 1)
        results["1. tasks by node"] = tasks_by_node(mgr)
        results["1. pinned to zone b: replica at"] = list(running("pinned", "Routed").values())
        ok &= list(running("pinned", "Routed").values()) == [WORKER]
        client.delete_applications(["pinned"])
        wait_for(lambda: not replica_services(mgr), 60, "the pinned replica's service gone")
        # Two replicas spread over the zones: one on each host.
        client.deploy(spec(2, spread=["node.labels.zone"]))
        wait_for(lambda: len(running()) == 2, 180, "2 replicas running")
        placed = running()
        results["1. replicas by host"] = sorted(placed.values())
        load = Load(f"{proxies[MANAGER]}/where")
        load.start()
        wait_for(lambda: set(load.by_replica) == set(placed), 30,
                 "answers from both replicas")
        on_worker = [rid for rid, host in placed.items() if host == WORKER]
        ok &= sorted(placed.values()) == [MANAGER, WORKER]
        results["1. answers by replica"] = dict(load.by_replica)

        # 2. The worker host lost, under load.
        killed_at = time.monotonic()
        results["2. processes killed on the worker"] = kill_host(tag, "worker")
        wait_for(lambda: len(running()) == 2 and WORKER not in running().values(), 180,
                 "the worker's replica replaced on the manager")
        results["2. replaced after (s)"] = round(time.monotonic() - killed_at, 1)
        results["2. replicas by host"] = sorted(running().values())
        before = sum(load.by_replica.values())
        wait_for(lambda: sum(load.by_replica.values()) > before + 100, 30, "load going on")
        results["2. failed requests (of all)"] = f"{len(load.failed)} of " \
            f"{sum(load.by_replica.values()) + len(load.failed)}"
        results["2. failures, first"] = load.failed[:3]
        ok &= bool(on_worker) and WORKER not in running().values()

        # 3. The worker back: Swarm runs its proxy again, and the next
        # scale-up may use it. (Swarm first notices it gone: until then its
        # node still reads ready.)
        wait_for(lambda: worker_state() == "down", 120, "the manager seeing the worker down")
        results["3. worker node down after (s)"] = round(time.monotonic() - killed_at, 1)
        wrk.relaunch()
        wait_for(lambda: worker_state() == "ready", 120, "the worker ready again")
        wait_for(lambda: _answered(f"{proxies[WORKER]}/where"), 120,
                 "the worker's proxy answering again")
        results["3. the worker's proxy answers again"] = True
        client.deploy(spec(3, spread=["node.labels.zone"]))
        wait_for(lambda: len(running()) == 3, 180, "3 replicas running")
        results["3. replicas by host after a scale-up"] = sorted(running().values())
        ok &= WORKER in running().values()
        load.stop()
        results["load: answers by replica, failed"] = [dict(load.by_replica),
                                                       len(load.failed)]
        client.deploy(spec(0, spread=["node.labels.zone"]))
        client.close()
    except Exception as e:  # any step that did not hold ends the story here
        ok = False
        results["stopped"] = f"{type(e).__name__}: {e}"
        try:  # what the stack says, when its engine still answers
            mgr = engines["manager"]
            results["stack services"] = mgr.docker("service", "ls",
                                                   check=False).stdout.splitlines()
            for service in ("deploy", "controller"):
                logs = mgr.docker("service", "logs", "--tail", "15", f"{STACK}_{service}",
                                  check=False)
                results[f"{service} log"] = (logs.stdout + logs.stderr).splitlines()
        except Exception as more:
            results["stack services"] = f"unknown: {type(more).__name__}: {more}"
    finally:
        print(json.dumps(results, indent=2))
        print(f"two hosts: {'every step held' if ok else 'FAILED'} (work dir {work})")
        if not keep:
            for engine in engines.values():
                engine.stop()
    return 0 if ok else 1


def replica_services(mgr: PrivateEngine) -> list[str]:
    """The replicas' services (the controller's, labelled with the cluster)."""
    return mgr.docker("service", "ls", "-q", "--filter",
                      f"label=io.servefleet.cluster={STACK}", check=False).stdout.split()


def tasks_by_node(mgr: PrivateEngine) -> dict[str, list[str]]:
    """The running tasks (the stack's services' and the replicas'), by node address."""
    placed = {}
    for node in mgr.docker("node", "ls", "--format", "{{.ID}}").stdout.split():
        address = mgr.docker("node", "inspect", "-f", "{{.Status.Addr}}", node).stdout.strip()
        tasks = mgr.docker("node", "ps", node, "--filter", "desired-state=running",
                           "--format", "{{.Name}} {{.CurrentState}}").stdout.splitlines()
        placed[address] = sorted(task.split(".")[0].removeprefix(f"{STACK}_")
                                 for task in tasks if " Running " in f"{task} ")
    return placed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--inside", metavar="TAG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.exit(inside(args.inside, args.keep) if args.inside else outside(args))


if __name__ == "__main__":
    main()
