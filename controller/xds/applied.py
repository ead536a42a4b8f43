"""Which replica sets an xDS client may route by, for the drain fence.

An xDS client (proxyless gRPC, Envoy) routes by the endpoints of the EDS
responses it took: the last one it ACKed, and possibly any sent since (a
client applies a response before it ACKs it, and under gRFC A46 applies
the valid resources of one it NACKs). So, per stream, this keeps what each
such response's resources were built from (deployment, version, replica-set
snapshot id): the one last ACKed, then those sent after it, until the client
ACKs or NACKs a later one. It names the union, per deployment, to the
leader's DrainFence, as an HTTP proxy names its sets in its load reports
(whole at first, then what changed); the fence holds a replica's drain
until no xDS client with a stream open may still route to it.

A resource the client holds whose version is still current holds the
current snapshot's endpoints (the version is a digest of the content), even
when the snapshot changed in ways the resource does not show (a replica
with no gRPC port leaving, say): it names the current snapshot. What cannot
be known (a client that resumes with a version this leader did not send,
responses past MAX_IN_FLIGHT unanswered) is named UNKNOWN, a snapshot id no
leader publishes: the fence lets such a deployment's drains wait their
bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..drain_fence import DrainFence, Routed
from .resources import Resources

Key = tuple[str, str]
UNKNOWN = "?"
# Responses sent and not yet answered that are tracked one by one.
MAX_IN_FLIGHT = 16


@dataclass(frozen=True)
class Held:
    """One EDS resource as it was sent."""

    key: Key
    version: str
    snapshot_id: str


def held(resources: Resources, names: list[str]) -> dict[str, Held]:
    """What a response carrying `names` (EDS resources of `resources`) holds."""
    out = {}
    for name in names:
        key = resources.sources.get(name)
        snapshot_id = resources.snapshot_ids.get(key) if key is not None else None
        if key is not None and snapshot_id is not None:
            out[name] = Held(key, resources.endpoints_version(name) or "", snapshot_id)
    return out


def unknown(resources: Resources, names: list[str]) -> dict[str, Held]:
    """`names` held at versions this leader cannot tell."""
    return {name: Held(key, "", UNKNOWN) for name in names
            if (key := resources.sources.get(name)) is not None}


def routed_by(responses: list[dict[str, Held]], resources: Resources) -> dict[Key, Routed]:
    """The replica-set snapshot ids the client may route by, per deployment."""
    ids: dict[Key, set[str]] = {}
    for response in responses:
        for name, was in response.items():
            current = resources.snapshot_ids.get(was.key)
            same = (current is not None and resources.sources.get(name) == was.key
                    and resources.endpoints_version(name) == was.version)
            ids.setdefault(was.key, set()).add(current if same and current else was.snapshot_id)
    return {key: next(iter(found)) if len(found) == 1 else tuple(sorted(found))
            for key, found in ids.items()}


@dataclass
class _Sent:
    nonce: str
    version: str
    held: dict[str, Held]


@dataclass
class AppliedEndpoints:
    """One xDS stream's reporter to the fence (none: nothing is reported)."""

    fence: DrainFence | None
    reporter_id: str
    # The EDS response last ACKed (or resumed with), then those sent since.
    accepted: dict[str, Held] = field(default_factory=dict)
    in_flight: list[_Sent] = field(default_factory=list)
    _reported: dict[Key, Routed] | None = None

    def open(self) -> None:
        if self.fence is not None:
            self.fence.stream_opened(self.reporter_id)

    def close(self) -> None:
        if self.fence is not None:
            self.fence.stream_closed(self.reporter_id)

    def resumed(self, resources: Resources, names: list[str], version: str,
                current_version: str) -> None:
        """A stream's first EDS request says the client holds `version` of
        `names` (from an earlier stream, or another leader)."""
        if self.accepted or self.in_flight or not version:
            return
        self.accepted = held(resources, names) if version == current_version \
            else unknown(resources, names)

    def sent(self, nonce: str, version: str, response: dict[str, Held]) -> None:
        self.in_flight.append(_Sent(nonce, version, response))
        if len(self.in_flight) > MAX_IN_FLIGHT:
            # The client lags far behind: what the oldest named can no longer be told apart.
            oldest = self.in_flight.pop(0)
            self.accepted = {**self.accepted, **{
                name: Held(was.key, "", UNKNOWN) for name, was in oldest.held.items()}}

    def answered(self, nonce: str, version: str, accepted: bool) -> None:
        """The client ACKed (`accepted`) or NACKed the response `nonce`. An ACK
        puts every response sent before it behind the client; an ACK whose
        version is not what that response carried changes nothing. A NACK
        changes nothing either: the valid part of that response, and of any
        NACKed before it, may be in use with the rest of what it held."""
        if not accepted:
            return
        at = next((i for i, sent in enumerate(self.in_flight) if sent.nonce == nonce), None)
        if at is not None and self.in_flight[at].version == version:
            self.accepted = self.in_flight[at].held
            del self.in_flight[:at + 1]

    def report(self, resources: Resources) -> None:
        """Name the sets the client may route by now, when they changed."""
        if self.fence is None:
            return
        now = routed_by([self.accepted, *(sent.held for sent in self.in_flight)], resources)
        if now == self._reported:
            return
        # What changed only (an empty id: no longer routed); all of it the first time.
        before = self._reported or {}
        changes: dict[Key, Routed] = {key: ids for key, ids in now.items()
                                      if before.get(key) != ids}
        changes.update({key: "" for key in before if key not in now})
        self.fence.reported(self.reporter_id, changes, replace=self._reported is None,
                            stream=True)
        self._reported = now
