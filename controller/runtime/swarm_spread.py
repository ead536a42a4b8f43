"""`runtime.placement.spread` for the Swarm runtime (pure).

Swarm's own spread preference balances the tasks of one service, and each
servefleet replica is a service with one task, so it would spread nothing.
The runtime spreads a deployment's replicas itself: for each spread
attribute (`node.labels.<name>`, the only kind Swarm spreads over), the new
replica gets a constraint naming the value that the fewest of the
deployment's running replicas have, among the values of the nodes that can
take it (ready, active, and meeting the deployment's own constraints);
ties go to the value that sorts first. Nodes without the label count as
their own value, "" (Swarm's rule too), which no constraint can name: they
are left to Swarm's choice when they win.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_CONSTRAINT = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*(==|!=)\s*(.+?)\s*$")


def node_value(node: Mapping[str, Any], attribute: str) -> str | None:
    """The node's value for a placement attribute; None when this module
    does not know the attribute (the constraint is then left to Swarm)."""
    spec, description = node.get("Spec", {}), node.get("Description", {})
    if attribute.startswith("node.labels."):
        return (spec.get("Labels") or {}).get(attribute[len("node.labels."):], "")
    if attribute.startswith("engine.labels."):
        engine = description.get("Engine", {}).get("Labels") or {}
        return engine.get(attribute[len("engine.labels."):], "")
    return {"node.id": node.get("ID", ""), "node.hostname": description.get("Hostname", ""),
            "node.role": spec.get("Role", ""),
            "node.platform.os": description.get("Platform", {}).get("OS", "")
            }.get(attribute)


def meets(node: Mapping[str, Any], constraints: Iterable[str]) -> bool:
    """Whether the node meets every constraint this module can read."""
    for constraint in constraints:
        found = _CONSTRAINT.match(constraint)
        if found is None:
            continue
        attribute, op, wanted = found.groups()
        value = node_value(node, attribute)
        if value is not None and (value == wanted) != (op == "=="):
            return False
    return True


def _eligible(node: Mapping[str, Any]) -> bool:
    return (node.get("Status", {}).get("State") == "ready"
            and node.get("Spec", {}).get("Availability") == "active")


def placed_values(service_constraints: Iterable[str], node: Mapping[str, Any] | None,
                  spread: Iterable[str]) -> dict[str, str]:
    """Where one of the deployment's replicas is, per spread attribute: the
    value its service's own constraint names (the runtime's choice, known at
    once, before Swarm places the task), else its node's."""
    named = {}
    for constraint in service_constraints:
        found = _CONSTRAINT.match(constraint)
        if found is not None and found.group(2) == "==":
            named[found.group(1)] = found.group(3)
    return {attribute: named.get(attribute) or (node_value(node, attribute) or ""
                                                if node is not None else "")
            for attribute in spread}


def spread_constraints(spread: Iterable[str], constraints: list[str],
                       nodes: Sequence[Mapping[str, Any]],
                       placed: Iterable[Mapping[str, str]]) -> list[str]:
    """The constraints that put the next replica where its deployment has the
    fewest, one per spread attribute; `placed`: where each of the
    deployment's replicas is (placed_values)."""
    placed = list(placed)
    candidates = [n for n in nodes if _eligible(n) and meets(n, constraints)]
    added: list[str] = []
    for attribute in spread:
        if not attribute.startswith("node.labels."):
            continue
        values = sorted({node_value(n, attribute) or "" for n in candidates})
        if not values:
            break
        counts = Counter(p.get(attribute, "") for p in placed)
        fewest = min(values, key=lambda v: (counts[v], v))
        if not fewest:  # unlabelled nodes: no constraint names them
            break
        added.append(f"{attribute} == {fewest}")
        # The next attribute spreads within this value (Swarm's nesting).
        candidates = [n for n in candidates if node_value(n, attribute) == fewest]
        placed = [p for p in placed if p.get(attribute, "") == fewest]
    return added
