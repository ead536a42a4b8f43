"""Nodes the Kubernetes runtime takes for lost, from its Pods alone (the
controller may not read Node objects: its Role is namespaced).

Kubernetes itself notices a node whose kubelet stopped only after the node
monitor's grace period (50 s by default) and evicts its Pods minutes later
(their 300 s toleration of `unreachable`); until then the node looks Ready
and the scheduler keeps placing Pods on it. A live kubelet takes a Pod bound
to its node within a second or two: it writes the Pod's status (its
`startTime` and `hostIP`) before it mounts anything or makes a sandbox. So
a Pod bound to a node that has not written its status within
ACK_TIMEOUT_S says that node's kubelet is gone: the node is lost for
LOST_FOR_S, during which

- a start's Pod bound there is deleted and made again away from it (a
  required node affinity `kubernetes.io/hostname NotIn` the lost nodes);
- the Pods already there are reported gone (the controller replaces
  them at once, without waiting for its health checks to fail);
- stopping a Pod there deletes it at once (grace period 0): no kubelet
  will confirm a graceful deletion.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable
from typing import Any

ACK_TIMEOUT_S = 20.0
LOST_FOR_S = 120.0
HOSTNAME = "kubernetes.io/hostname"


def node_of(pod: dict[str, Any] | None) -> str:
    return ((pod or {}).get("spec") or {}).get("nodeName") or ""


def acknowledged(pod: dict[str, Any]) -> bool:
    """Whether a kubelet has written the Pod's status (its first sync)."""
    status = pod.get("status") or {}
    return bool(status.get("startTime") or status.get("hostIP")
                or status.get("phase") not in (None, "Pending"))


class LostNodes:
    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 lost_for_s: float = LOST_FOR_S) -> None:
        self._clock = clock
        self._lost_for_s = lost_for_s
        self._since: dict[str, float] = {}

    def mark(self, node: str) -> None:
        self._since[node] = self._clock()

    def names(self) -> set[str]:
        now = self._clock()
        for node, since in list(self._since.items()):
            if now - since >= self._lost_for_s:
                del self._since[node]
        return set(self._since)

    def holds(self, pod: dict[str, Any] | None) -> bool:
        """Whether the Pod is bound to a lost node."""
        node = node_of(pod)
        return bool(node) and node in self.names()


def avoiding(pod: dict[str, Any], nodes: Iterable[str]) -> dict[str, Any]:
    """`pod` with a required node affinity that keeps it off `nodes` (added
    to each of its node selector terms: the terms are alternatives)."""
    names = sorted(nodes)
    if not names:
        return pod
    pod = copy.deepcopy(pod)
    away = {"key": HOSTNAME, "operator": "NotIn", "values": names}
    required = (pod["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})
                .setdefault("requiredDuringSchedulingIgnoredDuringExecution", {}))
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({"matchExpressions": []})
    for term in terms:
        term.setdefault("matchExpressions", []).append(away)
    return pod
