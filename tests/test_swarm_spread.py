"""The Swarm runtime's own spreading of a deployment's replicas (pure)."""

from __future__ import annotations

from servefleet.controller.runtime.swarm_spread import meets, placed_values, spread_constraints


def node(node_id: str, zone: str | None, *, state: str = "ready",
         availability: str = "active", role: str = "worker", **labels: str) -> dict:
    all_labels = {**labels, **({"zone": zone} if zone is not None else {})}
    return {"ID": node_id, "Status": {"State": state},
            "Spec": {"Availability": availability, "Role": role, "Labels": all_labels},
            "Description": {"Hostname": f"host-{node_id}"}}


NODES = [node("m", "a", role="manager"), node("w1", "b"), node("w2", "b", gpu="true")]
SPREAD = ["node.labels.zone"]


def on(*ids: str, spread: list[str] = SPREAD) -> list[dict[str, str]]:
    by_id = {n["ID"]: n for n in NODES}
    return [placed_values([], by_id[i], spread) for i in ids]


def test_each_new_replica_goes_to_the_value_with_the_fewest() -> None:
    assert spread_constraints(SPREAD, [], NODES, []) == ["node.labels.zone == a"]
    assert spread_constraints(SPREAD, [], NODES, on("m")) == ["node.labels.zone == b"]
    assert spread_constraints(SPREAD, [], NODES, on("m", "w1")) == ["node.labels.zone == a"]
    assert spread_constraints(SPREAD, [], NODES, on("m", "m", "w2")) == [
        "node.labels.zone == b"]


def test_a_replica_not_placed_yet_counts_where_its_constraint_sends_it() -> None:
    """Replicas started together: the second sees the first's choice at once."""
    first = placed_values(["node.labels.zone == a"], None, SPREAD)
    assert first == {"node.labels.zone": "a"}
    assert spread_constraints(SPREAD, [], NODES, [first]) == ["node.labels.zone == b"]
    assert placed_values([], None, SPREAD) == {"node.labels.zone": ""}


def test_only_nodes_that_can_take_it_count() -> None:
    down = [node("m", "a", state="down"), *NODES[1:]]
    assert spread_constraints(SPREAD, [], down, []) == ["node.labels.zone == b"]
    paused = [node("m", "a", availability="pause"), *NODES[1:]]
    assert spread_constraints(SPREAD, [], paused, []) == ["node.labels.zone == b"]
    # The deployment's own constraints first: only gpu nodes (zone b).
    assert spread_constraints(SPREAD, ["node.labels.gpu == true"], NODES, []) == [
        "node.labels.zone == b"]
    assert spread_constraints(SPREAD, ["node.role != manager"], NODES, []) == [
        "node.labels.zone == b"]
    assert spread_constraints(SPREAD, [], [], []) == []


def test_unlabelled_nodes_and_other_attributes_are_left_to_swarm() -> None:
    unlabelled = [node("x", None), node("y", None)]
    assert spread_constraints(SPREAD, [], unlabelled, []) == []
    assert spread_constraints(["node.hostname"], [], NODES, []) == []
    # Two attributes: the second among the nodes the first chose.
    racks = [node("m", "a", rack="1"), node("w1", "b", rack="1"), node("w2", "b", rack="2")]
    both = [*SPREAD, "node.labels.rack"]
    assert spread_constraints(both, [], racks, [placed_values([], racks[0], both)]) == [
        "node.labels.zone == b", "node.labels.rack == 1"]


def test_constraints_this_module_cannot_read_do_not_exclude() -> None:
    assert meets(NODES[0], ["node.labels.zone == a", "node.hostname == host-m"])
    assert not meets(NODES[0], ["node.labels.zone != a"])
    assert meets(NODES[0], ["node.unknown == x"])
