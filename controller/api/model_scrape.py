"""Scraping RUNNING replicas' /metrics for the dashboard's model figures.

The flow, driven by the dashboard (dashboard.py), never by a timer:

1. Each GET /api/status calls `poll` with the RUNNING replicas' metrics
   addresses (from the replica registry: the runtime chose them; nothing a
   replica says moves the scrape elsewhere). When the last round started
   INTERVAL_S ago and none is running, `poll` starts one in the background
   and returns at once: /api/status never waits for a replica.
2. A round fetches every replica's /metrics, CONCURRENCY at a time, each
   with one deadline (TIMEOUT_S for connect, request and answer) and a size
   cap (MAX_BYTES); plain HTTP/1.0, as Prometheus scrapes them (replicas
   serve their metrics port without TLS).
3. Each answer is read for MODEL_METRICS only (prom_text.py, in a thread),
   and recorded in ModelFigures, which recomputes the figures at the end
   of the round. An answer that is late, too large or malformed is dropped
   and logged (a warning the first time for that replica, then debug until
   it answers well again); the replica's older samples age out.

Nobody polling: no scrapes. Replicas are never asked for anything else.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from .model_figures import MODEL_METRICS, ModelFigures, ModelSample, TooManyModels, by_model
from .prom_text import BadExposition, parse

logger = logging.getLogger(__name__)

INTERVAL_S = 2.0
TIMEOUT_S = 1.0
MAX_BYTES = 2 * 1024 * 1024
MAX_HEAD_BYTES = 16 * 1024
CONCURRENCY = 16


class ScrapeError(Exception):
    """No usable answer; the message says why."""


@dataclass(frozen=True)
class Target:
    replica_id: str
    application: str
    deployment: str
    metrics_address: str  # host:port of the replica's metrics port


async def fetch_metrics(address: str, timeout_s: float = TIMEOUT_S,
                        max_bytes: int = MAX_BYTES) -> str:
    """The body of GET http://address/metrics; ScrapeError when there is no
    answer in `timeout_s`, it is not a 200, or it is past `max_bytes`."""
    host, _, port = address.rpartition(":")
    writer = None
    raw = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host.strip("[]"), int(port))
            writer.write(f"GET /metrics HTTP/1.0\r\nHost: {address}\r\nAccept: text/plain\r\n"
                         "Connection: close\r\n\r\n".encode())
            await writer.drain()
            while chunk := await reader.read(64 * 1024):
                raw += chunk
                if len(raw) > max_bytes + MAX_HEAD_BYTES:
                    raise ScrapeError(f"an answer larger than {max_bytes} bytes")
    except TimeoutError:
        raise ScrapeError(f"no whole answer in {timeout_s:g} s") from None
    except (OSError, ValueError) as e:
        raise ScrapeError(f"cannot read it: {e}") from None
    finally:
        if writer is not None:
            writer.close()
    return _body(bytes(raw), max_bytes)


def _body(raw: bytes, max_bytes: int) -> str:
    head, blank, body = raw.partition(b"\r\n\r\n")
    if not blank or len(head) > MAX_HEAD_BYTES:
        raise ScrapeError("not an HTTP answer")
    lines = head.split(b"\r\n")
    status = lines[0].split(b" ", 2)
    if len(status) < 2 or not status[0].startswith(b"HTTP/") or status[1] != b"200":
        raise ScrapeError(f"answered {lines[0][:60]!r}")
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == b"transfer-encoding" and value != b"identity":
            raise ScrapeError("a transfer encoding to an HTTP/1.0 request")
        if name == b"content-length":
            if not value.isdigit() or int(value) > len(body):
                raise ScrapeError("a short or unreadable body")
            body = body[:int(value)]
    if len(body) > max_bytes:
        raise ScrapeError(f"an answer larger than {max_bytes} bytes")
    try:
        return body.decode()
    except UnicodeDecodeError:
        raise ScrapeError("a body that is not UTF-8") from None


def read_models(text: str) -> dict[str, ModelSample]:
    """The model figures in one /metrics answer; BadExposition or
    TooManyModels when it cannot be used."""
    return by_model(parse(text, MODEL_METRICS))


class ModelScraper:
    """Scrape rounds on demand (`poll`), their figures in `figures`."""

    def __init__(self, fetch: Callable[[str], Awaitable[str]] = fetch_metrics,
                 clock: Callable[[], float] = time.monotonic,
                 interval_s: float = INTERVAL_S) -> None:
        self.figures = ModelFigures()
        self._fetch = fetch
        self._clock = clock
        self._interval_s = interval_s
        self._started: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing: set[str] = set()  # replicas whose last answer was not used

    def poll(self, targets: Sequence[Target]) -> None:
        """Start a round in the background if one is due; never waits.
        Without a running event loop (a synchronous caller) it does nothing."""
        if self._task is not None and not self._task.done():
            return
        now = self._clock()
        if self._started is not None and now - self._started < self._interval_s:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._started = now
        self._task = loop.create_task(self._round(list(targets)), name="dashboard-model-scrape")

    async def _round(self, targets: list[Target]) -> None:
        try:
            await self.scrape(targets)
        except Exception:  # a bug here must not surface as an unretrieved task error
            logger.exception("scraping replicas for model figures failed")

    async def scrape(self, targets: Sequence[Target]) -> None:
        """One round: every target read (CONCURRENCY at a time), the figures
        recomputed, replicas not among `targets` forgotten."""
        room = asyncio.Semaphore(CONCURRENCY)

        async def one(target: Target) -> None:
            async with room:
                models = await self._read(target)
            if models is not None:
                self.figures.record(target.replica_id, target.application, target.deployment,
                                    self._clock(), models)

        await asyncio.gather(*(one(t) for t in targets))
        self.figures.forget([t.replica_id for t in targets], self._clock())
        self._failing &= {t.replica_id for t in targets}
        self.figures.compute()

    async def _read(self, target: Target) -> dict[str, ModelSample] | None:
        try:
            text = await self._fetch(target.metrics_address)
            models = await asyncio.to_thread(read_models, text)
        except (ScrapeError, BadExposition, TooManyModels) as e:
            level = logging.DEBUG if target.replica_id in self._failing else logging.WARNING
            self._failing.add(target.replica_id)
            logger.log(level, "model figures: /metrics of replica %s (%s/%s, %s) not used: %s",
                       target.replica_id, target.application, target.deployment,
                       target.metrics_address, e)
            return None
        self._failing.discard(target.replica_id)
        return models
