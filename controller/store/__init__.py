"""Hard-state stores: the Store interface, etcd, and the embedded sqlite store."""

from __future__ import annotations

from servefleet._private.security.tls import TlsFiles

from .base import (
    Delete,
    Guard,
    KeyValue,
    LeaseNotFound,
    Op,
    Put,
    Store,
    StoreFull,
    StoreOpenError,
    StoreUnavailable,
    TxnResult,
)

__all__ = [
    "Delete",
    "Guard",
    "KeyValue",
    "LeaseNotFound",
    "Op",
    "Put",
    "Store",
    "StoreFull",
    "StoreOpenError",
    "StoreURLError",
    "StoreUnavailable",
    "TxnResult",
    "local_files",
    "open_store",
]
# The files sqlite writes beside a database (WAL mode: -wal and -shm; a
# rollback journal while the WAL is being set up or recovered).
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


class StoreURLError(ValueError):
    """A --store URL that is not etcd://host:port[,host:port...] or sqlite:///path."""


def open_store(url: str, tls: TlsFiles | None = None) -> Store:
    """The store a URL names. Raises StoreURLError, with the reason, on a bad URL.

    `etcds://` is etcd over TLS: the store checks etcd's certificate against
    `tls.ca` and presents `tls.cert` as its client certificate (etcd's
    --client-cert-auth); StoreURLError when `tls` is None.
    """
    if url.startswith(("etcd://", "etcds://")):
        from .etcd import EtcdStore

        scheme, _, rest = url.partition("://")
        if scheme == "etcds" and tls is None:
            raise StoreURLError(f"{url!r}: etcds:// needs TLS files (--etcd-ca, --etcd-cert, "
                                "--etcd-key, or the controller's --certs / --cluster-*)")
        endpoints = [e.strip() for e in rest.rstrip("/").split(",")]
        for endpoint in endpoints:
            host, sep, port = endpoint.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise StoreURLError(
                    f"bad etcd endpoint {endpoint!r} in {url!r}: expected host:port")
        return EtcdStore(endpoints, tls=tls if scheme == "etcds" else None)
    if url.startswith("sqlite://"):
        from .sqlite import SqliteStore

        return SqliteStore(_sqlite_path(url))
    raise StoreURLError(
        f"unknown store URL {url!r}: expected etcd://host:port[,host:port...], "
        "etcds://... (TLS) or sqlite:///path/state.db")


def local_files(url: str) -> tuple[str, ...]:
    """The files on this host that the store a URL names writes: a sqlite
    database and its companions; none for etcd (or a URL open_store refuses)."""
    if not url.startswith("sqlite://"):
        return ()
    try:
        path = _sqlite_path(url)
    except StoreURLError:
        return ()
    return (path, *(path + suffix for suffix in SQLITE_COMPANIONS))


def _sqlite_path(url: str) -> str:
    path = url.removeprefix("sqlite://")
    if not path.startswith("/") or path == "/":
        raise StoreURLError(f"bad sqlite URL {url!r}: expected sqlite:///absolute/path/state.db")
    return path
