"""Turning tracing on in a process: the OpenTelemetry SDK, its batch span
processor and an OTLP exporter, configured by the standard variables.

On when `servefleet --tracing` was given (it sets SERVEFLEET_TRACING=1, which
the processes a controller starts inherit: replicas, policy processes) or
when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set;
never when OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. Then, as the
OpenTelemetry specification has it:

- sampler: OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default
  parentbased_always_on: a client's sampled flag is followed);
- exporter: OTLP over gRPC, or over HTTP when OTEL_EXPORTER_OTLP_PROTOCOL (or
  _TRACES_PROTOCOL) is http/protobuf; endpoint, headers, timeout and TLS from
  the OTEL_EXPORTER_OTLP_* variables the exporter reads itself;
- resource: OTEL_SERVICE_NAME (else `servefleet-<component>`, and a
  replica's deployment name) and OTEL_RESOURCE_ATTRIBUTES.

The exporter never holds a request up: spans wait in the batch processor's
bounded queue (OTEL_BSP_MAX_QUEUE_SIZE, default 2048) and its thread sends
them. When the collector cannot be reached, that thread retries within the
exporter's timeout; spans past the queue, and spans of a failed export, are
dropped and counted in `servefleet_trace_spans_dropped_total`. At exit the
queue gets at most SHUTDOWN_S to drain.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from prometheus_client import Counter

from servefleet._private.tracing import spans as tracing

logger = logging.getLogger(__name__)

ENV_TRACING = "SERVEFLEET_TRACING"
INSTALL_HINT = ("tracing needs the OpenTelemetry SDK and OTLP exporter: "
                "pip install 'servefleet[tracing]'")
SHUTDOWN_S = 2.0
DROP_WARNING_S = 60.0
# The SDK logs each span it drops at WARNING; dropping is counted and warned
# about once a minute here instead.
SDK_DROP_LOGGER = "opentelemetry.sdk._shared_internal"

DROPPED = Counter("servefleet_trace_spans_dropped", "spans not exported: the processor's "
                  "queue was full, or the export to the collector failed", ["reason"])


class TracingUnavailable(RuntimeError):
    """Tracing was asked for and cannot be set up: the OpenTelemetry SDK is
    not installed, or one of the OTEL_* settings is bad."""


def wanted(flag: bool = False) -> bool:
    """Whether this process should trace: the flag, or the environment."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return (flag or env.get(ENV_TRACING, "") not in ("", "0")
            or bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
            or bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")))


def configure(component: str, flag: bool = False, install: bool = True,
              **resource: str) -> bool:
    """Turn tracing on if wanted (`wanted`); True when it is on.

    `component` names the process (controller, proxy, replica); `resource`
    adds attributes (service.name for a replica, service.instance.id).
    With `flag` and no SDK installed: TracingUnavailable, saying what to
    install. Asked for by the environment only and no SDK: a warning, and
    the process runs without tracing. With `install` False (a supervisor
    such as `servefleet up`) only the check and the environment for the
    processes it starts."""
    if not wanted(flag):
        return False
    if flag:
        os.environ[ENV_TRACING] = "1"  # the processes this one starts trace too
    try:
        if not install:
            _exporter_class()
            return True
        provider = _provider(component, resource)
    except ValueError as e:  # the SDK's own checks of the OTEL_* variables
        raise TracingUnavailable(f"bad tracing settings: {e}") from e
    except ImportError as e:
        hint = _import_hint(e)
        if flag:
            raise TracingUnavailable(hint) from e
        logger.warning("%s (%s); tracing is off", hint, e)
        return False
    logging.getLogger(SDK_DROP_LOGGER).setLevel(logging.ERROR)
    # The global provider too: user code's `trace.get_tracer(...)` spans are
    # exported with servefleet's, in the request's trace.
    from opentelemetry import trace
    trace.set_tracer_provider(provider)
    from opentelemetry.sdk.trace.sampling import ParentBased
    tracing.install(provider.get_tracer("servefleet"), isinstance(provider.sampler, ParentBased),
                    _root_bound(), provider.id_generator)
    atexit.register(shutdown, provider)
    logger.info("tracing on: %s spans to %s", _protocol(), _endpoint())
    return True


# The commands that run servefleet's processes: the ones that trace.
SERVING_COMMANDS = ("controller", "proxy", "up")


def add_flag(parser: Any) -> None:
    """`servefleet --tracing` (an argparse parser's global flag)."""
    parser.add_argument("--tracing", action="store_true",
                        help="export OpenTelemetry spans over OTLP from the controller, "
                             "proxies and replicas this command runs (also on when "
                             "$OTEL_EXPORTER_OTLP_ENDPOINT is set; needs servefleet[tracing])")


def from_command(command: str, flag: bool) -> None:
    """Tracing for a `servefleet COMMAND`: the serving commands trace (`up`
    only checks, and its children trace); TracingUnavailable as `configure`."""
    if command in SERVING_COMMANDS:
        configure(command, flag, install=command != "up")


def _root_bound() -> int | None:
    """The trace id bound of a ratio sampler chosen by OTEL_TRACES_SAMPLER
    (read as the SDK reads it: a bad or missing ratio is 1.0); None for the others."""
    from opentelemetry.sdk.trace.sampling import TraceIdRatioBased

    name = os.environ.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    if name not in ("traceidratio", "parentbased_traceidratio"):
        return None
    try:
        rate = float(os.environ.get("OTEL_TRACES_SAMPLER_ARG", "1.0"))
    except ValueError:
        rate = 1.0
    return TraceIdRatioBased.get_bound_for_rate(rate if 0.0 <= rate <= 1.0 else 1.0)


def _preset_ids() -> Any:
    """The SDK's random ids, except a trace id tracing.py chose (and sampled by) first."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class PresetIds(RandomIdGenerator):
        def __init__(self) -> None:
            self._next = threading.local()

        @property
        def next_trace_id(self) -> int:
            return int(getattr(self._next, "value", 0))

        @next_trace_id.setter
        def next_trace_id(self, value: int) -> None:
            self._next.value = value

        def generate_trace_id(self) -> int:
            preset = self.next_trace_id
            if preset:
                self._next.value = 0
                return preset
            return super().generate_trace_id()

    return PresetIds()


def _import_hint(error: ImportError) -> str:
    """What to do about an exporter that would not import: install the
    extra, or, when the packages are there but opentelemetry-proto's files
    were overwritten by xds-protos' older copy, reinstall it."""
    import importlib.util
    try:
        installed = importlib.util.find_spec("opentelemetry.exporter.otlp.proto.common")
    except ImportError:
        installed = None
    if installed is not None and "opentelemetry.proto" in str(error):
        return ("the OpenTelemetry packages are installed but opentelemetry-proto's files are "
                "not its own (xds-protos ships an older copy of them): "
                "pip install --no-deps --force-reinstall opentelemetry-proto")
    return INSTALL_HINT


def _protocol() -> str:
    env = os.environ
    return (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "grpc").strip().lower()


def _endpoint() -> str:
    env = os.environ
    return (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or "the exporter's default endpoint")


def _exporter_class() -> Any:
    """The OTLP exporter the variables ask for (ImportError when not installed)."""
    import opentelemetry.sdk.trace  # noqa: F401 - the SDK, not only the API
    if _protocol().startswith("http"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        return OTLPSpanExporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcSpanExporter,
    )
    return GrpcSpanExporter


def _provider(component: str, resource: dict[str, str]) -> Any:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    attributes = {k.replace("_", "."): v for k, v in resource.items() if v}
    if not os.environ.get("OTEL_SERVICE_NAME"):
        attributes.setdefault("service.name", f"servefleet-{component}")
    else:
        attributes.pop("service.name", None)  # the user's name wins
    attributes["servefleet.component"] = component
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES itself.
    provider = TracerProvider(resource=Resource.create(attributes), shutdown_on_exit=False,
                              id_generator=_preset_ids())
    provider.add_span_processor(_processor(_exporter_class()()))
    return provider


def _processor(exporter: Any) -> Any:
    """The SDK's batch processor, counting the spans it drops."""
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Counted(BatchSpanProcessor):
        def on_end(self, span: Any) -> None:
            # The SDK drops the oldest span when its queue is full and only
            # logs it; counted here, by looking at the queue first (a
            # private attribute: without it nothing is counted, nothing breaks).
            queue = getattr(getattr(self, "_batch_processor", None), "_queue", None)
            if (queue is not None and queue.maxlen and len(queue) >= queue.maxlen
                    and span.context is not None and span.context.trace_flags.sampled):
                DROPPED.labels("queue_full").inc()
                _warn_dropping()
            super().on_end(span)

    class CountedExporter(SpanExporter):
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def export(self, spans: Sequence[Any]) -> Any:
            try:
                result = self._inner.export(spans)
            except Exception:
                DROPPED.labels("export_failed").inc(len(spans))
                raise
            if result is not SpanExportResult.SUCCESS:
                DROPPED.labels("export_failed").inc(len(spans))
            return result

        def shutdown(self, *args: Any, **kwargs: Any) -> None:
            self._inner.shutdown(*args, **kwargs)

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(self._inner.force_flush(timeout_millis))

    return Counted(CountedExporter(exporter))


_warned_at = [-DROP_WARNING_S]


def _warn_dropping() -> None:
    """One warning a minute while spans are dropped (the SDK's own, one per
    span, is silenced in `configure`: a flood at thousands of spans a second)."""
    now = time.monotonic()
    if now - _warned_at[0] >= DROP_WARNING_S:
        _warned_at[0] = now
        logger.warning("dropping spans: the exporter cannot keep up or reach %s (counted "
                       "in servefleet_trace_spans_dropped_total)", _endpoint())


def shutdown(provider: Any, timeout_s: float = SHUTDOWN_S) -> None:
    """Flush what is queued, waiting at most `timeout_s` (an unreachable
    collector must not hold a process's exit up for the SDK's 30 s)."""
    tracing.uninstall()
    done = threading.Thread(target=provider.shutdown, name="tracing shutdown", daemon=True)
    done.start()
    done.join(timeout_s)
