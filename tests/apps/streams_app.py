"""A deployment serving tests/apps/grpc_streams (client-streaming and
bidirectional RPCs), with behaviours the tests choose by the first chunk's text:

- "until:NAME@N": after N chunks, stop reading until a file NAME exists in
  `marks` (back-pressure: the test watches the client stop sending meanwhile);
- "hold": after the first chunk, wait until the call ends; a cancelled call
  leaves a file named after its x-request-id in `marks`;
- "fail@N": raise ValueError after N chunks;
- "stop@N": end the call after N chunks with ABORTED through grpc_context;
- anything else: read every chunk (Upload: count them; Echo: send each back).
"""

from __future__ import annotations

import asyncio
import os
import time

import grpc
from grpc_streams.streams_pb2 import Chunk, Summary

from servefleet import deployment

SERVICER = "grpc_streams.streams_pb2_grpc:add_StreamsServicer_to_server"


def _plan(text: str) -> tuple[str, str, int]:
    """(what, its argument, after N chunks) from a chunk's text: "until:go@100"."""
    what, _, after = text.partition("@")
    what, _, argument = what.partition(":")
    return what, argument, int(after or 0)


def _resumed(marks: str, name: str) -> bool:
    """Whether the test said to read on (the callers give up after a minute)."""
    return os.path.exists(os.path.join(marks, name))


class _Tally:
    def __init__(self) -> None:
        self.count = self.bytes = 0
        self.in_order = True

    def add(self, chunk: Chunk) -> None:
        self.in_order = self.in_order and chunk.seq == self.count
        self.count += 1
        self.bytes += len(chunk.data)

    def summary(self) -> Summary:
        return Summary(count=self.count, bytes=self.bytes, replica=str(os.getpid()),
                       in_order=self.in_order)


@deployment
class Streams:
    def __init__(self, marks: str = "") -> None:
        self.marks = marks

    def _mark(self, grpc_context) -> None:
        if self.marks:
            name = dict(grpc_context.invocation_metadata()).get("x-request-id", "x")
            with open(os.path.join(self.marks, name), "w"):
                pass

    async def Upload(self, requests, grpc_context) -> Summary:
        tally, plan = _Tally(), ("", "", 0)
        try:
            async for chunk in requests:
                if tally.count == 0:
                    plan = _plan(chunk.text)
                tally.add(chunk)
                what, argument, after = plan
                if what == "until" and tally.count == after:
                    for _ in range(3000):
                        if _resumed(self.marks, argument):
                            break
                        await asyncio.sleep(0.02)
                elif what == "hold":
                    await asyncio.sleep(3600)
                elif what == "fail" and tally.count == after:
                    raise ValueError(f"failed after {after} chunks")
        except asyncio.CancelledError:
            self._mark(grpc_context)
            raise
        return tally.summary()

    async def Echo(self, requests, grpc_context):
        tally, plan = _Tally(), ("", "", 0)
        try:
            async for chunk in requests:
                if tally.count == 0:
                    plan = _plan(chunk.text)
                tally.add(chunk)
                what, _, after = plan
                if what == "stop" and tally.count > after:
                    grpc_context.set_code(grpc.StatusCode.ABORTED)
                    grpc_context.set_details(f"stopped after {after} chunks")
                    return
                if what == "hold":
                    await asyncio.sleep(3600)
                yield Chunk(seq=chunk.seq, data=chunk.data, text=str(os.getpid()))
        except asyncio.CancelledError:
            self._mark(grpc_context)
            raise

    def UploadSync(self, requests, grpc_context) -> Summary:
        tally, plan = _Tally(), ("", "", 0)
        try:
            for chunk in requests:
                if tally.count == 0:
                    plan = _plan(chunk.text)
                tally.add(chunk)
                what, argument, after = plan
                if what == "until" and tally.count == after:
                    for _ in range(3000):
                        if _resumed(self.marks, argument):
                            break
                        time.sleep(0.02)
        except Exception:  # the call ended while this thread waited for a chunk
            self._mark(grpc_context)
            raise
        return tally.summary()

    def EchoSync(self, requests, grpc_context):
        for chunk in requests:
            yield Chunk(seq=chunk.seq, data=chunk.data, text=str(os.getpid()))


def build(args: dict):
    """The application, with the folder for cancellation marks from its args."""
    return Streams.bind(marks=args.get("marks", ""))
