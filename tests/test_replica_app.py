"""The replica's HTTP app and loader in-process, through httpx's ASGI transport."""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
from pathlib import Path

import httpx
import pytest
from starlette.responses import PlainTextResponse

from servefleet.replica import loader
from servefleet.replica.http import Admission, ReplicaApp

APPS = str(Path(__file__).parent / "apps")


class Thing:
    def __init__(self, greeting: str = "hi") -> None:
        self.greeting = greeting

    def __call__(self, request):  # sync: must run off the event loop
        return {"greeting": self.greeting, "thread": threading.current_thread().name}


async def returns(request):
    kind = request.query_params["kind"]
    return {"str": "text", "bytes": b"\x00\x01", "list": [1, 2],
            "response": PlainTextResponse("custom", status_code=201)}[kind]


async def boom(request):
    raise KeyError("missing")


def app_for(target, max_ongoing: int = 5) -> tuple[ReplicaApp, Admission]:
    admission = Admission(max_ongoing)
    app = ReplicaApp(admission, concurrent.futures.ThreadPoolExecutor(4, "user"), "r1")
    app.deployment = loader.build(target, [], {}, False) if not isinstance(
        target, loader.UserDeployment) else target
    admission.ready = True
    return app, admission


def client(app: ReplicaApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://r")


async def test_sync_class_runs_in_the_thread_pool() -> None:
    app, _ = app_for(loader.build(Thing, ["hello"], {}, False))
    async with client(app) as c:
        reply = (await c.get("/")).json()
    assert reply["greeting"] == "hello" and reply["thread"].startswith("user")


@pytest.mark.parametrize(("kind", "status", "body", "content_type"), [
    ("str", 200, b"text", "text/plain"),
    ("bytes", 200, b"\x00\x01", "application/octet-stream"),
    ("list", 200, b"[1,2]", "application/json"),
    ("response", 201, b"custom", "text/plain"),
])
async def test_return_values_become_responses(kind, status, body, content_type) -> None:
    app, _ = app_for(returns)
    async with client(app) as c:
        reply = await c.get("/", params={"kind": kind})
    assert reply.status_code == status and reply.content == body
    assert reply.headers["content-type"].startswith(content_type)


async def test_generators_stream() -> None:
    sys.path.insert(0, APPS)
    import echo_app

    for fn, expected in ((echo_app.numbers, b"0\n1\n2\n"),
                         (echo_app.ticks, b"tick 0\ntick 1\ntick 2\n")):
        app, _ = app_for(fn)
        async with client(app) as c, c.stream("GET", "/") as reply:
            chunks = [chunk async for chunk in reply.aiter_bytes()]
        assert b"".join(chunks) == expected


async def test_function_and_asgi_app_deployments() -> None:
    hello = loader.build(loader.import_attr("echo_app:hello", APPS), [], {}, False)
    assert not hello.is_asgi
    app, _ = app_for(hello)
    async with client(app) as c:
        assert (await c.get("/", params={"name": "fleet"})).text == "hello fleet"
    asgi = loader.build(loader.import_attr("echo_app:asgi_app", APPS), [], {}, False)
    assert asgi.is_asgi
    app, _ = app_for(asgi)
    async with client(app) as c:
        reply = await c.get("/items/7", headers={"x-request-id": "abc"})
    assert reply.json() == {"item": "7"} and reply.headers["x-request-id"] == "abc"


async def test_request_id_created_when_missing_and_user_errors_are_500() -> None:
    app, _ = app_for(boom)
    async with client(app) as c:
        reply = await c.get("/")
    assert reply.status_code == 500 and "KeyError" in reply.text
    assert len(reply.headers["x-request-id"]) == 32


async def test_admission_refuses_when_loading_full_or_draining() -> None:
    gate = asyncio.Event()

    async def slow(request):
        await gate.wait()
        return "done"

    app, admission = app_for(slow, max_ongoing=1)
    async with client(app) as c:
        first = asyncio.create_task(c.get("/"))
        while admission.ongoing < 1:
            await asyncio.sleep(0.01)
        full = await c.get("/")
        assert full.status_code == 503 and full.headers["x-servefleet-rejected"] == "overloaded"
        gate.set()
        assert (await first).text == "done"
        admission.draining = True
        draining = await c.get("/")
        assert draining.headers["x-servefleet-rejected"] == "draining"
        assert draining.headers["connection"] == "close"
        admission.draining, admission.ready = False, False
        assert (await c.get("/")).headers["x-servefleet-rejected"] == "loading"
    # Told to drain, in its first wait loop: requests still, WebSockets no more.
    admission.ready, admission.leaving = True, True
    assert admission.refusal() is None and admission.refusal(websocket=True) == "draining"



async def test_engine_checks_and_refusals_for_status_only_retries() -> None:
    """An HAProxy engine's check is answered without user code (up while full,
    down while loading or draining); its refusals come as 425 when asked."""
    gate = asyncio.Event()
    calls = []

    async def slow(request):
        calls.append(request.url.path)
        await gate.wait()
        return "done"

    app, admission = app_for(slow, max_ongoing=1)
    check = {"x-servefleet-check": "1"}
    async with client(app) as c:
        assert (await c.get("/", headers=check)).status_code == 200 and not calls
        first = asyncio.create_task(c.get("/work"))
        while admission.ongoing < 1:
            await asyncio.sleep(0.01)
        assert (await c.get("/", headers=check)).text == "ok"  # full is not down
        full = await c.get("/", headers={"x-servefleet-refusal-status": "425"})
        assert full.status_code == 425 and full.headers["x-servefleet-rejected"] == "overloaded"
        assert (await c.get("/", headers={"x-servefleet-refusal-status": "400"})).status_code \
            == 503  # only 425 may be asked for
        gate.set()
        assert (await first).text == "done" and calls == ["/work"]
        admission.draining = True
        down = await c.get("/", headers=check)
        assert down.status_code == 503 and down.text == "draining"
        admission.draining, admission.ready = False, False
        assert (await c.get("/", headers=check)).text == "loading"

def test_loader_errors() -> None:
    with pytest.raises(loader.LoadError, match="no attribute"):
        loader.import_attr("echo_app:nope", APPS)
    with pytest.raises(ModuleNotFoundError):
        loader.import_attr("no_such_module_here:x", APPS)
    with pytest.raises(loader.LoadError, match="reconfigure"):
        loader.build(Thing, [], {}, has_user_config=True)
    with pytest.raises(loader.LoadError, match="not a class"):
        loader.build(loader.import_attr("echo_app:hello", APPS), [1], {}, False)


async def test_sync_code_keeps_its_slot_until_its_thread_ends_after_a_disconnect() -> None:
    release = threading.Event()

    def blocking(request):
        release.wait(10)
        return "late"

    app, admission = app_for(blocking, max_ongoing=1)
    left = asyncio.Event()
    sent: list[dict] = []
    bodies = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive():
        if bodies:
            return bodies.pop()
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/", "raw_path": b"/",
             "query_string": b"", "headers": [], "http_version": "1.1"}
    call = asyncio.create_task(app(scope, receive, send))
    while admission.ongoing < 1:
        await asyncio.sleep(0.01)
    left.set()
    await asyncio.sleep(0.1)  # the disconnect is seen and the call cancelled
    assert not call.done() and admission.ongoing == 1, "slot released while the thread runs"
    release.set()
    await asyncio.wait_for(call, 10)
    assert admission.ongoing == 0 and sent == []


async def reads_its_body(request):
    whole = await request.body()
    streamed = b"".join([chunk async for chunk in request.stream()])
    return {"body": whole.decode(), "streamed": streamed.decode()}


async def test_the_body_is_there_for_the_handler_with_or_without_one() -> None:
    """A request that says no body follows is not waited on for one (the
    handler gets b""); one with a length or chunked gets all of it."""
    app, _ = app_for(reads_its_body)

    async def chunked():
        yield b"ab"
        yield b"cd"
    async with client(app) as c:
        assert (await c.get("/")).json() == {"body": "", "streamed": ""}
        assert (await c.post("/", content=b"xyz")).json() == {"body": "xyz", "streamed": "xyz"}
        assert (await c.post("/", content=chunked())).json() == {"body": "abcd",
                                                                 "streamed": "abcd"}


@pytest.mark.parametrize("result", ["héllo", {"a": [1, 2.5, None], "é": "ü"}, [1, "x"], ""])
def test_plain_answers_are_what_starlette_would_send(result) -> None:
    """str, dict and list results skip Starlette's response objects: same bytes,
    same content type."""
    from servefleet.replica.answers import plain_answer, to_response

    expected = to_response(result)
    assert plain_answer(result) == (expected.body, expected.headers["content-type"].encode())
    assert plain_answer(b"x") is None and plain_answer(3) is None
