"""The loop that keeps HAProxy in step with what the Watch stream says.

On every snapshot (and every PASS_S, for servers still leaving, and to see
that HAProxy still runs: one that died is started again at once):

1. decide the layout (layout.py) and the servers it wants, from the proxy's
   route table and replica pools;
2. if the layout changed (a route or backend came, went or changed its
   settings), write the whole configuration, servers included, and reload
   HAProxy (process.py): a new worker takes the listeners over;
3. else send the runtime API commands that take the servers from what they
   are to what is wanted (servers.py), and note what HAProxy agreed to.

One task does all of it, so a reload never races a command. A step that
fails (HAProxy did not answer) is logged and the next pass starts again
from what HAProxy was last known to hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from servefleet._private.dataplane.load_report import EngineLoad
from servefleet._private.security.hop_client import HOP_PASS

from ..state import ProxyState
from .cli import CliError
from .config import EngineSettings, render
from .layout import Layout, Server, decide, servers
from .process import HaproxyError, HaproxyProcess
from .servers import plan_servers
from .stats import parse_stat

logger = logging.getLogger("servefleet.proxy.haproxy")
PASS_S = 1.0


class HaproxyEngine:
    def __init__(self, state: ProxyState, settings: EngineSettings,
                 timeout_s: Callable[[], float], process: HaproxyProcess | None = None) -> None:
        self.state = state
        self.settings = settings
        # HAProxy's server timeout: the request timeout, else the answer-start timeout.
        self._timeout_s = timeout_s
        self.process = process or HaproxyProcess()
        self._changed = asyncio.Event()
        self._layout: Layout | None = None
        self._have: dict[str, dict[str, Server]] = {}
        self._leaving: dict[str, dict[str, Server]] = {}
        self._addresses: dict[str, str] = {}  # host -> IP, for replicas named by host
        # (requests, errors, when) per backend at the last sample: traffic is the difference.
        self._last: dict[str, tuple[int, int, float]] = {}
        self.reloads = self.restarts = 0
        # The replica sets HAProxy's servers follow (ReplicaSets.applied's ids as
        # they were when the last sync began), for the load reports; on_applied
        # is called when they change (the load reporter's wake).
        self.applied: dict[str, str] = {}
        self.on_applied: Callable[[], None] | None = None

    def changed(self) -> None:
        """A snapshot came: sync soon."""
        self._changed.set()

    async def start(self) -> None:
        """Start HAProxy on what is known now; HaproxyError if it cannot."""
        if self.changed not in HOP_PASS.listeners:  # a new pass is a reload
            HOP_PASS.listeners.append(self.changed)
        applying = dict(self.state.replica_sets.applied)
        layout, want = await self._wanted()
        await self.process.start(render(layout, want, self.settings))
        self._layout, self._have = layout, want
        self._applied(applying)

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), PASS_S)
            self._changed.clear()
            try:
                if not self.process.running():  # killed: serve again at once
                    logger.error("HAProxy exited; starting it again")
                    self.restarts += 1
                    self._leaving, self._last = {}, {}
                    await self.start()
                    continue
                await self.sync()
            except (CliError, HaproxyError) as e:
                logger.error("HAProxy not in step with the routes: %s", e)
                if self.process.running():
                    await asyncio.sleep(PASS_S)

    async def sync(self) -> None:
        await HOP_PASS.wait_ready()  # routes to replicas go with the pass, never before it
        applying = dict(self.state.replica_sets.applied)  # read before the pools are
        layout, want = await self._wanted()
        if layout != self._layout:
            await self.process.reload(render(layout, want, self.settings))
            self.reloads += 1
            self._layout, self._have, self._leaving = layout, want, {}
            self._last.clear()
            logger.info("HAProxy reloaded: %d routes, %d backends", len(layout.routes),
                        len(layout.backends))
            self._applied(applying)
            return
        for kind, backend, name, command in plan_servers(
                self._have, self._leaving, want).steps():
            answer = (await self.process.cli.worker(command)).strip()
            self._note(kind, backend, name, answer, want)
        self._applied(applying)

    def _applied(self, sets: dict[str, str]) -> None:
        if sets != self.applied:
            self.applied = sets
            if self.on_applied is not None:
                self.on_applied()

    def _note(self, kind: str, backend: str, name: str, answer: str,
              want: dict[str, dict[str, Server]]) -> None:
        """What HAProxy holds after `kind`'s command answered `answer`."""
        have = self._have.setdefault(backend, {})
        leaving = self._leaving.setdefault(backend, {})
        if kind == "drain":
            leaving[name] = have.pop(name)
        elif kind == "add":
            if "registered" in answer or "Already exists" in answer:
                have[name] = want[backend][name]
            else:
                logger.error("HAProxy would not add %s/%s: %s", backend, name, answer)
        elif kind in ("revive", "maxconn") and name in want.get(backend, {}):
            leaving.pop(name, None)
            have[name] = want[backend][name]
        elif kind == "delete" and ("deleted" in answer or "No such server" in answer):
            leaving.pop(name, None)
        elif kind in ("health", "enable") and answer:
            logger.warning("HAProxy on %s/%s: %s", backend, name, answer)

    async def _wanted(self) -> tuple[Layout, dict[str, dict[str, Server]]]:
        pools = self.state.replica_sets.pools
        layout = replace(decide(self.state.routes, pools, self._timeout_s()),
                         hop_pass=HOP_PASS.value)
        want = servers(layout, pools)
        for backend, named in want.items():
            want[backend] = {name: resolved for name, server in named.items()
                             if (resolved := await self._resolved(server)) is not None}
        return layout, want

    async def _resolved(self, server: Server) -> Server | None:
        """The server with an IP address: HAProxy resolves no name of a
        server added at run time."""
        host, _, port = server.address.rpartition(":")
        bare = host.strip("[]")
        with contextlib.suppress(ValueError):
            ipaddress.ip_address(bare)
            return server
        if bare not in self._addresses:
            try:
                found = await asyncio.get_running_loop().getaddrinfo(bare, int(port))
            except OSError as e:
                logger.warning("replica %s: cannot resolve %s: %s", server.replica_id, bare, e)
                return None
            ip = str(found[0][4][0])
            self._addresses[bare] = f"[{ip}]" if ":" in ip else ip
        return Server(server.replica_id, f"{self._addresses[bare]}:{port}", server.maxconn)

    def deployment_of(self, backend: str) -> tuple[str, str, str] | None:
        """(application, deployment, route prefix) of a backend now, or None."""
        layout = self._layout
        found = next((b for b in layout.backends if b.name == backend), None) if layout else None
        if layout is None or found is None:
            return None
        route = next((r.prefix for r in layout.routes
                      if any(name == backend for name, _ in r.backends)), "")
        return found.application, found.deployment, route

    async def load(self) -> EngineLoad:
        """What HAProxy holds and has done, for the load reports."""
        layout = self._layout
        if layout is None:
            return EngineLoad()
        keys = {b.name: f"{b.application}/{b.deployment}" for b in layout.backends}
        loads = parse_stat(await self.process.cli.worker("show stat -1 6 -1"), set(keys))
        ids = {name: server.replica_id for named in self._have.values()
               for name, server in named.items()}
        now = time.monotonic()
        sample = EngineLoad()
        for backend, load in loads.items():
            key = keys[backend]
            sample.counts[key] = (load.queued, load.ongoing)
            sample.ejected += [ids[name] for name in load.down if name in ids]
            requests, errors, then = self._last.get(backend, (load.requests, load.errors, now))
            self._last[backend] = (load.requests, load.errors, now)
            if load.requests > requests and now > then:
                sample.traffic[key] = (load.requests - requests, now - then, load.mean_ms,
                                       load.mean_ms, max(0, load.errors - errors))
        return sample
