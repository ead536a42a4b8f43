"""The deployments a run serves, and the steady loop of Deploys and Deletes
that changes them while the nemesis works (every call recorded: history.Op).

Served (traffic goes to them; never deleted, at least one replica):
    chaos/Front, chaos/Back   rollouts (a new version), in-place changes
                              (user_config), scale changes (1-3 replicas)
    grpc/Clf                  the same, for the gRPC ingress
Churned (no traffic):
    chaos/Churn0, chaos/Churn1  created, changed and deleted
The Docker side (docker_side.py) runs a loop of its own over docker/Echo.

A deployment's mark, what the final state is checked against, is
"version|replicas|user_config mark" of its stored spec ("" when deleted).
The loop runs operations one after another, so per deployment they are
ordered (checks.writes_kept relies on it).
"""

from __future__ import annotations

import json
import random
import threading
import time

import grpc

from nemesis.cluster import CHAOS_APPS, EXAMPLES
from nemesis.history import FAILED, OK, UNKNOWN, Op
from servefleet.client import ControllerClient, ControllerError
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import records_pb2

SERVICER = "grpc_classifier.classifier_pb2_grpc:add_ClassifierServicer_to_server"
SERVED = ("chaos/Back", "chaos/Front", "grpc/Clf")
CHURNED = ("chaos/Churn0", "chaos/Churn1")
# Refusals that mean the call did nothing; any other failure may have written.
REFUSED = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
           grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS,
           grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED,
           # the embedded store's disk is full: refused before anything is written
           grpc.StatusCode.RESOURCE_EXHAUSTED}
CALL_TIMEOUT_S = 15.0
CHANGES = ("rollout", "reconfigure", "scale")


def spec(key: str, version: str, replicas: int, mark: str) -> d.DeploymentSpec:
    application, name = key.split("/")
    config = d.ReplicaConfig(num_replicas=replicas, max_ongoing_requests=16,
                             user_config_json=json.dumps({"mark": mark}),
                             graceful_shutdown_wait_loop_s=0.2,
                             graceful_shutdown_timeout_s=5)
    if name == "Clf":  # the gRPC example's classifier: no reconfigure, so no user_config
        config.user_config_json = ""
        return d.DeploymentSpec(name=name, application=application, version=version,
                                import_path="grpc_classifier.app:Classifier",
                                route_prefix="/clf", grpc_servicer_functions=[SERVICER],
                                replica_config=config,
                                runtime=d.RuntimeOptions(working_dir=EXAMPLES))
    kind = name if name in ("Front", "Back") else "Churn"  # Churn0, Churn1, Echo
    made = d.DeploymentSpec(name=name, application=application, version=version,
                            import_path=f"chaos_app:{kind}",
                            replica_config=config,
                            runtime=d.RuntimeOptions(working_dir=CHAOS_APPS))
    if name != "Back":  # Back is reached by handles only
        made.route_prefix = "/front" if name == "Front" else f"/{name.lower()}"
    return made


def mark_of(spec: d.DeploymentSpec) -> str:
    mark = json.loads(spec.replica_config.user_config_json or "{}").get("mark", "")
    return f"{spec.version}|{spec.replica_config.num_replicas}|{mark}"


def final_state(records: list[records_pb2.DeploymentRecord]) -> dict[str, str]:
    return {f"{r.spec.application}/{r.spec.name}": mark_of(r.spec) for r in records}


class Operations:
    def __init__(self, client: ControllerClient, seed: int, every_s: tuple[float, float]
                 = (2.0, 5.0), served_changes: tuple[str, ...] = CHANGES,
                 steady: bool = False, served: tuple[str, ...] = SERVED,
                 churned: tuple[str, ...] = CHURNED) -> None:
        """`served`, `churned`: the deployments it changes (the Docker side
        has its own). `served_changes`: what may happen to the served deployments (the
        soak changes them in place only, so that their replicas live on).
        `steady` (the soak): the churned deployments are made by `setup` and
        then rolled and reconfigured, never scaled or deleted, so the cluster
        runs the same number of replicas between rollouts and what each
        process holds can be compared over time."""
        self.client = client
        self.served, self.churned = served, churned
        self.steady = steady
        self.served_changes = served_changes
        self.rng = random.Random(seed * 7919 + 1)
        self.every_s = every_s
        self.ops: list[Op] = []
        # What each deployment is now, as far as acknowledged calls say.
        self.current: dict[str, tuple[str, int, str] | None] = {}
        self._counter = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def setup(self) -> None:
        """Deploy the served deployments (v1, 2 replicas) and wait until RUNNING."""
        for key in self.served:
            self.deploy(key, "v1", 2)
        for key in self.churned if self.steady else ():
            self.deploy(key, "v1", 1)
        refused = [f"{op.key}: {op.error}" for op in self.ops if op.outcome != OK]
        if refused:
            raise RuntimeError(f"the served deployments were not deployed: {refused}")

    def start(self) -> Operations:
        self._thread = threading.Thread(target=self._loop, name="chaos-ops", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[Op]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(CALL_TIMEOUT_S * 3)
        return self.ops

    def _loop(self) -> None:
        while not self._stop.wait(self.rng.uniform(*self.every_s)):
            key = self.rng.choice(self.served + self.churned)
            now = self.current.get(key)
            if key in self.churned and now is not None and self.rng.random() < 0.4 \
                    and not self.steady:
                self.delete(key)
                continue
            version, replicas, _ = now or ("v1", 1, "")
            changes = self.served_changes if key in self.served else \
                ("rollout", "reconfigure") if self.steady else CHANGES
            change = self.rng.choice(changes)
            if change == "rollout":
                version = f"v{self._counter + 2}"
            elif change == "scale":
                replicas = self.rng.randint(1, 3)
            self.deploy(key, version, replicas)

    def _mark(self) -> str:
        self._counter += 1
        return f"m{self._counter}"

    def deploy(self, key: str, version: str, replicas: int) -> None:
        mark = self._mark()
        wanted = spec(key, version, replicas, mark)
        op = self._call("deploy", key, mark_of(wanted), lambda: self.client.deploy(wanted))
        if op.outcome == OK:
            self.current[key] = (version, replicas, mark)

    def delete(self, key: str) -> None:
        application, name = key.split("/")
        op = self._call("delete", key, "", lambda: self.client.delete([name], application))
        if op.outcome == OK:
            self.current[key] = None

    def _call(self, kind: str, key: str, value: str, call) -> Op:
        invoked = time.time()
        outcome, error = OK, ""
        try:
            call()
        except ControllerError as e:
            outcome = FAILED if e.code in REFUSED else UNKNOWN
            error = f"{e.code.name}: {e.details}"[:300]
        except Exception as e:
            outcome, error = UNKNOWN, f"{type(e).__name__}: {e}"[:300]
        op = Op(key, kind, value, invoked, time.time(), outcome, error)
        self.ops.append(op)
        return op
