"""The Kubernetes runtime's objects: one bare Pod per replica, the Secret
holding its settings file (and TLS files), and the ConfigMap that owns a
deployment's Pods, built from a ReplicaLaunch. Pure functions, no API calls
(docs/kubernetes.md says why a bare Pod, not a Deployment).

- The Pod is `servefleet-<cluster>-<replica id>` (a DNS label: lower case,
  at most 63 characters; other names are lower-cased and cut, and get a
  hash of the exact names), so a create retried after an unknown outcome
  answers AlreadyExists rather than starting a second replica.
- Labels carry the identity (io.servefleet/cluster, application,
  deployment, replica-id, version). A value a label cannot hold (over 63
  characters, or characters outside [A-Za-z0-9-_.]) is a hash in the label
  and whole in an annotation of the same key; `identity` reads either back.
- restartPolicy Never (the controller decides what restarts), an owner
  reference to the deployment's ConfigMap, `servefleet-<cluster>-<app>-
  <deployment>` (lower case; a hash added when the names are not a DNS
  name already): deleting it deletes the deployment's Pods,
  terminationGracePeriodSeconds from the drain's wait loop and timeout, a
  readiness probe on the replica's control port (ready once it listens).
- Fixed ports, as a Pod has its own address: 7400 control, 7401 HTTP, 7402
  metrics, 7403 gRPC.
- Resources: num_cpus → cpu, memory_bytes → memory, num_gpus →
  nvidia.com/gpu, each as request and limit; runtime.placement → node
  affinity and topology spread (kubernetes_placement.py).
- The code: the launch's image (working_dir a path inside it), or the
  runtime's image with working_dir from a hostPath volume (nodes that share
  files with the controller, as the nodes of scripts/k8s do).
- The Secret's files sit side by side in SETTINGS_DIR: settings.json and,
  with replica TLS, ca.crt, replica.crt and replica.key (the settings name
  them there).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servefleet._private.replica_command import MODULE, REPLICA_ENV, ReplicaCommand
from servefleet._private.security.certs import role_server_name
from servefleet._private.security.tls import TlsFiles

from .base import ReplicaLaunch, RuntimeReplica
from .kubernetes_placement import affinity, spread

GROUP = "io.servefleet/"
IDENTITY = ("cluster", "application", "deployment", "replica-id", "version")
CONTROL_PORT, HTTP_PORT, METRICS_PORT, GRPC_PORT = 7400, 7401, 7402, 7403
PULL_POLICIES = ("IfNotPresent", "Never", "Always")  # a container's imagePullPolicy
# A container waiting for one of these will not start by itself (restartPolicy
# Never): its replica is reported gone, so the controller's backoff applies.
GIVEN_UP = ("ErrImageNeverPull", "InvalidImageName", "ImagePullBackOff",
            "CreateContainerConfigError")
SETTINGS_DIR = "/run/servefleet"
# The name every controller certificate `servefleet certs init` makes
# carries, and the controllers expect of each other (server.py).
CONTROLLER_SERVER_NAME = role_server_name("controller")
SETTINGS_PATH = f"{SETTINGS_DIR}/settings.json"
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")  # a subdomain; a label: no '.'


@dataclass(frozen=True)
class Owner:
    """The object a deployment's Pods belong to (deleting it deletes them)."""

    api_version: str
    kind: str
    name: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name,
                "uid": self.uid, "controller": True, "blockOwnerDeletion": True}


def _digest(value: str, length: int = 16) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:length]


def _dns_name(names: list[str], length: int) -> str:
    """servefleet-<names joined by '-'> if that is a DNS name of at most
    `length` characters (a label, without '.', at 63); else lower case,
    other characters as '-', cut, and a hash of the exact names added (so
    Echo and echo still differ)."""
    name = "-".join(["servefleet", *names])
    if len(name) <= length and _DNS_NAME.match(name) and (length > 63 or "." not in name):
        return name
    readable = re.sub(r"[^a-z0-9]+", "-", name.lower())[:length - 11].strip("-")
    return f"{readable}-{_digest(json.dumps(names), 10)}"


def pod_name(cluster: str, replica_id: str) -> str:
    """The Pod's name (a DNS label, as its hostname): servefleet-<cluster>-
    <replica id>, made one as _dns_name says."""
    return _dns_name([cluster, replica_id], 63)


def label_value(value: str) -> str:
    """`value` if a label can hold it, else a hash (prefixed h-)."""
    return value if _LABEL_VALUE.match(value) else f"h-{_digest(value, 32)}"


def identity_metadata(launch: ReplicaLaunch) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) of a replica's identity."""
    values = dict(zip(IDENTITY, (launch.cluster, launch.application, launch.deployment,
                                 launch.replica_id, launch.version), strict=True))
    labels = {GROUP + k: label_value(v) for k, v in values.items()}
    annotations = {GROUP + k: v for k, v in values.items() if label_value(v) != v}
    return labels, annotations


def identity(metadata: dict[str, Any]) -> dict[str, str]:
    """The identity a Pod's labels and annotations carry (annotations win)."""
    labels, annotations = metadata.get("labels") or {}, metadata.get("annotations") or {}
    return {k: annotations.get(GROUP + k, labels.get(GROUP + k, "")) for k in IDENTITY}


def selector(cluster: str, application: str = "", deployment: str = "") -> str:
    """A labelSelector for the Pods of `cluster` (of one deployment, given one)."""
    parts = [("cluster", cluster)]
    if deployment:
        parts += [("application", application), ("deployment", deployment)]
    return ",".join(f"{GROUP}{k}={label_value(v)}" for k, v in parts)


def owner_name(cluster: str, application: str, deployment: str) -> str:
    """The name of the ConfigMap owning a deployment's Pods: servefleet-
    <cluster>-<application>-<deployment>, made a DNS name as _dns_name says."""
    return _dns_name([cluster, application, deployment], 253)


def deployment_owner(cluster: str, application: str, deployment: str) -> dict[str, Any]:
    """The ConfigMap a deployment's Pods name as their owner (its labels and
    data say whose it is)."""
    values = {"cluster": cluster, "application": application, "deployment": deployment}
    metadata: dict[str, Any] = {
        "name": owner_name(cluster, application, deployment),
        "labels": {GROUP + k: label_value(v) for k, v in values.items()}}
    if odd := {GROUP + k: v for k, v in values.items() if label_value(v) != v}:
        metadata["annotations"] = odd
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": values}


def owner_of(config_map: dict[str, Any]) -> Owner:
    """The Owner a ConfigMap read from the API server is."""
    metadata = config_map["metadata"]
    return Owner("v1", "ConfigMap", metadata["name"], metadata["uid"])


def secret_files(settings: dict[str, Any], tls: TlsFiles | None) -> dict[str, bytes]:
    """The Secret's files by name: settings.json and, with `tls`, the replica's
    certificate files beside it (the settings name them where the Pod has them).
    With `tls` the replica expects CONTROLLER_SERVER_NAME in the controllers'
    certificates: they are reached at Pod IPs, which no certificate names."""
    files: dict[str, bytes] = {}
    if tls is not None:
        ca, cert, key = tls.loaded().pem or (b"", b"", b"")
        files = {"ca.crt": ca, "replica.crt": cert, "replica.key": key}
        inside = TlsFiles(Path(SETTINGS_DIR, "ca.crt"), Path(SETTINGS_DIR, "replica.crt"),
                          Path(SETTINGS_DIR, "replica.key"))
        settings = {**settings, "tls": inside.as_dict(),
                    "controller_server_name": CONTROLLER_SERVER_NAME}
    return {**files, "settings.json": json.dumps(settings).encode()}


def _quantity_cpu(cores: float) -> str:
    return f"{math.ceil(cores * 1000)}m"


def resources(wanted: dict[str, float]) -> dict[str, Any]:
    """Requests and limits (equal) from num_cpus, memory_bytes, num_gpus."""
    out: dict[str, str] = {}
    if wanted.get("num_cpus"):
        out["cpu"] = _quantity_cpu(float(wanted["num_cpus"]))
    if wanted.get("memory_bytes"):
        out["memory"] = str(int(wanted["memory_bytes"]))
    if wanted.get("num_gpus"):
        out["nvidia.com/gpu"] = str(math.ceil(float(wanted["num_gpus"])))
    unknown = sorted(set(wanted) - {"num_cpus", "memory_bytes", "num_gpus"})
    if unknown:
        raise ValueError(f"resources the Kubernetes runtime cannot map: {', '.join(unknown)}")
    return {"requests": dict(out), "limits": dict(out)} if out else {}


def command(launch: ReplicaLaunch, http_tls: bool = False) -> ReplicaCommand:
    return ReplicaCommand(
        cluster=launch.cluster, application=launch.application, deployment=launch.deployment,
        replica_id=launch.replica_id, version=launch.version, host="0.0.0.0",
        control_port=CONTROL_PORT, http_port=HTTP_PORT, metrics_port=METRICS_PORT,
        grpc_port=GRPC_PORT if launch.serves_grpc else 0, http_tls=int(http_tls),
        config_file=SETTINGS_PATH)


def build_pod(launch: ReplicaLaunch, *, image: str, owner: Owner | None = None,
              env: dict[str, str] | None = None, http_tls: bool = False,
              mount_working_dir: bool = True, pull_policy: str = "IfNotPresent"
              ) -> dict[str, Any]:
    """The Pod of one replica. `image` is the runtime's (the launch's wins);
    `env` what the runtime adds to every replica's environment."""
    name = pod_name(launch.cluster, launch.replica_id)
    labels, annotations = identity_metadata(launch)
    # A drain serves one wait loop, then waits at most the timeout for requests in flight.
    grace = (float(launch.settings.get("graceful_shutdown_timeout_s", 20.0))
             + float(launch.settings.get("graceful_shutdown_wait_loop_s", 2.0)))
    argv = command(launch, http_tls).argv()
    merged = {**REPLICA_ENV, **(env or {}), **launch.env}
    container: dict[str, Any] = {
        "name": "replica", "image": launch.image or image, "imagePullPolicy": pull_policy,
        "command": ["python3", "-m", MODULE, *argv],
        "env": [{"name": k, "value": v} for k, v in merged.items()],
        "ports": [{"name": n, "containerPort": p} for n, p in (
            ("control", CONTROL_PORT), ("http", HTTP_PORT), ("metrics", METRICS_PORT),
            *((("grpc", GRPC_PORT),) if launch.serves_grpc else ()))],
        "readinessProbe": {"tcpSocket": {"port": CONTROL_PORT}, "periodSeconds": 2},
        "volumeMounts": [{"name": "settings", "mountPath": SETTINGS_DIR, "readOnly": True}],
    }
    if limits := resources(launch.resources):
        container["resources"] = limits
    volumes: list[dict[str, Any]] = [{"name": "settings", "secret": {
        "secretName": name, "defaultMode": 0o400}}]
    if launch.working_dir:
        container["workingDir"] = launch.working_dir
        if mount_working_dir and not launch.image:
            volumes.append({"name": "code", "hostPath": {"path": launch.working_dir,
                                                        "type": "Directory"}})
            container["volumeMounts"].append({"name": "code", "mountPath": launch.working_dir,
                                              "readOnly": True})
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    if owner is not None:
        metadata["ownerReferences"] = [owner.reference()]
    spec: dict[str, Any] = {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": max(1, math.ceil(grace)),
        "enableServiceLinks": False, "automountServiceAccountToken": False,
        "containers": [container], "volumes": volumes}
    if nodes := affinity(launch.constraints):
        spec["affinity"] = nodes
    if launch.spread:
        deployment = {GROUP + k: labels[GROUP + k] for k in IDENTITY[:3]}
        spec["topologySpreadConstraints"] = spread(launch.spread, deployment)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def settings_secret(pod: dict[str, Any], pod_uid: str, files: dict[str, bytes]) -> dict[str, Any]:
    """The Secret the Pod's settings volume names, owned by the Pod (so it
    goes when the Pod goes): `files` by name (settings.json, TLS files)."""
    metadata = pod["metadata"]
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {
        "name": metadata["name"], "labels": dict(metadata["labels"]),
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": metadata["name"],
                             "uid": pod_uid, "blockOwnerDeletion": True}]},
        "data": {k: base64.b64encode(v).decode() for k, v in files.items()}}


def replica_from_pod(pod: dict[str, Any]) -> RuntimeReplica:
    """What the runtime reports of a Pod: its identity, its addresses at the
    Pod IP (none before it has one), alive until its container terminated,
    the Pod ended or its container waits for what will not come (GIVEN_UP);
    then the exit code, when the container has one."""
    metadata, status = pod["metadata"], pod.get("status") or {}
    who = identity(metadata)
    address = status.get("podIP", "")
    argv = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("command") or []
    parsed = ReplicaCommand.parse(argv)
    terminated = next((c.get("state", {}).get("terminated") for c in
                       status.get("containerStatuses") or [] if c.get("name") == "replica"),
                      None)
    ended = (status.get("phase") in ("Succeeded", "Failed") or terminated is not None
             or waiting_reason(pod).split(":")[0] in GIVEN_UP)

    def at(port: int) -> str:
        return f"{address}:{port}" if address and port else ""

    return RuntimeReplica(
        replica_id=who["replica-id"], cluster=who["cluster"], application=who["application"],
        deployment=who["deployment"], version=who["version"], handle=metadata["name"],
        control_address=at(CONTROL_PORT), http_address=at(HTTP_PORT),
        metrics_address=at(METRICS_PORT),
        grpc_address=at(parsed.grpc_port if parsed else 0),
        http_tls=bool(parsed and parsed.http_tls), alive=not ended,
        exit_code=terminated.get("exitCode") if terminated else None)


def waiting_reason(pod: dict[str, Any] | None) -> str:
    """Why the replica's container has not started ("REASON: message"), or ""."""
    for container in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if container.get("name") == "replica" and waiting.get("reason"):
            return f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
    return ""


def pending_reason(pod: dict[str, Any] | None) -> str:
    """Why a Pod has no address yet, as its status says (a condition that does
    not hold, a waiting container, or its phase)."""
    if pod is None:
        return "the API server's watch never showed it"
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") == "False" and condition.get("message"):
            return f"{condition.get('reason') or condition['type']}: {condition['message']}"
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
    return f"phase {status.get('phase') or 'unknown'}"
