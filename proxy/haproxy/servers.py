"""Runtime API commands that take HAProxy's servers to what the layout wants (pure).

A replica that joins its set is added (`add server`, which HAProxy creates
in maintenance), its health check turned on and then it is enabled. One that
leaves is set to maintenance at once, so it gets no new request while those
it holds finish, and deleted once HAProxy agrees (`del server` is refused
while the server holds connections): until then it is tried again on every
pass. A replica that comes back while it is leaving is made ready again. A
changed max_ongoing_requests is the server's maxconn, set in place.

None of this reloads HAProxy; backends and routes that change do (engine.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .config import server_line
from .layout import Server

# backend -> server name -> server
Servers = Mapping[str, Mapping[str, Server]]


@dataclass
class ServerPlan:
    add: list[tuple[str, str, Server]] = field(default_factory=list)
    # Set to maintenance (new requests stop), then deleted when HAProxy agrees.
    drain: list[tuple[str, str]] = field(default_factory=list)
    # Leaving, and wanted again: ready once more.
    revive: list[tuple[str, str]] = field(default_factory=list)
    maxconn: list[tuple[str, str, int]] = field(default_factory=list)
    delete: list[tuple[str, str]] = field(default_factory=list)

    def steps(self) -> list[tuple[str, str, str, str]]:
        """(kind, backend, server, worker command), in the order to send them."""
        out: list[tuple[str, str, str, str]] = []
        for backend, name in self.drain:
            out.append(("drain", backend, name, f"set server {backend}/{name} state maint"))
        for backend, name, server in self.add:
            out += [("add", backend, name, f"add server {backend}/{server_line(name, server)}"),
                    ("health", backend, name, f"enable health {backend}/{name}"),
                    ("enable", backend, name, f"enable server {backend}/{name}")]
        for backend, name in self.revive:
            out.append(("revive", backend, name, f"set server {backend}/{name} state ready"))
        for backend, name, limit in self.maxconn:
            out.append(("maxconn", backend, name,
                        f"set maxconn server {backend}/{name} {limit}"))
        for backend, name in [*self.delete, *self.drain]:
            out.append(("delete", backend, name, f"del server {backend}/{name}"))
        return out


def plan_servers(have: Servers, leaving: Mapping[str, Mapping[str, Server]],
                 want: Servers) -> ServerPlan:
    """What to send so that the backends of `want` serve exactly its
    servers. `have`: the servers taking requests now; `leaving`: those in
    maintenance, not deleted yet. Backends `want` lacks are not touched."""
    plan = ServerPlan()
    for backend, wanted in sorted(want.items()):
        active = have.get(backend, {})
        going = leaving.get(backend, {})
        for name in sorted(wanted):
            if name in active:
                if active[name].maxconn != wanted[name].maxconn:
                    plan.maxconn.append((backend, name, wanted[name].maxconn))
            elif name in going:
                plan.revive.append((backend, name))
                if going[name].maxconn != wanted[name].maxconn:
                    plan.maxconn.append((backend, name, wanted[name].maxconn))
            else:
                plan.add.append((backend, name, wanted[name]))
        plan.drain += [(backend, name) for name in sorted(active) if name not in wanted]
        plan.delete += [(backend, name) for name in sorted(going) if name not in wanted]
    return plan
