"""Log records of every servefleet process: text for people, JSON lines for machines.

`configure(component, fmt)` sets up the root logger once per process.
`--log-format json` (or SERVEFLEET_LOG_FORMAT=json, which replicas inherit
from the controller that starts them) writes one JSON object per line:

    {"time": "2026-12-03T10:31:02.114Z", "level": "INFO", "component": "replica",
     "logger": "servefleet.replica", "message": "...", "application": "default",
     "deployment": "Model", "replica": "Model-1a2b3c4d", "request_id": "9f0e..."}

`application`, `deployment` and `replica` are the process's (replicas);
`request_id` is set while a request is handled (`REQUEST_ID`, a context
variable: the proxy and the replica set it from x-request-id, and user code
run in the replica's thread pool keeps it), so one request's lines can be
found in the proxy's and the replica's logs alike, and in every replica a
request passes through by handle calls (envelope.py). A leading
controller's lines carry `term`, the fencing revision it leads with. With tracing on,
`trace_id` and `span_id` name the current span. Exceptions add `error`
with the traceback.
"""

from __future__ import annotations

import contextvars
import itertools
import json
import logging
import os
import sys
import time
from typing import Any

from servefleet._private.tracing import spans as tracing

ENV_FORMAT = "SERVEFLEET_LOG_FORMAT"
FORMATS = ("text", "json")
REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
# In a controller, while it leads: its term's fencing revision, so that what
# a leader did can be told apart from what its successor did (the chaos
# suite checks that two terms never act at once).
LEADER_TERM: contextvars.ContextVar[int] = contextvars.ContextVar("leader_term", default=0)


class _RequestIds:
    """New request ids: 32 hex digits like a uuid4's, made of a random prefix
    per process (drawn again in a forked child) and a counter, so making one
    costs no system call for randomness on the hot path."""

    def __init__(self) -> None:
        self.reseed()
        os.register_at_fork(after_in_child=self.reseed)

    def reseed(self) -> None:
        self.prefix = os.urandom(6).hex()
        self.count = itertools.count()

    def new(self) -> str:
        return f"{self.prefix}{next(self.count):020x}"


new_request_id = _RequestIds().new
TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Context(logging.Filter):
    """Adds the process's fields and the current request id to each record."""

    def __init__(self, fields: dict[str, str]) -> None:
        super().__init__()
        self.fields = fields

    def filter(self, record: logging.LogRecord) -> bool:
        record.servefleet = self.fields
        record.request_id = REQUEST_ID.get()
        record.term = LEADER_TERM.get()
        record.trace_ids = tracing.current_ids() if tracing.TRACER is not None else None
        return True


class _GrpcUndecodable(logging.Filter):
    """gRPC logs metadata it cannot decode as UTF-8 with the raw value and a
    traceback: an `authorization` value with one bad byte put its token in
    the log. The line keeps what happened and the value's length only."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("grpc.") and str(record.msg).startswith("Invalid encoding"):
            size = len(record.args[0]) if isinstance(record.args, tuple) and record.args and \
                isinstance(record.args[0], bytes | str) else 0
            record.msg, record.args = ("gRPC: invalid encoding in a metadata value "
                                       "(%d bytes, not logged: it may hold a credential)"), (size,)
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


class _Stderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a record comes (a test harness
    may swap it), not to the stream it was when logging was set up."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **getattr(record, "servefleet", {}),
        }
        request_id = getattr(record, "request_id", "")
        if request_id:
            entry["request_id"] = request_id
        term = getattr(record, "term", 0)
        if term:
            entry["term"] = term
        trace_ids = getattr(record, "trace_ids", None)
        if trace_ids and trace_ids[0]:
            entry["trace_id"], entry["span_id"] = trace_ids
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def log_format(given: str | None = None) -> str:
    """The format asked for by a flag, else by the environment, else text."""
    fmt = given or os.environ.get(ENV_FORMAT) or "text"
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: text or json")
    return fmt


def configure(component: str, level: int | str = logging.INFO, fmt: str | None = None,
              **fields: str) -> None:
    """Log to stderr in `fmt` (log_format()) with `component` and `fields` on
    every JSON line; processes this one starts inherit the format."""
    fmt = log_format(fmt)
    os.environ[ENV_FORMAT] = fmt
    handler = _Stderr()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT))
    handler.addFilter(_Context({"component": component, **fields}))
    handler.addFilter(_GrpcUndecodable())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
