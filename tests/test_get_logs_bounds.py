"""GetLogs' bounds (controller/api/log_bounds.py): long lines cut, lines packed
into messages a client can read, a cap on the bytes of a call and on the
time of a follow. Unit tests drive the real servicer over a fake runtime and
leader term (the logic between them is the subject); one test reads a real
replica's 5 MB line through a real controller."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from servefleet._private.testing import ControllerProcess, stop_cluster, wait_for
from servefleet.client import ControllerClient
from servefleet.controller.api.log_bounds import GET_LOGS, LogBounds, cut_line
from servefleet.controller.api.servicer import ControllerServicer
from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2, status_pb2

APPS = str(Path(__file__).parent / "apps")
RECORD = replica_pb2.ReplicaRecord(replica_id="Dep-1", application="app", deployment="Dep")


class FakeRuntime:
    """Replica output: `past` for a tail read, then one of `more` per poll."""

    def __init__(self, past: str, more: str = "") -> None:
        self.past, self.more, self.polls = past, more, 0

    def read_logs(self, replica_id: str, cursor: str, lines: int) -> tuple[str, str]:
        self.polls += 1
        if not cursor:
            return "".join(self.past.splitlines(keepends=True)[-lines:]), "1"
        return self.more, str(int(cursor) + 1)


class FakeContext:
    def __init__(self) -> None:
        self.status: tuple[grpc.StatusCode, str] | None = None

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.status = (code, details)
        raise grpc.aio.AbortError()

    def done(self) -> bool:
        return self.status is not None


def servicer(runtime: FakeRuntime, bounds: LogBounds = GET_LOGS) -> ControllerServicer:
    term: Any = SimpleNamespace(runtime=runtime, deployments=SimpleNamespace(live=lambda: []),
                           observed=SimpleNamespace(deployments={("app", "Dep"): SimpleNamespace(
                               replicas=[SimpleNamespace(record=RECORD)])}))
    served = ControllerServicer("c", SimpleNamespace(can_serve=lambda: True),  # type: ignore[arg-type]
                                lambda: term, None, lambda: None)  # type: ignore[arg-type]
    served.log_bounds = bounds
    return served


async def read(served: ControllerServicer, request: api.GetLogsRequest,
               context: FakeContext) -> list[api.GetLogsResponse]:
    got = []
    try:
        async for message in served.GetLogs(request, context):  # type: ignore[arg-type]
            got.append(message)
    except grpc.aio.AbortError:
        pass
    return got


def test_a_line_is_cut_at_the_bound_on_a_character() -> None:
    assert cut_line("short", 10) == ("short", 5)
    assert cut_line("x" * 30, 10) == ("x" * 10 + "... [20 bytes cut]", 28)
    # "é" is 2 bytes: the one the bound splits is dropped whole.
    text, size = cut_line("aé" * 10, 5)
    assert text == "aéa... [26 bytes cut]" and size == 4 + len("... [26 bytes cut]")


async def test_lines_go_out_cut_and_in_messages_a_client_can_read() -> None:
    past = "start " + "x" * 5_000_000 + "\n" + "".join(f"{i:05d}" + "y" * 2000 + "\n"
                                                      for i in range(1500))
    context = FakeContext()
    got = await read(servicer(FakeRuntime(past)), api.GetLogsRequest(tail_lines=2000),
                     context)
    assert context.status is None
    lines = [line for message in got for line in message.lines]
    assert lines[0] == "start " + "x" * (64 * 1024 - 6) + \
        f"... [{5_000_006 - 64 * 1024} bytes cut]"
    assert [line[:5] for line in lines[1:]] == [f"{i:05d}" for i in range(1500)]
    assert all(message.ByteSize() < 1024 * 1024 + 4096 for message in got), [
        message.ByteSize() for message in got]
    assert len(got) == 3 and {m.replica_id for m in got} == {"Dep-1"}  # 2.9 MiB


async def test_a_call_ends_resource_exhausted_past_its_bytes() -> None:
    # 100-byte lines, ten per poll, with follow: the call stops at 5,000 bytes.
    runtime = FakeRuntime("", ("z" * 99 + "\n") * 10)
    context = FakeContext()
    served = servicer(runtime, LogBounds(max_call_bytes=5_000))
    got = await asyncio.wait_for(read(served, api.GetLogsRequest(follow=True), context), 60)
    assert sum(len(m.lines) for m in got) == 50  # 50 lines of 100 bytes, none cut
    assert context.status is not None
    code, details = context.status
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "at most 5000 bytes of lines per call" in details and "tail_lines" in details


@pytest.mark.parametrize("client_reads", [True, False])
async def test_a_follow_ends_deadline_exceeded_after_its_bound(client_reads: bool) -> None:
    """Whether the handler polls or waits on a client that stopped reading."""
    context = FakeContext()
    served = servicer(FakeRuntime("one line\n", "more\n"), LogBounds(max_follow_s=1.0))

    async def client() -> None:
        async for _ in served.GetLogs(api.GetLogsRequest(follow=True), context):  # type: ignore[arg-type]
            if not client_reads:
                await asyncio.Event().wait()  # as a write its client never reads

    task = asyncio.create_task(client())
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 60)
    await asyncio.sleep(0)  # the abort runs in a task of its own (stream_end.py)
    assert context.status == (grpc.StatusCode.DEADLINE_EXCEEDED,
                              "GetLogs follows for at most 1 s per call; call again to go on")


async def test_a_tail_or_a_follow_that_ends_first_leaves_no_timer() -> None:
    context = FakeContext()
    served = servicer(FakeRuntime("a\n"), LogBounds(max_follow_s=0.5))
    got = await read(served, api.GetLogsRequest(), context)
    assert [list(m.lines) for m in got] == [["a"]]
    await asyncio.sleep(0.8)
    assert context.status is None


@pytest.mark.slow
def test_a_replicas_5_mb_line_reaches_the_client_cut(tmp_path: Path, cluster: str) -> None:
    """It was one message of 5 MB, which gRPC clients refuse (their 4 MiB)."""
    controller = ControllerProcess(f"sqlite://{tmp_path}/state.db", cluster=cluster,
                                   log_dir=tmp_path).start()
    client = ControllerClient([controller.address], timeout=30)
    try:
        client.deploy(d.DeploymentSpec(name="LongLine", import_path="long_line_app:LongLine",
                                       runtime=d.RuntimeOptions(working_dir=APPS)))
        wait_for(lambda: any(dep.status == status_pb2.DEPLOYMENT_STATUS_HEALTHY
                             for app in client.status().applications
                             for dep in app.deployments), 60, "LongLine healthy")
        lines = [line for chunk in client.logs(deployment="LongLine", tail_lines=50)
                 for line in chunk.lines]
        (long,) = [line for line in lines if line.startswith("start ")]
        assert long == "start " + "x" * (64 * 1024 - 6) + \
            f"... [{5_000_006 - 64 * 1024} bytes cut]"
        assert "after the long line" in lines
    finally:
        stop_cluster(controller, client)
