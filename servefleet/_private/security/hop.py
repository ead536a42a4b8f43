"""Hop passes: how a caller proves to a replica that it is the cluster's.

A replica's ports run what callers send (a handle call's body is unpickled),
so in a cluster with credentials (tokens or certificates) a replica serves
only callers that prove they are the cluster's: a proxy, another replica, a
driver whose credentials the controller accepted. Loopback is no exception:
every local user and process reaches it.

Mutual TLS proves it where a hop is TLS; a hop pass proves it everywhere,
cheaply, and names the caller:

- the leader issues passes (`HopIssuer`): `sfh1.<payload>.<signature>`, the
  payload naming the caller (`subject`: `replica:<id>`, `token:<name>`,
  `cert:<role>:<serial>`), its role and when the pass expires, signed with
  the cluster's hop key (Ed25519, kept in the store: any leader issues);
- a caller sends its pass with every request to a replica (the header or
  gRPC metadata `x-servefleet-hop`);
- a replica checks it (`HopVerifier`) against the cluster's public keys and
  the subjects revoked (both on the Watch stream's `hop` key): a signature
  is verified once per pass and cached, so a request costs a dict lookup
  and a comparison of times; the replica never holds a key that signs, so
  one replica cannot pose as another;
- only roles that may run code in replicas may send handle calls (pickled
  arguments): `replica`, `deployer`, `admin` (`may_call_methods`); a
  proxy's pass reaches HTTP, WebSockets and gRPC only.

Revoking a subject (a replica stopped, a token revoked) refuses its passes
issued before the revocation (a new token of the same name gets new ones),
listed until the last of them would have expired anyway. Passes live PASS_TTL_S, long enough that
the data plane outlives a controller outage, and callers renew theirs once
half of it has passed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

HOP_HEADER = "x-servefleet-hop"
HOP_HEADER_BYTES = HOP_HEADER.encode()
PREFIX = "sfh1."
PASS_TTL_S = 24 * 3600.0
# A pass is longer than this only if someone made it up.
MAX_PASS_CHARS = 1024
# Verified passes a replica remembers (callers are a cluster's processes:
# far fewer); past it the memory starts over.
MAX_CACHED = 10_000
METHOD_ROLES = frozenset({"replica", "deployer", "admin"})


class HopRefused(Exception):
    """The caller did not prove it is the cluster's; the message says why."""


@dataclass(frozen=True, slots=True)
class HopCaller:
    subject: str
    role: str
    expires: float
    issued: float = 0.0

    @property
    def may_call_methods(self) -> bool:
        """Whether it may send handle calls (pickled arguments: code)."""
        return self.role in METHOD_ROLES


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def hop_subject(replica_id: str = "", *, token_name: str = "", cert: tuple[str, str] = ("", "")
                ) -> str:
    """The subject a pass names: a replica (by id), a token (by name), or a
    certificate (role, serial)."""
    if replica_id:
        return f"replica:{replica_id}"
    if token_name:
        return f"token:{token_name}"
    return f"cert:{cert[0]}:{cert[1]}"


def key_id(public: bytes) -> str:
    return hashlib.sha256(public).hexdigest()[:16]


@dataclass(frozen=True)
class HopKey:
    """One signing key of the cluster's (the private half stays with controllers)."""

    private: Ed25519PrivateKey

    @classmethod
    def generate(cls) -> HopKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_bytes(cls, raw: bytes) -> HopKey:
        return cls(Ed25519PrivateKey.from_private_bytes(raw))

    def private_bytes(self) -> bytes:
        return self.private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())

    @property
    def public(self) -> bytes:
        return self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    @property
    def id(self) -> str:
        return key_id(self.public)


class HopIssuer:
    def __init__(self, key: HopKey, clock: Callable[[], float] = time.time) -> None:
        self._key = key
        self._clock = clock

    def issue(self, subject: str, role: str, ttl_s: float = PASS_TTL_S) -> tuple[str, float]:
        """(a pass for `subject` of `role`, when it expires)."""
        now = self._clock()
        expires = int(now + ttl_s)
        # Issued in milliseconds: a revocation refuses the passes issued
        # before it, and a new token of the same name may follow at once.
        payload = json.dumps({"k": self._key.id, "s": subject, "r": role, "x": expires,
                              "i": int(now * 1000)}, separators=(",", ":")).encode()
        body = PREFIX + _b64(payload)
        return f"{body}.{_b64(self._key.private.sign(body.encode()))}", float(expires)


class HopVerifier:
    """What a replica checks each caller's pass against."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._keys: dict[str, Ed25519PublicKey] = {}
        self._revoked: dict[str, float] = {}
        self._cache: dict[str, HopCaller] = {}

    def trust(self, keys: Mapping[str, bytes], revoked: Mapping[str, float]) -> None:
        """The cluster's public keys (by id) and its revoked subjects (when each
        was revoked: its passes issued before then are refused)."""
        self._keys = {kid: Ed25519PublicKey.from_public_bytes(raw) for kid, raw in keys.items()}
        self._revoked = dict(revoked)
        self._cache = {}

    @property
    def ready(self) -> bool:
        return bool(self._keys)

    def check(self, text: str | None) -> HopCaller:
        """The caller `text` names; HopRefused when it proves nothing."""
        if not text:
            raise HopRefused(f"no {HOP_HEADER}: this replica serves only the cluster's "
                             "proxies, replicas and drivers with credentials")
        caller = self._cache.get(text)
        if caller is None:
            caller = self._verify(text)
            if len(self._cache) >= MAX_CACHED:
                self._cache = {}
            self._cache[text] = caller
        now = self._clock()
        if caller.expires <= now:
            raise HopRefused(f"the {HOP_HEADER} pass of {caller.subject} expired")
        revoked_at = self._revoked.get(caller.subject)
        if revoked_at is not None and caller.issued <= revoked_at:
            raise HopRefused(f"the {HOP_HEADER} pass of {caller.subject} is revoked")
        return caller

    def _verify(self, text: str) -> HopCaller:
        if len(text) > MAX_PASS_CHARS or not text.startswith(PREFIX) or text.count(".") != 2:
            raise HopRefused(f"{HOP_HEADER} is not a pass")
        body, _, signature = text.rpartition(".")
        try:
            payload = json.loads(_unb64(body[len(PREFIX):]))
            key = self._keys.get(payload["k"]) if isinstance(payload, dict) else None
            if key is None:
                raise HopRefused(f"{HOP_HEADER} is signed with a key this cluster does not "
                                 "trust")
            key.verify(_unb64(signature), body.encode())
            return HopCaller(str(payload["s"]), str(payload["r"]), float(payload["x"]),
                             float(payload.get("i", 0)) / 1000)
        except HopRefused:
            raise
        except (InvalidSignature, ValueError, KeyError, TypeError, binascii.Error,
                UnicodeDecodeError) as e:
            raise HopRefused(f"{HOP_HEADER} is not a pass of this cluster "
                             f"({type(e).__name__})") from None
