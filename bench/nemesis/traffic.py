"""Mixed traffic through the proxies, every request recorded (history.Request).

Kinds, each from its own clients, one request after another with a short
pause (the point is coverage under faults, not load):

    http       GET /front/               Front's own answer
    compose    GET /front/compose        Front -> Back by a handle call
    stream     GET /front/stream?n=5     Back's tokens, streamed through Front
    websocket  WS  /front/ws             three messages echoed on one connection
    grpc       Classifier.Predict        through the proxies' gRPC ingress
    xds        Classifier.Predict        proxyless, straight to the replicas
                                         (xds_client.py, a process of its own)
    embedded   GET /echo/                the embedded side's proxy (embedded.py)
    docker     GET /echo/                the Docker side's proxy (docker_side.py)

Like a load balancer in front of the proxies, a client whose connection to
a proxy is refused (a killed proxy: the request never left the client)
sends it to the other one; that is not a failure.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import httpx
import websockets

from nemesis.history import Request

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from grpc_classifier import classifier_pb2, classifier_pb2_grpc

TIMEOUT_S = 30.0
PAUSE_S = 0.05
FRONT = "chaos/Front"
BACK = "chaos/Back"
GRPC_APP = "grpc/Clf"
# kind -> the deployments it reaches
PATHS = {"http": [FRONT], "compose": [FRONT, BACK], "stream": [FRONT, BACK],
         "websocket": [FRONT], "grpc": [GRPC_APP], "xds": [GRPC_APP],
         "embedded": ["embedded/Echo"], "docker": ["docker/Echo"]}
XDS_CLIENT = str(Path(__file__).resolve().parent / "xds_client.py")
GOING_AWAY_RETRIES = 2
# The sides with a proxy of their own, each for its kind of request only.
SIDES = ("embedded", "docker")


class Refused(Exception):
    """The proxy refused the connection: the request never left the client."""


class Traffic:
    def __init__(self, proxies: dict[str, str], grpc_targets: dict[str, str],
                 clients_per_kind: int = 2, sides: dict[str, str] | None = None,
                 xds_bootstrap: str | None = None) -> None:
        """`sides`: kind (SIDES) -> the URL of that side's proxy, for the sides
        the run has; `xds_bootstrap`: the bootstrap (JSON) of the proxyless
        client; None: none."""
        self.proxies = proxies              # name -> http://host:port
        self.grpc_targets = grpc_targets
        self.clients_per_kind = clients_per_kind
        self.sides = sides or {}
        self.kinds = tuple(k for k in PATHS if k != "xds" and (k not in SIDES or k in self.sides))
        self.xds_bootstrap = xds_bootstrap
        self._xds: subprocess.Popen | None = None
        self._xds_reader: threading.Thread | None = None
        self.requests: list[Request] = []
        # WebSockets closed with 1001 (going away) and opened again.
        self.reconnects = 0
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._turn = itertools.count()

    def start(self) -> Traffic:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()),
                                        name="chaos-traffic", daemon=True)
        self._thread.start()
        if self.xds_bootstrap:
            self._xds = subprocess.Popen(
                [sys.executable, XDS_CLIENT, GRPC_APP.split("/")[0],
                 "--callers", str(self.clients_per_kind)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                env={**os.environ, "GRPC_XDS_BOOTSTRAP_CONFIG": self.xds_bootstrap,
                     "GRPC_VERBOSITY": "ERROR"})  # not its notes of each failover
            self._xds_reader = threading.Thread(target=self._read_xds, name="chaos-xds",
                                                daemon=True)
            self._xds_reader.start()
        return self

    def _read_xds(self) -> None:
        assert self._xds is not None and self._xds.stdout is not None
        path = ["xds:client", f"deployment:{GRPC_APP}"]
        for line in self._xds.stdout:
            try:
                call = json.loads(line)
            except ValueError:
                continue
            self.requests.append(Request("xds", call["start"], call["end"], call["ok"], path,
                                         call["error"]))

    def stop(self) -> list[Request]:
        self._stopping = True
        if self._thread is not None:
            self._thread.join(TIMEOUT_S + 10)
        if self._xds is not None:
            assert self._xds.stdin is not None
            self._xds.stdin.close()
            try:
                self._xds.wait(TIMEOUT_S + 10)
            except subprocess.TimeoutExpired:
                self._xds.kill()
                self._xds.wait()
            if self._xds_reader is not None:
                self._xds_reader.join(10)
            assert self._xds.stdout is not None
            self._xds.stdout.close()
        return self.requests

    def failed(self) -> list[Request]:
        return [r for r in self.requests if not r.ok]

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
            channels = {n: grpc.aio.insecure_channel(t) for n, t in self.grpc_targets.items()}
            one = {"http": lambda p: self._get(http, p, "/front/"),
                   "compose": lambda p: self._get(http, p, "/front/compose?w=chaos"),
                   "stream": lambda p: self._stream(http, p),
                   "websocket": self._websocket,
                   "grpc": lambda p: self._grpc(channels[p]),
                   **{side: lambda p: self._get(http, p, "/echo/") for side in SIDES}}
            await asyncio.gather(*(self._client(kind, one[kind]) for kind in self.kinds
                                   for _ in range(self.clients_per_kind)))
            for channel in channels.values():
                await channel.close()

    async def _client(self, kind: str, send: Callable[[str], Awaitable[None]]) -> None:
        while not self._stopping:
            names = [kind] if kind in SIDES else list(self.proxies)
            first = next(self._turn) % len(names)
            order = names[first:] + names[:first]
            start = time.time()
            error, used = "", order[0]
            for used in order:
                try:
                    await send(used)
                    error = ""
                    break
                except Refused as e:
                    error = f"refused: {e}"
                except Exception as e:
                    error = f"{type(e).__name__}: {e}"[:300]
                    break
            path = [f"proxy:{used}", *(f"deployment:{d}" for d in PATHS[kind])]
            self.requests.append(Request(kind, start, time.time(), not error, path, error))
            await asyncio.sleep(PAUSE_S)

    async def _get(self, http: httpx.AsyncClient, proxy: str, path: str) -> None:
        try:
            base = self.sides[proxy] if proxy in SIDES else self.proxies[proxy]
            reply = await http.get(f"{base}{path}")
        except httpx.ConnectError as e:
            raise Refused(str(e)) from e
        if reply.status_code != 200:
            raise RuntimeError(f"HTTP {reply.status_code}: {reply.text[:120]}")

    async def _stream(self, http: httpx.AsyncClient, proxy: str) -> None:
        try:
            async with http.stream("GET", self.proxies[proxy] + "/front/stream?n=5") as reply:
                body = (await reply.aread()).decode()
        except httpx.ConnectError as e:
            raise Refused(str(e)) from e
        if reply.status_code != 200 or body.split() != [f"t{i}" for i in range(5)]:
            raise RuntimeError(f"HTTP {reply.status_code}: {body[:120]!r}")

    async def _websocket(self, proxy: str) -> None:
        """Three messages echoed on one connection. A close with 1001 (going
        away: the replica or the proxy drains, in a rollout say) asks the
        client to reconnect, as servefleet documents; so does this client,
        up to GOING_AWAY_RETRIES times, and only then is it a failure."""
        url = self.proxies[proxy].replace("http://", "ws://") + "/front/ws"
        for attempt in range(GOING_AWAY_RETRIES + 1):
            try:
                connection = await asyncio.wait_for(websockets.connect(url), TIMEOUT_S)
            except ConnectionRefusedError as e:  # not a reset or a hang: those reached it
                raise Refused(str(e)) from e
            try:
                async with connection:
                    for i in range(3):
                        await connection.send(f"m{i}")
                        echoed = await asyncio.wait_for(connection.recv(), TIMEOUT_S)
                        if echoed != f"m{i}":
                            raise RuntimeError(f"echoed {echoed!r} for m{i}")
                return
            except websockets.ConnectionClosed as e:
                if e.rcvd is None or e.rcvd.code != 1001 or attempt == GOING_AWAY_RETRIES:
                    raise
                self.reconnects += 1

    async def _grpc(self, channel: grpc.aio.Channel) -> None:
        stub = classifier_pb2_grpc.ClassifierStub(channel)
        try:
            await stub.Predict(classifier_pb2.PredictRequest(text="chaos"), timeout=TIMEOUT_S,
                               metadata=(("application", "grpc"),))
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.UNAVAILABLE and "refused" in (e.details() or ""):
                raise Refused(e.details()) from e
            raise RuntimeError(f"{e.code().name}: {e.details()}") from e
