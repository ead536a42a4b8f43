"""The proxy's request limits with real processes: 431, 413, and a 1 GB upload
that streams through without the proxy holding it."""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

import httpx
import psutil
import pytest
from loadgen import answers

from servefleet._private.testing import wait_for
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as d

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")
GB = 1 << 30


def deploy_counter(client, max_body: int) -> None:
    client.deploy_applications([], partial=True,
                               http_options=apb.HttpOptions(max_request_body_bytes=max_body))
    client.deploy(d.DeploymentSpec(name="Count", import_path="upload_app:count",
                                   route_prefix="/count",
                                   runtime=d.RuntimeOptions(working_dir=APPS)))


def test_large_headers_get_431_and_large_bodies_413(served_by, engine) -> None:
    client, start_proxy = served_by
    deploy_counter(client, max_body=10_000)
    proxy = start_proxy()
    wait_for(lambda: answers(proxy.url + "/count"), 60, "the counter routed")
    assert httpx.post(proxy.url + "/count", content=b"x" * 10_000).text == "10000"

    big_header = httpx.get(proxy.url + "/count", headers={"x-big": "y" * 70_000})
    if engine == "haproxy":
        # HAProxy answers a head larger than its buffer with its own 400
        # (it has no 431), before any rule of ours can run.
        assert big_header.status_code in (400, 431)
    else:
        assert big_header.status_code == 431 and "limit is 65536" in big_header.text

    # Within HAProxy's buffer, the limit is the flag's on both engines.
    small = start_proxy("--max-header-bytes", "8192")
    wait_for(lambda: answers(small.url + "/count"), 60, "the counter routed")
    refused = httpx.get(small.url + "/count", headers={"x-big": "y" * 10_000})
    assert refused.status_code == 431 and "limit is 8192" in refused.text, refused.text

    declared = httpx.post(proxy.url + "/count", content=b"x" * 10_001)
    assert declared.status_code == 413 and "max_request_body_bytes" in declared.text

    def chunks():
        for _ in range(11):
            yield b"x" * 1000
    chunked = httpx.post(proxy.url + "/count", content=chunks())
    assert chunked.status_code == 413
    # The connection and the proxy are fine afterwards.
    assert httpx.post(proxy.url + "/count", content=b"abc").text == "3"


def test_a_1_gb_upload_streams_through_the_proxy(served_by) -> None:
    client, start_proxy = served_by
    deploy_counter(client, max_body=2 * GB)
    proxy = start_proxy()
    wait_for(lambda: answers(proxy.url + "/count"), 60, "the counter routed")
    assert proxy.proc is not None
    watched = psutil.Process(proxy.proc.pid)

    def rss() -> int:
        """The proxy's and its children's (HAProxy's, with --engine haproxy)."""
        total = 0
        for process in [watched, *watched.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                total += process.memory_info().rss
        return total
    before = rss()
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], rss())

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with socket.create_connection(("127.0.0.1", proxy.port)) as s:
            s.sendall(b"POST /count HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % GB)
            block = b"z" * (1 << 20)
            for _ in range(GB // len(block)):
                s.sendall(block)
            answer = b""
            while not answer.endswith(str(GB).encode()):
                data = s.recv(65536)
                if not data:
                    break
                answer += data
    finally:
        done.set()
        sampler.join()
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(str(GB).encode())
    grew = (peak[0] - before) >> 20
    print(f"the proxy's RSS: {before >> 20} MB before, peaked {grew} MB above")
    assert grew < 50, f"the proxy's RSS grew {grew} MB: the body was held, not streamed"
