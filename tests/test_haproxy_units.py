"""The HAProxy engine's pure parts: layout, configuration, server plans, stats."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from servefleet._private.dataplane.balancer import Replica, ReplicaPool
from servefleet.proxy.haproxy.config import HOP_BY_HOP_LUA, EngineSettings, render
from servefleet.proxy.haproxy.layout import (
    PYTHON_BACKEND,
    Layout,
    Server,
    backend_name,
    decide,
    server_name,
    servers,
)
from servefleet.proxy.haproxy.servers import plan_servers
from servefleet.proxy.haproxy.stats import parse_stat
from servefleet.proxy.limits import EdgeLimits
from servefleet.proxy.routes import RouteTable, Target


def pool(*replicas: str, max_ongoing: int = 4, max_queued: int = -1,
         router: str = "", unavailable: str = "") -> ReplicaPool:
    made = ReplicaPool(max_ongoing=max_ongoing, max_queued=max_queued,
                       replicas={r: Replica(r, f"127.0.0.1:{9000 + i}")
                                 for i, r in enumerate(replicas)})
    made.router_spec = (router, "")
    made.unavailable = unavailable
    return made


def test_routes_go_to_haproxy_unless_they_need_the_python_path() -> None:
    table = RouteTable([
        Target("/", "a", "Root"), Target("/api", "a", "Api", split=(("Api", 3), ("Canary", 1))),
        Target("/tok", "t", "T", require_token=True),
        Target("/shadow", "s", "S", shadow_of=("S2", 0.1)),
        Target("/broken", "b", "", unavailable="no"),
        Target("/mine", "m", "M"), Target("/later", "l", "L"),
    ], request_timeout_s=0)
    pools = {("a", "Root"): pool("r1"), ("a", "Api"): pool("a1", max_queued=5),
             ("a", "Canary"): pool("c1"), ("t", "T"): pool("t1"), ("s", "S"): pool("s1"),
             ("m", "M"): pool("m1", router="my.Router")}
    layout = decide(table, pools, 60.0)
    by_prefix = {r.prefix: r for r in layout.routes}
    assert [r.prefix for r in layout.routes][:2] == ["/shadow", "/broken"]  # longest first
    assert by_prefix["/api"].backends == ((backend_name("a", "Api"), 7500),
                                         (backend_name("a", "Canary"), 10000))
    assert by_prefix["/"].backends == ((backend_name("a", "Root"), 10000),)
    because = {p: r.python_because for p, r in by_prefix.items() if not r.backends}
    assert because == {"/tok": "the application wants a token", "/shadow": "shadow traffic",
                       "/broken": "the application cannot serve",
                       "/mine": "M routes with my.Router", "/later": "no replica set for L yet"}
    assert {b.name: b.max_queued for b in layout.backends} == {
        backend_name("a", "Api"): 5, backend_name("a", "Canary"): -1,
        backend_name("a", "Root"): -1}
    wanted = servers(layout, pools)
    assert wanted[backend_name("a", "Api")] == {
        server_name("a1", "127.0.0.1:9000"): Server("a1", "127.0.0.1:9000", 4)}


def test_names_are_safe_for_haproxy_and_distinct() -> None:
    assert backend_name("default", "Echo") == "d.default.Echo"
    odd = backend_name("my app", "x/y")
    assert " " not in odd and "/" not in odd and odd != backend_name("my_app", "x_y")
    assert server_name("r1", "h:1") != server_name("r1", "h:2")  # a replica that moved


def test_server_plans_add_drain_delete_revive_and_resize() -> None:
    s = {"a": Server("a", "127.0.0.1:1", 4), "b": Server("b", "127.0.0.1:2", 4)}
    plan = plan_servers({"be": {"a": s["a"], "b": s["b"]}}, {"be": {"c": s["a"]}},
                        {"be": {"a": Server("a", "127.0.0.1:1", 8), "c": s["a"],
                                "d": Server("d", "127.0.0.1:4", 4)}})
    commands = [step[3] for step in plan.steps()]
    assert commands == [
        "set server be/b state maint",
        "add server be/d 127.0.0.1:4 maxconn 4 check inter 1000ms fall 2 rise 1 "
        "observe layer4 error-limit 1 on-error mark-down pool-max-conn -1 pool-purge-delay 5s",
        "enable health be/d", "enable server be/d",
        "set server be/c state ready",
        "set maxconn server be/a 8",
        "del server be/b"]
    # Nothing to do: nothing sent; a leaving server no one wants is deleted again.
    assert plan_servers({"be": s}, {}, {"be": s}).steps() == []
    assert [x[3] for x in plan_servers({}, {"be": {"z": s["a"]}}, {"be": {}}).steps()] == [
        "del server be/z"]


def test_a_server_added_at_run_time_has_the_arguments_of_one_in_the_file() -> None:
    # `add server` inherits nothing (HAProxy 2.6 gives it not even the idle
    # pool a server of the file has by default): each is written out in both.
    pools = {("a", "A"): pool("r1")}
    layout = decide(RouteTable([Target("/", "a", "A")]), pools, 5.0)
    want = servers(layout, pools)
    text = render(layout, want, EngineSettings("127.0.0.1:8000", "127.0.0.1:1", "127.0.0.1:9"))
    (add, *_) = [step[3] for step in plan_servers({}, {}, want).steps()]
    backend, _, arguments = add.removeprefix("add server ").partition("/")
    assert f"backend {backend}\n" in text and f"\n    server {arguments}\n" in text
    assert "pool-max-conn -1 pool-purge-delay 5s" in arguments


def test_every_backend_carries_the_proxys_hop_pass_when_it_has_one() -> None:
    """Replicas of a cluster with credentials serve only callers with a pass
    (issue 52): HAProxy sets the proxy's on every request to a replica (and a
    client's own is replaced, not kept)."""
    from dataclasses import replace

    pools = {("a", "A"): pool("r1"), ("b", "B"): pool("r2")}
    layout = decide(RouteTable([Target("/a", "a", "A"), Target("/b", "b", "B")]), pools, 5.0)
    settings = EngineSettings("127.0.0.1:8000", "127.0.0.1:1", "127.0.0.1:9")
    plain = render(layout, servers(layout, pools), settings)
    assert "x-servefleet-hop" not in plain
    passed = render(replace(layout, hop_pass="sfh1.abc.def"), servers(layout, pools), settings)
    assert passed.count('http-request set-header x-servefleet-hop "sfh1.abc.def"') == 2
    assert replace(layout, hop_pass="sfh1.abc.def") != layout  # a new pass is a reload


def test_the_proxy_s_own_paths_skip_a_route_that_would_take_them() -> None:
    settings = EngineSettings("127.0.0.1:8000", "127.0.0.1:1", "127.0.0.1:9")
    own = "http-request set-var(txn.route) int(-1) if { path /-/healthz /-/metrics /-/routes }"
    for prefixes, taken in ((["/", "/api"], True), (["/-"], True), (["/api", "/-x"], False)):
        table = RouteTable([Target(p, "a", f"D{i}") for i, p in enumerate(prefixes)])
        pools = {("a", f"D{i}"): pool(f"r{i}") for i in range(len(prefixes))}
        text = render(decide(table, pools, 5.0), {}, settings)
        assert (own in text) == taken, prefixes
        if taken:  # before any route's rule sets one
            assert text.index(own) < text.index("http-request set-var(txn.route) int(0)")


STAT = """# pxname,svname,qcur,qmax,scur,smax,slim,stot,status,req_tot,hrsp_5xx,ttime
servefleet,FRONTEND,,,3,5,,100,OPEN,100,2,
d.a.A,s1,1,1,2,2,4,50,UP,,,
d.a.A,s2,0,0,1,1,4,40,DOWN 2/2,,,
d.a.A,BACKEND,2,3,3,4,,90,UP,90,2,7
other,BACKEND,9,9,9,9,,9,UP,9,9,9
"""


def test_stats_give_queued_ongoing_counters_and_down_servers() -> None:
    load = parse_stat(STAT, {"d.a.A"})["d.a.A"]
    assert (load.queued, load.ongoing, load.requests, load.errors, load.mean_ms) == (
        3, 3, 90, 2, 7)
    assert load.down == ["s2"]


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="scripts/setup installs haproxy")
def test_haproxy_accepts_the_configuration(tmp_path) -> None:
    table = RouteTable([Target("/", "a", "Root"), Target("/api", "a", "Api",
                                                         split=(("Api", 1), ("B", 1))),
                        Target("/py", "p", "P", require_token=True)])
    pools = {("a", "Root"): pool("r1"), ("a", "Api"): pool("a1", max_queued=0),
             ("a", "B"): pool("b1", max_queued=3), ("p", "P"): pool("p1")}
    layout = decide(table, pools, 5.0)
    lua = tmp_path / "x.lua"
    lua.write_text(HOP_BY_HOP_LUA)
    text = render(layout, servers(layout, pools), EngineSettings(
        "127.0.0.1:8000", "127.0.0.1:1", f"unix@{tmp_path}/s.sock", lua=str(lua)))
    assert f"default_backend {PYTHON_BACKEND}" in text
    (tmp_path / "h.cfg").write_text(text)
    checked = subprocess.run(["haproxy", "-c", "-f", str(tmp_path / "h.cfg")],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "[WARNING]" not in checked.stdout + checked.stderr  # rules in HAProxy's order
    empty = render(Layout((), (), 60.0, 1 << 20), {}, EngineSettings(
        "[::1]:8000", "127.0.0.1:1", "127.0.0.1:9", lua=str(lua)))
    assert "bind ipv6@::1:8000" in empty and "status 431" not in empty  # the buffer's 400
    assert "status 414" not in empty  # 64 KiB: past the buffer, HAProxy's 400 too
    # Each configuration makes request ids of its own prefix (a reload restarts
    # the worker's counter); the listener's scheme is the one forwarded.
    made = r"add-header x-request-id ([0-9a-f]{16})%\{\+X\}Ts%\{\+X\}rt unless"
    prefixes = {m[1] for t in (text, empty) if (m := re.search(made, t))}
    assert len(prefixes) == 2
    assert "set-header x-forwarded-proto http if !fwd_trusted || !fwd_proto_ok" in empty
    tls = render(layout, {}, EngineSettings("127.0.0.1:8000", "127.0.0.1:1", "127.0.0.1:9",
                                             tls_pem="/x.pem"))
    assert "set-header x-forwarded-proto https if !fwd_trusted || !fwd_proto_ok" in tls
    small = render(layout, servers(layout, pools), EngineSettings(
        "127.0.0.1:8000", "127.0.0.1:1", "127.0.0.1:9", lua=str(lua),
        limits=EdgeLimits(max_header_bytes=8192, max_url_bytes=4096)))
    assert "req.hdrs,length gt 8192" in small and "url,length gt 4096" in small
    (tmp_path / "small.cfg").write_text(small)
    assert subprocess.run(["haproxy", "-c", "-f", str(tmp_path / "small.cfg")],
                          capture_output=True).returncode == 0


def test_engine_load_adds_to_the_pools_load_and_traffic_rates() -> None:
    from servefleet._private.dataplane.load_report import EngineLoad, merge_traffic

    assert merge_traffic({"a/A": (10, 5.0, 1.0, 9.0, 1)}, {"a/A": (20, 0.5, 2.0, 3.0, 2),
                                                          "a/B": (1, 1.0, 1.0, 1.0, 0)}) == {
        "a/A": (210, 5.0, 2.0, 3.0, 21), "a/B": (1, 1.0, 1.0, 1.0, 0)}
    assert EngineLoad().counts == {} and EngineLoad().ejected == []


def test_the_request_log_gives_failures_of_haproxy_s_backends_only() -> None:
    from servefleet._private.dataplane.recent_errors import RecentErrors
    from servefleet.proxy.haproxy.logs import EngineLog

    errors = RecentErrors()
    log = EngineLog(errors, lambda b: ("a", "A", "/a") if b == "d.a.A" else None)
    for line in ['500 d.a.A 3 GET "/a/x" id with spaces', '200 d.a.A 1 GET "/a" ok-1',
                 '502 python_path 1 GET "/b" counted-there', '400 servefleet 0 <BADREQ> '
                 '"<BADREQ>" -', "Proxy servefleet stopped (cumulated conns: FE: 1, BE: 0)."]:
        log.line(line)
    (failed,) = errors.take()
    assert (failed.application, failed.deployment, failed.route, failed.http_status,
            failed.request_id) == ("a", "A", "/a", 500, "id with spaces")


def test_a_chunked_exporter_answer_is_read_whole() -> None:
    from servefleet.proxy.haproxy.front import dechunked

    assert dechunked(b"5\r\nhello\r\n6;x=1\r\n world\r\n0\r\n\r\n") == b"hello world"
    assert dechunked(b"") == b""


def test_directories_of_killed_proxies_are_swept(tmp_path) -> None:
    import fcntl

    from servefleet.proxy.haproxy.process import OWNER, PREFIX, sweep_stale

    dirs = {name: tmp_path / f"{PREFIX}{name}" for name in ("killed", "alive", "unowned", "new")}
    for path in dirs.values():
        path.mkdir()
        (path / "haproxy.cfg").write_text("")
    (dirs["killed"] / OWNER).write_text("7")  # its process, whoever it was, holds no lock
    # A proxy starting: its owner file made, not locked yet (it writes its pid once locked).
    (dirs["new"] / OWNER).write_text("")
    with open(dirs["alive"] / OWNER, "w") as held:  # a live proxy, in any pid namespace
        fcntl.flock(held, fcntl.LOCK_EX)
        assert sweep_stale(str(tmp_path)) == [str(dirs["killed"])]
    assert not dirs["killed"].exists()
    assert dirs["alive"].exists() and dirs["unowned"].exists() and dirs["new"].exists()


def test_a_cli_connection_closed_at_once_is_a_cli_error(tmp_path, monkeypatch) -> None:
    """HAProxy's master can close a CLI connection as it is made (at its start,
    say); uvloop then raises RuntimeError on the write, which must be a
    CliError the start's retry loop takes (CI saw it end a proxy)."""
    import asyncio

    import uvloop

    from servefleet.proxy.haproxy import cli as cli_module

    path = str(tmp_path / "master.sock")
    opened = asyncio.open_unix_connection

    async def closed_at_once(socket_path: str):
        reader, writer = await opened(socket_path)
        writer.transport.close()
        await asyncio.sleep(0)  # the transport's handle is closed by now
        return reader, writer

    async def main() -> None:
        server = await asyncio.start_unix_server(lambda r, w: w.close(), path)
        async with server:
            monkeypatch.setattr(cli_module.asyncio, "open_unix_connection", closed_at_once)
            with pytest.raises(cli_module.CliError, match="show info"):
                await cli_module.MasterCli(path).worker("show info")

    uvloop.run(main())


def test_the_engine_names_a_replica_set_only_once_haproxy_took_it() -> None:
    """What the proxy's load reports say HAProxy routes by (engine.applied)
    changes only after the runtime API answered every command of the sync."""
    import asyncio

    from servefleet._private.dataplane.upstream import UpstreamPool
    from servefleet.proxy.haproxy.engine import HaproxyEngine
    from servefleet.proxy.state import ProxyState
    from servefleet.v1 import watch_pb2

    class SlowHaproxy:  # HAProxy's process, its runtime API held until `answer` is set
        def __init__(self) -> None:
            self.answer = asyncio.Event()
            self.cli = self
            self.commands: list[str] = []

        async def start(self, config: str) -> None:
            pass

        def running(self) -> bool:
            return True

        async def worker(self, command: str) -> str:
            self.commands.append(command)
            await self.answer.wait()
            return "New server registered." if command.startswith("add") else ""

    def replicas(snapshot_id: str, *ids: str) -> watch_pb2.Snapshot:
        return watch_pb2.Snapshot(key="replicas/a/A", snapshot_id=snapshot_id,
                                  replicas=watch_pb2.ReplicaSet(
                                      application="a", deployment="A", max_ongoing_requests=4,
                                      endpoints=[watch_pb2.ReplicaEndpoint(
                                          replica_id=i, http_address=f"127.0.0.1:{9000 + n}")
                                          for n, i in enumerate(ids)]))

    async def main() -> None:
        state = ProxyState(UpstreamPool())
        state.apply(watch_pb2.Snapshot(key="routes", snapshot_id="r", routes=watch_pb2.RouteTable(
            routes=[watch_pb2.Route(route_prefix="/a", application="a",
                                    deployment="A")])))
        state.apply(replicas("s1", "r1"))
        process = SlowHaproxy()
        engine = HaproxyEngine(state, EngineSettings("127.0.0.1:8000", "127.0.0.1:1",
                                                     "127.0.0.1:9"),
                               lambda: 60.0, process=process)  # type: ignore[arg-type]
        told: list[dict[str, str]] = []
        engine.on_applied = lambda: told.append(dict(engine.applied))
        await engine.start()
        assert engine.applied == {"a/A": "s1"} and told == [{"a/A": "s1"}]
        state.apply(replicas("s2", "r2"))  # r1 leaves, r2 comes
        syncing = asyncio.create_task(engine.sync())
        for _ in range(20):
            await asyncio.sleep(0)
        assert process.commands and not syncing.done()
        assert engine.applied == {"a/A": "s1"}  # HAProxy has not answered yet
        process.answer.set()
        await syncing
        assert engine.applied == {"a/A": "s2"} and told[-1] == {"a/A": "s2"}
        assert any(c.startswith("add server") for c in process.commands)

    asyncio.run(main())
