"""Who may call what: roles, and the methods each one may call.

A caller's role comes from its bearer token (`tokens.py`) or, without one,
from the OU of its client certificate (`certs.py` writes one per role).
Humans and scripts hold `reader`, `deployer` or `admin`; proxies and
replicas hold their own roles, which also let them report load and watch
every key; a controller's certificate lets it call replicas' control RPCs.
With neither tokens nor TLS configured every caller is `admin`: the local,
zero-config default.
"""

from __future__ import annotations

from servefleet._private.wire import CONFIG_KIND, parse_watch_key

READER = frozenset({"GetDeployment", "ListDeployments", "ListReplicas", "GetStatus",
                    "ListApplications", "Watch"})
# Deployers may report load too: handles in their scripts do, and a
# deployer sets replica counts outright anyway.
# Logs are the deployer's: replicas' output can carry what their users sent.
# A hop pass (GetHopPass) reaches replicas' code: not a reader's.
DEPLOYER = READER | {"Deploy", "DeployApplications", "DeleteDeployments",
                     "DeleteApplications", "SetTraffic", "ReportLoad", "StreamLoad", "GetLogs",
                     "GetHopPass"}
DATA_PLANE = READER | {"ReportLoad", "StreamLoad", "GetHopPass"}
ADMIN = DEPLOYER | DATA_PLANE | {"Shutdown"}

# Role -> the ControllerService methods it may call.
CONTROLLER_API: dict[str, frozenset[str]] = {
    "reader": READER,
    "deployer": DEPLOYER,
    "admin": ADMIN,
    "proxy": DATA_PLANE,
    "replica": DATA_PLANE,
    "controller": READER,
}
# Roles a token from --auth-tokens may carry: a proxy on a cluster without TLS
# holds one too. Replicas get tokens of their own from the controller that
# starts them; controllers always use certificates.
TOKEN_ROLES = ("reader", "deployer", "admin", "proxy")
# Roles that may watch every key; the others only routes and replica sets
# (config snapshots carry user_config, which may hold credentials), but for
# a replica with its own token: its own deployment's config too.
WATCH_ALL = frozenset({"admin"})
# Roles whose calls a replica's control server accepts.
REPLICA_CONTROL = frozenset({"controller"})


def may_call(role: str, method: str) -> bool:
    return method in CONTROLLER_API.get(role, frozenset())


def unwatchable_key(role: str, keys: list[str],
                    own: tuple[str, str] | None = None) -> str | None:
    """The first of `keys` that `role` may not watch, or None. `own` is the
    (application, deployment) of a replica calling with its own token."""
    if role in WATCH_ALL:
        return None
    for key in keys:
        try:
            parsed = parse_watch_key(key)
        except ValueError:
            continue  # a malformed key is the handler's to refuse
        if parsed.kind == CONFIG_KIND and (own is None or role != "replica"
                                           or (parsed.application, parsed.deployment) != own):
            return key
    return None
