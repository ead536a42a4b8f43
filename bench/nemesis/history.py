"""What a chaos run records, and its JSON form.

Times are seconds on this machine's wall clock (time.time()): every
process of a run shares it, so a client's request times, the nemesis's
fault windows and the controllers' log lines can be compared directly.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# An operation's outcome, as the client saw it.
OK = "ok"            # acknowledged: it happened, and must be in the final state
FAILED = "failed"    # refused for certain (a bad request, a failed precondition)
UNKNOWN = "unknown"  # timed out or unavailable: it may or may not have happened


@dataclass
class Op:
    """One Deploy (a create, rollout or scale change) or Delete of a deployment."""

    key: str          # "application/deployment"
    kind: str         # "deploy" or "delete"
    value: str        # the deployment's mark after it ("" after a delete)
    invoked: float
    completed: float
    outcome: str      # OK, FAILED or UNKNOWN
    error: str = ""


@dataclass
class Request:
    """One request of the mixed traffic, as its client saw it."""

    kind: str               # http, stream, compose, websocket, grpc, xds
    start: float
    end: float
    ok: bool
    # The processes it crossed or may have crossed: "proxy:<name>" and
    # "deployment:<application>/<name>" for the deployments it reaches.
    path: list[str]
    error: str = ""


@dataclass
class Fault:
    """One fault the nemesis caused, from its start to when it was healed
    (a SIGKILL's window ends when it was sent: the process is gone)."""

    kind: str         # kill, stop, restart, quorum, partition, netem, disk-full
    # "controller:<name>", "proxy:<name>", "replica:<app>/<deployment>/<id>", "etcd:<name>"
    target: str
    start: float
    end: float
    note: str = ""


@dataclass
class Action:
    """Something a controller did as leader (a line of its log bearing its
    term, the fencing revision it leads with)."""

    time: float
    controller: str
    term: int
    what: str


@dataclass
class Write:
    """A store revision a leader wrote, as the store's history of the
    leaders' journal key says (controller/election.py, FencedStore)."""

    revision: int
    term: int
    controller: str  # the writer's address


@dataclass
class Start:
    """A replica process the runtime started, by its own record (the kernel's
    start time), and the term whose leader wrote that record."""

    replica_id: str
    term: int
    time: float


@dataclass
class Final:
    """The cluster after the nemesis stopped."""

    nemesis_end: float
    # Every deployment in the store: key -> its mark.
    state: dict[str, str] = field(default_factory=dict)
    # When every deployment was first RUNNING at its target after the
    # nemesis stopped (None: never, within the wait).
    converged_at: float | None = None
    # Replica processes or containers no record accounts for, and records
    # whose process is gone.
    leftovers: list[str] = field(default_factory=list)
    waited_s: float = 0.0


@dataclass
class History:
    seed: int
    schedule_digest: str
    options: dict[str, Any] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    starts: list[Start] = field(default_factory=list)
    final: Final | None = None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def load(cls, path: str | Path) -> History:
        raw = json.loads(Path(path).read_text())
        return cls(seed=raw["seed"], schedule_digest=raw["schedule_digest"],
                   options=raw.get("options", {}),
                   ops=[Op(**o) for o in raw.get("ops", [])],
                   requests=[Request(**r) for r in raw.get("requests", [])],
                   faults=[Fault(**f) for f in raw.get("faults", [])],
                   actions=[Action(**a) for a in raw.get("actions", [])],
                   writes=[Write(**w) for w in raw.get("writes", [])],
                   starts=[Start(**s) for s in raw.get("starts", [])],
                   final=Final(**raw["final"]) if raw.get("final") else None)
