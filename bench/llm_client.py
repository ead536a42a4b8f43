"""A load generator for token streams: N clients, each on its own kept-alive
connection, POST an OpenAI completions request with `stream: true` again and
again, and time each answer's server-sent events.

Per request it records the time to the first event (time to first token),
the number of events before `data: [DONE]` (tokens: one completions chunk
per generated token) and the time to the last. HTTP/1.1 is parsed with
httptools (the parser uvicorn uses) so that the client's own cost stays small
beside the servers it measures; it runs on the same two cores.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import httptools  # type: ignore[import-untyped]

DONE = b"data: [DONE]"


@dataclass
class Streamed:
    ttft_s: list[float] = field(default_factory=list)
    tokens: int = 0
    requests: int = 0
    errors: int = 0


class _Answer:
    """httptools callbacks for one response: status, SSE events as they come."""

    def __init__(self, sent_at: float, seen: Streamed) -> None:
        self.sent_at, self.seen = sent_at, seen
        self.status = 0
        self.first = True
        self.buffer = b""
        self.done = asyncio.get_running_loop().create_future()
        self.parser = httptools.HttpResponseParser(self)

    def on_status(self, status: bytes) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.buffer += body
        *events, self.buffer = self.buffer.split(b"\n\n")
        for event in events:
            if not event.startswith(b"data:") or event == DONE:
                continue
            if self.first:
                self.first = False
                self.seen.ttft_s.append(time.perf_counter() - self.sent_at)
            self.seen.tokens += 1

    def on_message_complete(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


def request_bytes(host: str, port: int, path: str, model: str, prompt: str,
                  max_tokens: int) -> bytes:
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens,
                       "stream": True, "temperature": 1.0, "seed": 7}).encode()
    return (f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
            ).encode() + body


async def _client(host: str, port: int, request: bytes, until: float,
                  seen: Streamed) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while time.perf_counter() < until:
            answer = _Answer(time.perf_counter(), seen)
            writer.write(request)
            while not answer.done.done():
                data = await reader.read(65536)
                if not data:
                    raise ConnectionError("the server closed the connection")
                answer.parser.feed_data(data)
            seen.requests += 1
            if answer.status != 200:
                seen.errors += 1
    finally:
        writer.close()


async def load(host: str, port: int, path: str, model: str, prompt: str, max_tokens: int,
               streams: int, duration_s: float) -> tuple[Streamed, float]:
    """`streams` clients for `duration_s` (each finishes its last request): what
    they saw, and the seconds it took."""
    seen = Streamed()
    request = request_bytes(host, port, path, model, prompt, max_tokens)
    started = time.perf_counter()
    await asyncio.gather(*(_client(host, port, request, started + duration_s, seen)
                           for _ in range(streams)))
    return seen, time.perf_counter() - started
