"""`runtime.placement` for the Kubernetes runtime (pure): Docker's constraint
syntax, which deployments already use for Swarm, as a Pod's node affinity
and topology spread.

- A constraint `ATTRIBUTE == VALUE` (or `!=`) is a requirement of the
  Pod's node affinity (operator In, or NotIn), all of them on one node
  selector term (they must all hold, as Swarm's do). The attribute is a
  node label: `node.labels.NAME` is the node label NAME;
  `node.hostname` is `kubernetes.io/hostname` and `node.platform.os`
  `kubernetes.io/os`, the labels every kubelet sets.
- A spread attribute (`node.labels.zone`, `node.hostname`) is a topology
  spread constraint over that label among the deployment's Pods (maxSkew 1,
  ScheduleAnyway: a preference, as Swarm's spread is).
- Attributes with no Kubernetes label (`node.id`, `node.role`,
  `engine.labels.*`) are refused, naming the constraint (the start fails
  with it: a deployment is never placed as if it had none).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

_CONSTRAINT = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|!=)\s*(.+?)\s*$")
_WELL_KNOWN = {"node.hostname": "kubernetes.io/hostname", "node.platform.os": "kubernetes.io/os"}


class PlacementError(ValueError):
    """A placement the Kubernetes runtime cannot express."""


def node_label(attribute: str) -> str:
    """The node label a placement attribute names (PlacementError if none)."""
    if attribute.startswith("node.labels.") and len(attribute) > len("node.labels."):
        return attribute[len("node.labels."):]
    if attribute in _WELL_KNOWN:
        return _WELL_KNOWN[attribute]
    raise PlacementError(f"runtime.placement: {attribute!r} has no Kubernetes node label "
                         "(node.labels.NAME, node.hostname and node.platform.os have)")


def affinity(constraints: Sequence[str]) -> dict[str, Any] | None:
    """The Pod's `affinity` for `constraints`, or None when there are none."""
    requirements = []
    for constraint in constraints:
        parsed = _CONSTRAINT.match(constraint)
        if parsed is None:
            raise PlacementError(f"runtime.placement.constraints: {constraint!r} is not "
                                 "ATTRIBUTE == VALUE or ATTRIBUTE != VALUE")
        attribute, operator, value = parsed.groups()
        requirements.append({"key": node_label(attribute),
                             "operator": "In" if operator == "==" else "NotIn",
                             "values": [value]})
    if not requirements:
        return None
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": requirements}]}}}


def spread(attributes: Sequence[str], match_labels: dict[str, str]) -> list[dict[str, Any]]:
    """Topology spread constraints over `attributes` among the Pods that
    `match_labels` selects (the deployment's)."""
    return [{"maxSkew": 1, "topologyKey": node_label(attribute),
             "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": {"matchLabels": dict(match_labels)}}
            for attribute in attributes]
