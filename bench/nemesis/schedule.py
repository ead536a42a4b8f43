"""The nemesis's plan: which fault, when, for how long, a pure function of
the seed (a run is reproduced by its seed; the plan's digest is printed and
saved with the history).

A step names a fault and a target role; which process of that role (the
second proxy, a replica of a deployment) is chosen when the step runs,
from the processes alive then, with the step's own `pick` number, so the
same seed picks the same way whenever the same processes are alive.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass

# kind: what is done; role: to which process.
FAULTS: dict[str, tuple[str, str]] = {
    "kill-leader": ("kill", "leader"),
    "kill-standby": ("kill", "standby"),
    "kill-proxy": ("kill", "proxy"),
    "kill-replica": ("kill", "replica"),
    "kill-etcd": ("kill", "etcd"),
    "stop-leader": ("stop", "leader"),
    "stop-standby": ("stop", "standby"),
    "stop-proxy": ("stop", "proxy"),
    "stop-replica": ("stop", "replica"),
    "stop-etcd": ("stop", "etcd"),
    "restart-etcd": ("restart", "etcd"),
    "lose-quorum": ("quorum", "etcd"),
    "partition-leader": ("partition", "leader"),
    "partition-proxy": ("partition", "proxy"),
    "netem-leader": ("netem", "leader"),
    "disk-full": ("disk-full", "embedded"),
}
# --short: one of each kind of fault (a seed orders them and picks targets).
SHORT = ("kill-leader", "stop-replica", "kill-proxy", "restart-etcd", "lose-quorum",
         "partition-leader", "netem-leader", "disk-full", "kill-replica", "stop-standby")
# How long a fault holds before it is healed, in seconds (a kill: until the
# process is started again).
HOLD_S = (2.0, 6.0)


@dataclass(frozen=True)
class Step:
    at: float      # seconds after the nemesis starts
    fault: str     # a key of FAULTS
    hold: float    # seconds until it is healed
    pick: int      # which of the role's processes (modulo how many are alive)

    @property
    def kind(self) -> str:
        return FAULTS[self.fault][0]

    @property
    def role(self) -> str:
        return FAULTS[self.fault][1]


def plan(seed: int, duration_s: float, every_s: tuple[float, float] = (10.0, 20.0),
         faults: tuple[str, ...] = tuple(FAULTS), short: bool = False) -> list[Step]:
    """The steps of a run: a fault every `every_s` (uniform in the range)
    until `duration_s`, each drawn from `faults`; with `short`, each of
    SHORT once, in an order the seed decides. ValueError on an unknown fault."""
    unknown = [f for f in (SHORT if short else faults) if f not in FAULTS]
    if unknown:
        raise ValueError(f"unknown faults {unknown}; known: {', '.join(FAULTS)}")
    rng = random.Random(seed)
    order = list(SHORT) if short else []
    rng.shuffle(order)
    steps: list[Step] = []
    at = rng.uniform(*every_s) / 2
    while (order if short else at < duration_s):
        fault = order.pop(0) if short else rng.choice(faults)
        steps.append(Step(round(at, 3), fault, round(rng.uniform(*HOLD_S), 3),
                          rng.randrange(1 << 16)))
        at += rng.uniform(*every_s)
    return steps


def digest(steps: list[Step]) -> str:
    """A short fingerprint of a plan: two runs with the same one faced the same faults."""
    text = json.dumps([asdict(s) for s in steps], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
