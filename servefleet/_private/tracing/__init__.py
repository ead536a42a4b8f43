"""Tracing: spans of servefleet's own work and the trace context each hop
passes on (`spans`), turning the OpenTelemetry SDK on in a process (`sdk`),
and an OTLP receiver for tests and benchmarks (`otlp_sink`).

May import: nothing (only _private's top-level modules).
"""
