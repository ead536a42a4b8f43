"""Which replica sets an xDS client routes by, for the drain fence.

An xDS client (proxyless gRPC, Envoy) routes by the endpoints of the last
EDS response it acknowledged; one sent but not yet ACKed (or NACKed) is not
in use. So, per stream, this keeps what each acknowledged EDS resource was
built from (its deployment, its version, the replica-set snapshot id) and
names it to the leader's DrainFence as an HTTP proxy names its sets in its
load reports: whole at first, then what changed. The fence then holds a replica's drain
until every xDS client with a stream open has ACKed endpoints without it.

A resource the client holds whose version is still current holds the
current snapshot's endpoints (the version is a digest of the content),
even when the snapshot changed in ways the resource does not show (a
replica with no gRPC port leaving, say): it names the current snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..drain_fence import DrainFence
from .resources import Resources

Key = tuple[str, str]


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


def routed_by(acked: dict[str, Held], resources: Resources) -> dict[Key, str]:
    """The replica-set snapshot id the client routes by, per deployment. Two
    resources of one deployment (gRPC and HTTP endpoints) that disagree: the
    one that is not current, so the older set holds its replicas."""
    out: dict[Key, str] = {}
    for name, was in acked.items():
        current = resources.snapshot_ids.get(was.key)
        snapshot_id = current if (current is not None and resources.sources.get(name) == was.key
                                  and resources.endpoints_version(name) == was.version) \
            else was.snapshot_id
        if out.get(was.key, snapshot_id) == current:
            out[was.key] = snapshot_id
        else:
            out.setdefault(was.key, snapshot_id)
    return out


@dataclass
class AppliedEndpoints:
    """One xDS stream's reporter to the fence (none: nothing is reported)."""

    fence: DrainFence | None
    reporter_id: str
    acked: dict[str, Held] = field(default_factory=dict)
    _reported: dict[Key, str] | None = None

    def open(self) -> None:
        if self.fence is not None:
            self.fence.stream_opened(self.reporter_id)

    def close(self) -> None:
        if self.fence is not None:
            self.fence.stream_closed(self.reporter_id)

    def report(self, resources: Resources) -> None:
        """Name the sets the client routes by now, when they changed."""
        if self.fence is None:
            return
        now = routed_by(self.acked, resources)
        if now == self._reported:
            return
        # What changed only (an empty id: no longer routed); all of it the first time.
        before = self._reported or {}
        changes = {key: snapshot_id for key, snapshot_id in now.items()
                   if before.get(key) != snapshot_id}
        changes.update({key: "" for key in before if key not in now})
        self.fence.reported(self.reporter_id, changes, replace=self._reported is None)
        self._reported = now
