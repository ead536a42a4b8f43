"""A new term's grace for the replicas it inherited (TAKEOVER_SETTLE_S).

A new term does not stop a replica it inherited, while it still has a goal,
for TAKEOVER_SETTLE_S after taking office. Clients that route by the replica
set on their own (proxyless xDS, proxies, handles) lost their stream with
the old term and may still be in gRPC's reconnect backoff (1 s, then x1.6
per failed try: 6.6 s after a 9 s outage): until they reconnect they know
only the replicas of before, and a rollout or scale-down that ends sooner
leaves them calling replicas that are gone (the chaos suite's seed 2).
"""

from __future__ import annotations

import logging

from servefleet.v1 import records_pb2

from .planner import RECOVERING, RUNNING, ReplicaView

logger = logging.getLogger(__name__)

TAKEOVER_SETTLE_S = 10.0


class TakeoverGrace:
    def __init__(self, settle_s: float = TAKEOVER_SETTLE_S) -> None:
        self._settle_s = settle_s
        # Replicas this term found at its start, not stopped (but failed ones)
        # before `_settled_at`; those it held, for one log line each.
        self._inherited: set[str] = set()
        self._settled_at = 0.0
        self._held: set[str] = set()

    def began(self, now: float) -> None:
        """The term took office at `now` (before it `inherited` anything)."""
        self._settled_at = now + self._settle_s

    def inherited(self, replica_id: str) -> None:
        self._inherited.add(replica_id)

    def hold(self, key: tuple[str, str], view: ReplicaView,
             goal: records_pb2.DeploymentRecord | None, now: float) -> bool:
        """Whether to put off stopping the replica: it was serving when this
        term began, serves still, and its deployment has a goal whose replicas
        clients are yet to hear of."""
        if now >= self._settled_at:
            self._inherited.clear()
            self._held.clear()
            return False
        replica_id = view.replica_id
        if replica_id not in self._inherited:
            return False
        if (goal is None or goal.deleted or view.failure
                or view.state not in (RUNNING, RECOVERING)):
            return False
        if replica_id not in self._held:
            self._held.add(replica_id)
            logger.info("replica %s of %s/%s: stopped %.1f s from now, once clients that "
                        "lost their stream with the last term can have reconnected",
                        replica_id, *key, self._settled_at - now)
        return True
