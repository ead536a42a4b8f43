"""The bootstrap a proxyless gRPC client needs to reach servefleet's xDS server.

gRPC clients in every language read it from the file named by
GRPC_XDS_BOOTSTRAP (or the JSON itself in GRPC_XDS_BOOTSTRAP_CONFIG), then
resolve `xds:///<application>` through the controllers' ADS. Every
controller is listed: as one server whose channel holds all their addresses
when they are IPv4 addresses without TLS (a dead controller's stream moves
to the next one, which relays to the leader), else one server each, in order.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Sequence
from typing import Any

# The certificate provider instance the xDS clusters of TLS replicas name
# (controller/xds/resources.py): the client's own certificate, key and CA.
CERTIFICATE_PROVIDER = "servefleet"

def bootstrap(controllers: Sequence[str], node_id: str = "", ca: str | None = None,
              cert: str | None = None, key: str | None = None) -> dict[str, Any]:
    """The bootstrap JSON (as a dict). With a CA, the channel to the controllers
    is TLS (and mutual TLS with a certificate and key), as gRPC's `tls`
    channel credentials with file-watcher certificate providers; with all
    three, the same files are the certificate provider `servefleet` that
    clusters of replicas serving TLS name (a channel made with
    `grpc.xds_channel_credentials` uses it; gRFC A29)."""
    if ca:
        config: dict[str, Any] = {"ca_certificate_file": ca}
        if cert and key:
            config.update(certificate_file=cert, private_key_file=key)
        creds = [{"type": "tls", "config": config}]
    else:
        creds = [{"type": "insecure"}]
    if not ca and len(controllers) > 1 and all(_ipv4(a) for a in controllers):
        # One server whose channel has every controller's address: when the one
        # it is connected to dies, it connects to the next (which relays to the
        # leader, or is the leader by then).
        uris = ["ipv4:" + ",".join(controllers)]
    else:
        uris = list(controllers)  # in order: gRPC falls back to the next (gRFC A71)
    out = {
        "xds_servers": [{"server_uri": uri, "channel_creds": creds,
                         "server_features": ["xds_v3"]} for uri in uris],
        "node": {"id": node_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}",
                 "cluster": "servefleet-client", "locality": {}},
    }
    if ca and cert and key:
        out["certificate_providers"] = {CERTIFICATE_PROVIDER: {
            "plugin_name": "file_watcher",
            "config": {"certificate_file": cert, "private_key_file": key,
                       "ca_certificate_file": ca, "refresh_interval": "600s"}}}
    return out


def render(controllers: Sequence[str], **kwargs: Any) -> str:
    return json.dumps(bootstrap(controllers, **kwargs), indent=2) + "\n"


def _ipv4(address: str) -> bool:
    host, _, port = address.rpartition(":")
    parts = host.split(".")
    return port.isdigit() and len(parts) == 4 and all(p.isdigit() and int(p) < 256
                                                      for p in parts)
