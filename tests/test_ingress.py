"""`ingress(app)` in one process, through the ASGI interface a replica uses
(servefleet/_private/applications/ingress.py); tests/test_ingress_served.py serves the same apps
through real processes."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import httpx
import pytest
from fastapi import APIRouter, FastAPI
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse

from servefleet import deployment
from servefleet._private.applications.asgi_lifespan import LifespanError
from servefleet._private.applications.ingress import ingress, is_ingress, start_app, stop_app

APPS = str(Path(__file__).parent / "apps")


@pytest.fixture
def apps_module() -> Iterator[ModuleType]:
    sys.path.insert(0, APPS)
    try:
        yield importlib.import_module("ingress_app")
    finally:
        sys.path.remove(APPS)


@contextlib.asynccontextmanager
async def http(instance: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=instance)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


async def test_route_methods_run_on_the_instance_that_got_the_request(apps_module) -> None:
    cls = apps_module.Shop.func_or_class
    one, two = cls("one"), cls("two")
    assert is_ingress(one) and cls.__name__ == cls.__qualname__ == "Shop"
    async with http(one) as first, http(two) as second:
        put = await first.put("/items/7", json={"name": "lamp", "price": 9.5})
        assert (put.status_code, put.json()) == (201, {"stored": 7, "count": 1})
        assert (await first.get("/items/7", params={"q": "x"})).json() == {
            "owner": "one", "item_id": 7, "q": "x", "item": {"name": "lamp", "price": 9.5}}
        assert (await second.get("/items/7")).json()["item"] is None  # its own state
        assert (await second.get("/items/7")).json()["owner"] == "two"
        # FastAPI's validation, as for any route: path type, body schema.
        assert (await first.get("/items/lamp")).status_code == 422
        assert (await first.put("/items/1", json={"name": "x"})).status_code == 422
        # A route of the app outside the class, with the lifespan's state.
        outside = (await first.get("/outside")).json()
        assert outside["outside"] is True and isinstance(outside["started_in"], int)
        home = (await first.get("/")).json()
        assert (home["owner"], home["url"]) == ("one", "http://test/")
    assert one.count() == 1 and two.count() == 0  # other methods: plain methods, for handles
    await stop_app(one)
    await stop_app(two)


async def websocket_exchange(instance: Any, path: str, texts: list[str],
                             root_path: str = "") -> list[dict]:
    """One WebSocket session as a server drives it: connect, the texts, disconnect."""
    incoming: asyncio.Queue[dict] = asyncio.Queue()
    sent: list[dict] = []
    for message in ({"type": "websocket.connect"},
                    *({"type": "websocket.receive", "text": t} for t in texts)):
        incoming.put_nowait(message)

    async def receive() -> dict:
        if incoming.empty() and len([m for m in sent if m["type"] == "websocket.send"]) \
                == len(texts):
            return {"type": "websocket.disconnect", "code": 1000}
        return await incoming.get()

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "websocket", "path": root_path + path, "raw_path": b"",
             "root_path": root_path, "query_string": b"", "headers": [], "scheme": "ws",
             "server": ("test", 80), "subprotocols": [], "asgi": {"version": "3.0"}}
    await asyncio.wait_for(instance(scope, receive, send), 10)
    return sent


async def test_a_websocket_route_on_the_class_and_root_path_under_a_prefix(apps_module
                                                                           ) -> None:
    shop = apps_module.Shop.func_or_class("ws-owner")
    sent = await websocket_exchange(shop, "/ws/lobby", ["hello", "again"], "/shop")
    assert sent[0]["type"] == "websocket.accept"
    assert [m["text"] for m in sent if m["type"] == "websocket.send"] == [
        "ws-owner@lobby: hello", "ws-owner@lobby: again"]
    transport = httpx.ASGITransport(app=shop, root_path="/shop")
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        home = (await client.get("/shop/")).json()
    assert (home["root_path"], home["url"]) == ("/shop", "http://test/shop/")
    await stop_app(shop)


async def test_the_builder_form_makes_one_app_per_instance(apps_module) -> None:
    built = apps_module.Built.func_or_class("b")
    other = apps_module.Built.func_or_class()
    assert built._servefleet_app is not other._servefleet_app and built.label == "b"
    async with http(built) as client:
        assert (await client.get("/sum/2/3")).json() == 5
        assert (await client.get("/")).json() == {"built": True, "root_path": ""}
    # Without a class (Ray's `deployment(ingress(app)())`): an empty class that
    # keeps its init args, with a name in the module for its import path.
    standalone = apps_module.Standalone
    assert standalone.import_path == "ingress_app:ASGIIngressDeployment"
    assert apps_module.ASGIIngressDeployment is standalone.func_or_class
    instance = standalone.func_or_class(1, k=2)
    assert (instance.args, instance.kwargs) == ((1,), {"k": 2})
    async with http(instance) as client:
        assert (await client.get("/sum/1/1")).json() == 2


async def test_plain_asgi_apps_and_routers_are_served_too() -> None:
    starlette_app = Starlette()
    starlette_app.add_route("/", lambda request: PlainTextResponse("star"))

    @ingress(starlette_app)
    class Star:
        pass

    router = APIRouter()

    @ingress(router)
    class Routed:
        def __init__(self) -> None:
            self.n = 41

        @router.get("/n")
        async def next_n(self) -> int:
            return self.n + 1

    async def bare(scope, receive, send) -> None:
        await PlainTextResponse("bare")(scope, receive, send)

    Bare = ingress(bare)()
    for instance, path, text in ((Star(), "/", "star"), (Routed(), "/n", "42"),
                                 (Bare(), "/", "bare")):
        async with http(instance) as client:
            assert (await client.get(path)).text == text


async def test_startup_failure_fails_requests_and_shutdown_runs_once() -> None:
    seen: list[str] = []

    @contextlib.asynccontextmanager
    async def broken(app: FastAPI) -> AsyncIterator[None]:
        seen.append("start")
        raise OSError("no model file")
        yield

    app = FastAPI(lifespan=broken)

    @ingress(app)
    class Broken:
        @app.get("/")
        def root(self) -> str:
            return "never"

    instance = Broken()
    with pytest.raises(LifespanError, match=r"startup failed: OSError: no model file"):
        await start_app(instance)
    with pytest.raises(LifespanError):  # asked again: the same failure, not a second run
        async with http(instance) as client:
            await client.get("/")
    assert seen == ["start"]

    ok_app = FastAPI(lifespan=_recording(seen))

    @ingress(ok_app)
    class Fine:
        pass

    fine = Fine()
    await asyncio.gather(start_app(fine), start_app(fine))
    await stop_app(fine)
    await stop_app(fine)
    assert seen == ["start", "up", "down"]


def _recording(seen: list[str]) -> Any:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        seen.append("up")
        yield
        seen.append("down")
    return lifespan


async def test_a_route_method_on_the_bare_app_says_what_is_wrong() -> None:
    app = FastAPI()

    @ingress(app)
    class Model:
        @app.get("/")
        def root(self) -> str:
            return "x"

    with pytest.raises(RuntimeError, match="served only through that class's @ingress"):
        async with http(app) as client:
            await client.get("/")


def test_bad_input_is_refused_with_the_reason() -> None:
    app = FastAPI()
    with pytest.raises(ValueError, match="may not have a __call__ method"):
        @ingress(app)
        class Callable_:
            def __call__(self) -> None: ...
    with pytest.raises(ValueError, match="must be used with a class"):
        ingress(app)(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got int"):
        ingress(42)
    with pytest.raises(TypeError, match="not the class"):
        ingress(FastAPI)

    def needs(arg: int) -> FastAPI:
        return FastAPI()
    with pytest.raises(TypeError, match=r"must take no arguments \(it has arg\)"):
        ingress(needs)

    @ingress(lambda: 42)
    class Wrong:
        pass
    with pytest.raises(TypeError, match="returned int, not an ASGI app"):
        Wrong()
    with pytest.raises(TypeError, match="takes no `self` parameter"):
        other = FastAPI()

        class Holder:
            @other.get("/")
            @staticmethod
            def nothing() -> None: ...
        ingress(other)(Holder)


SCRIPT = textwrap.dedent('''
    import sys
    import cloudpickle
    from fastapi import FastAPI
    from pydantic import BaseModel
    from servefleet import deployment
    from servefleet._private.applications.ingress import ingress

    app = FastAPI()
    COUNTER = {"calls": 0}

    class Body(BaseModel):
        text: str

    @deployment
    @ingress(app)
    class Echo:
        def __init__(self, prefix):
            self.prefix = prefix

        @app.post("/echo/{times}")
        def echo(self, times: int, body: Body) -> dict:
            COUNTER["calls"] += 1
            return {"echo": self.prefix + body.text * times, "calls": COUNTER["calls"]}

    sys.stdout.buffer.write(cloudpickle.dumps(Echo))
''')


async def test_a_class_defined_in_main_travels_by_value(tmp_path) -> None:
    """Defined in a script's __main__ and pickled there, served here: what a
    replica started by a script's servefleet.run does with it."""
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    done = await asyncio.to_thread(subprocess.run, [sys.executable, str(script)],
                                   capture_output=True, check=True, cwd=tmp_path, timeout=60)
    pickled = done.stdout
    echo = cloudpickle.loads(pickled)
    assert echo.name == "Echo"
    instance = echo.func_or_class(">")
    async with http(instance) as client:
        first = await client.post("/echo/2", json={"text": "ab"})
        assert first.json() == {"echo": ">abab", "calls": 1}
        assert (await client.post("/echo/1", json={"text": "c"})).json()["calls"] == 2


def test_the_wrapper_is_what_deployment_and_its_import_path_name(apps_module) -> None:
    shop = apps_module.Shop
    assert shop.import_path == "ingress_app:Shop" and shop.name == "Shop"
    assert is_ingress(shop.func_or_class) and not is_ingress(object())
    assert deployment(ingress(FastAPI())()).name == "ASGIIngressDeployment"
