"""Time from a replica becoming RUNNING to the first proxyless call it answers.

Used by bench/grpc_plane.py. A proxyless client (xds:///clf, the classifier
example, whose replies name the replica's pid) calls back to back in a
process of its own and prints the moment it first hears from each replica;
the deployment is scaled up one replica at a time, and the controller is
polled for the moment each new replica turns RUNNING.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from servefleet._private.xds_bootstrap import render
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
SERVICER = "grpc_classifier.classifier_pb2_grpc:add_ClassifierServicer_to_server"


def _spec(replicas: int) -> d.DeploymentSpec:
    return d.DeploymentSpec(
        name="Classifier", application="clf", import_path="grpc_classifier.app:Classifier",
        grpc_servicer_functions=[SERVICER], runtime=d.RuntimeOptions(working_dir=str(EXAMPLES)),
        replica_config=d.ReplicaConfig(num_replicas=replicas))


def _running(client: ControllerClient) -> dict[str, float]:
    return {r.record.handle.split(":")[0]: time.time() for r in client.replicas("clf")
            if r.state == replica_pb2.REPLICA_STATE_RUNNING}


def measure(controller: str, steps: int = 5) -> list[float]:
    """Seconds from RUNNING to the first call, for `steps` replicas added one by one."""
    with ControllerClient(controller) as client:
        client.deploy(_spec(1))
        while not _running(client):
            time.sleep(0.05)
        env = {**os.environ, "GRPC_XDS_BOOTSTRAP_CONFIG": render([controller])}
        watcher = subprocess.Popen([sys.executable, __file__, "--client"], env=env,
                                   stdout=subprocess.PIPE, text=True)
        assert watcher.stdout is not None
        first: dict[str, float] = {}
        json.loads(watcher.stdout.readline())  # the first replica answers
        delays = []
        try:
            for replicas in range(2, steps + 2):
                known = _running(client)
                client.deploy(_spec(replicas))
                seen: dict[str, float] = {}
                while len(seen) <= len(known):
                    for pid, at in _running(client).items():
                        seen.setdefault(pid, at)
                    time.sleep(0.005)
                (new,) = set(seen) - set(known)
                while new not in first:
                    line = json.loads(watcher.stdout.readline())
                    first[line["replica"]] = line["t"]
                delays.append(first[new] - seen[new])
        finally:
            watcher.terminate()
            watcher.wait()
            client.delete(["Classifier"], "clf")
    return delays


async def _client() -> None:
    import grpc

    sys.path.insert(0, str(EXAMPLES))
    from grpc_classifier import classifier_pb2, classifier_pb2_grpc

    seen: set[str] = set()
    async with grpc.aio.insecure_channel("xds:///clf") as channel:
        stub = classifier_pb2_grpc.ClassifierStub(channel)

        async def caller() -> None:
            while True:
                reply = await stub.Predict(classifier_pb2.PredictRequest(text="x"), timeout=10)
                if reply.replica not in seen:
                    seen.add(reply.replica)
                    print(json.dumps({"replica": reply.replica, "t": time.time()}), flush=True)

        await asyncio.gather(*[caller() for _ in range(4)])


if __name__ == "__main__" and sys.argv[1:] == ["--client"]:
    asyncio.run(_client())
