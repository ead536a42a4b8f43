"""The cluster's hop key and revoked hop subjects (servefleet/_private/security/hop.py).

Hard state (JSON and text: no pickle in the store):

    /servefleet/<cluster>/hop            {"keys": [{"id": ..., "private": <base64 of
                                           the raw Ed25519 key>}]}
    /servefleet/<cluster>/hop-revoked/<subject, %-quoted>   <unix time of the revocation>

One key per revoked subject, so a revocation is one Put that joins the
write it belongs to (a stopped replica's record is deleted in the same
transaction) and concurrent revocations cannot overwrite each other; expired
ones are deleted by the next revocation. (A `revoked` map inside the `hop`
value, as stored before 2026-12-07, is read too.)

The first leader of a cluster with credentials makes the key; every later
leader loads it, so passes outlive a failover (a cluster without credentials
has none: its replicas check no pass). Only controllers read the store: the private
key never leaves them (replicas get the public halves, on the Watch stream's
`hop` key). A revoked subject's passes issued before the revocation are
refused; it stays listed until the last of them has expired (PASS_TTL_S
after the revocation), then it is dropped.

`HopAuthority` is one term's: it loads (step of the term's start), issues,
revokes (a fenced write), and publishes the trust snapshot through a
callback whenever it changes.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Iterable
from urllib.parse import quote, unquote

from google.protobuf.timestamp_pb2 import Timestamp

from servefleet._private.security.hop import HOP_HEADER, PASS_TTL_S, HopIssuer, HopKey
from servefleet.v1 import watch_pb2

from .clock import Clock
from .election import FencedStore
from .errors import StoreDiskFull
from .keys import ClusterKeys
from .store import Delete, Op, Put, Store

logger = logging.getLogger(__name__)
# Expired revocations one revocation's transaction deletes at most (the rest
# go with the next ones).
MAX_EXPIRED_PER_WRITE = 64


class HopAuthority:
    def __init__(self, keys: ClusterKeys, fenced: FencedStore, clock: Clock, required: bool,
                 on_trust: Callable[[watch_pb2.HopTrust], None],
                 revoked_certificates: Callable[[], Iterable[str]] = tuple) -> None:
        self._key_path = keys.root + "hop"
        self._revoked_prefix = keys.root + "hop-revoked/"
        self._fenced = fenced
        self._clock = clock
        self.required = required
        self._on_trust = on_trust
        # The serial numbers the controllers' --revoked-certs lists (they
        # travel with the trust: replicas refuse them on every TLS port).
        self._revoked_certificates = revoked_certificates
        self._keys: list[HopKey] = []
        self._revoked: dict[str, float] = {}
        self._issuer: HopIssuer | None = None
        self._own: tuple[str, float] | None = None  # controller_metadata's pass

    # -- 1. load (a step of the term's start) ------------------------------------------

    async def load(self, store: Store) -> None:
        """Read the key and revocations, making the key on a cluster's first
        term (or when what is stored cannot be read). StoreUnavailable,
        Unavailable and NotLeader propagate (the term retries or ends)."""
        if not self.required:  # a cluster without credentials: no pass anywhere
            self._publish()
            return
        found = await store.get(self._key_path)
        try:
            if found is not None:
                self._keys, self._revoked = _parse(found.value)
                self._revoked.update(_parse_revoked(
                    await store.list_prefix(self._revoked_prefix), self._revoked_prefix))
        except ValueError as e:
            # No poison pill: a new key, and the passes of the old one refused.
            logger.error("%s: %s; making a new one (passes issued before are refused "
                         "until their holders ask again)", self._key_path, e)
            found = None
        if found is None:
            self._keys, self._revoked = [HopKey.generate()], {}
            try:
                await self._write()
            except StoreDiskFull as e:
                # Serve this term with it all the same: its passes are refused
                # only after a failover, when a leader that stored one takes over.
                logger.error("cannot store the cluster's new hop key (%s): passes this "
                             "leader issues will not outlive its term", e)
            logger.info("made the cluster's hop key %s", self._keys[0].id)
        self._issuer = HopIssuer(self._keys[0], self._clock.time)
        self._publish()

    # -- 2. issue and revoke --------------------------------------------------------------

    def issue(self, subject: str, role: str) -> tuple[str, float]:
        """A pass for `subject` of `role`, and when it expires (only where
        `required`: elsewhere nothing checks passes)."""
        if self._issuer is None:
            raise RuntimeError("no hop key: this cluster has no credentials, or the term "
                               "has not loaded yet")
        return self._issuer.issue(subject, role)

    def controller_metadata(self) -> tuple[tuple[str, str], ...]:
        """This leader's own pass (role controller) as gRPC metadata, for its
        calls to replicas' control ports; () without credentials."""
        if self._issuer is None:
            return ()
        if self._own is None or self._own[1] - self._clock.time() < PASS_TTL_S / 2:
            self._own = self.issue("controller", "controller")
        return ((HOP_HEADER, self._own[0]),)

    async def revoke(self, subjects: list[str]) -> None:
        """Refuse the passes of `subjects` issued until now (listed until the
        last of them expires): a write of its own."""
        ops = self.revocation(subjects)
        if ops:
            await self._fenced.commit(ops)
            self.revoked(subjects)

    def revocation(self, subjects: list[str]) -> list[Op]:
        """The writes that revoke `subjects` (and drop revocations that have
        expired), for a transaction of the caller's; call `revoked` once it
        is committed. [] where passes are not checked."""
        if not self.required or not subjects:
            return []
        now = self._clock.time()
        expired = [s for s, t in self._revoked.items()
                   if t + PASS_TTL_S <= now and s not in subjects]
        return [*(Put(self._revoked_key(s), repr(now).encode()) for s in dict.fromkeys(subjects)),
                *(Delete(self._revoked_key(s)) for s in expired[:MAX_EXPIRED_PER_WRITE])]

    def revoked(self, subjects: list[str]) -> None:
        """`revocation(subjects)` was committed: refuse them from the next
        trust snapshot on."""
        if not self.required or not subjects:
            return
        now = self._clock.time()
        self._revoked = {s: t for s, t in self._revoked.items() if t + PASS_TTL_S > now}
        self._revoked.update(dict.fromkeys(subjects, now))
        self._publish()
        logger.info("revoked the hop passes of %s", ", ".join(subjects))

    def _revoked_key(self, subject: str) -> str:
        return self._revoked_prefix + quote(subject, safe="")

    # -- 3. store and publish ---------------------------------------------------------------

    async def _write(self) -> None:
        value = {"keys": [{"id": k.id, "private": base64.b64encode(k.private_bytes()).decode()}
                          for k in self._keys]}
        await self._fenced.commit([Put(self._key_path, json.dumps(value).encode())])

    def trust(self) -> watch_pb2.HopTrust:
        now = self._clock.time()
        revoked = []
        for subject, revoked_at in sorted(self._revoked.items()):
            if revoked_at + PASS_TTL_S > now:
                revoked.append(watch_pb2.RevokedHopSubject(
                    subject=subject, until=_stamp(revoked_at + PASS_TTL_S),
                    revoked_at=_stamp(revoked_at)))
        return watch_pb2.HopTrust(
            required=self.required, revoked=revoked,
            keys=[watch_pb2.HopKey(id=k.id, public_key=k.public) for k in self._keys],
            revoked_certificates=sorted(self._revoked_certificates()))

    def _publish(self) -> None:
        self._on_trust(self.trust())

    def publish(self) -> None:
        """Publish the trust again (the revoked certificates changed, on
        SIGHUP) once `load` has: before, there is no key to publish."""
        if self._issuer is not None or not self.required:
            self._publish()


def _stamp(seconds: float) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def _parse(raw: bytes) -> tuple[list[HopKey], dict[str, float]]:
    """ValueError when the stored value is not ours."""
    try:
        value = json.loads(raw)
        keys = [HopKey.from_bytes(base64.b64decode(k["private"])) for k in value["keys"]]
        revoked = {str(s): float(t) for s, t in value.get("revoked", {}).items()}
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"the stored hop key cannot be read: {e}") from e
    if not keys:
        raise ValueError("the stored hop key lists no key")
    return keys, revoked


def _parse_revoked(found: list, prefix: str) -> dict[str, float]:
    """The revocations under `prefix`; one that cannot be read is skipped
    (logged): a revocation lost errs toward a pass its holder still has,
    only until it expires."""
    revoked = {}
    for kv in found:
        subject = unquote(kv.key[len(prefix):])
        try:
            revoked[subject] = float(kv.value)
        except ValueError:
            logger.error("%s: not a time; ignored", kv.key)
    return revoked
