"""A three-deployment chain for the tracing tests: Front (async) calls Middle
(a plain def, in a user thread) which calls Last (async), which makes a span
of its own with the OpenTelemetry API and no setup. Each logs a line."""

from __future__ import annotations

import logging

from servefleet import deployment

logger = logging.getLogger("traced_app")


@deployment
class Last:
    async def __call__(self, word: str) -> dict:
        from opentelemetry import trace

        with trace.get_tracer("traced_app").start_as_current_span("user work") as span:
            span.set_attribute("word", word)
            logger.info("last got %s", word)
            ids = span.get_span_context()
            return {"word": word.upper(), "trace_id": f"{ids.trace_id:032x}"}


@deployment
class Middle:
    def __init__(self, last) -> None:
        self.last = last

    def __call__(self, word: str) -> dict:
        logger.info("middle got %s", word)
        return self.last.remote(word).result()


@deployment(max_ongoing_requests=1)
class Front:
    def __init__(self, middle) -> None:
        self.middle = middle

    async def __call__(self, request) -> dict:
        import asyncio

        word = request.query_params.get("word", "hello")
        logger.info("front got %s", word)
        await asyncio.sleep(float(request.query_params.get("sleep", "0")))
        return await self.middle.remote(word)


app = Front.bind(Middle.bind(Last.bind()))
