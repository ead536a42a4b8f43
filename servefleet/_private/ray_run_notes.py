"""What `serve.run` and `serve.start` accept from Ray Serve and do not apply,
said once per process as a warning line each (option_notes.py), so that no
argument a Ray program passes is dropped without a word.

The embedded cluster `serve.start` makes runs one proxy on the given host
and port; everything else it is given is checked (by the callers) and noted
here: a proxy location that asks for no proxy, HTTPOptions fields other than
host and port, gRPC options (the embedded cluster serves no gRPC; `servefleet
up` with a config file does), a logging config (processes log as servefleet's
--log-format and --log-level say), and Ray's older start keywords.
"""

from __future__ import annotations

from typing import Any

from servefleet._private.configuration.option_notes import Note, Notes, default_notes

APPLIED_HTTP_FIELDS = ("host", "port")
WHY_NO_LOGGING = "processes log as servefleet's --log-format and --log-level say"


def note_run(logging_config: Any, notes: Notes | None = None) -> None:
    if logging_config is not None:
        (notes or default_notes)(Note("run.logging_config", "serve.run(logging_config=...): "
                                                            f"not used: {WHY_NO_LOGGING}", False))


def note_start(proxy_location: Any, http_given: dict[str, Any], grpc_options: Any,
               logging_config: Any, old_keywords: list[str],
               notes: Notes | None = None) -> None:
    """`http_given`: the HTTPOptions fields the caller set."""
    notes = notes or default_notes
    if str(getattr(proxy_location, "value", proxy_location)) == "Disabled":
        notes(Note("start.proxy_location", "serve.start(proxy_location=Disabled): not used: "
                                           "the embedded cluster always runs its proxy", False))
    for key in sorted(set(http_given) - set(APPLIED_HTTP_FIELDS)):
        notes(Note(f"start.http_options.{key}", f"serve.start(http_options.{key}=...): not "
                                                "used: the embedded cluster's proxy takes host "
                                                "and port only (servefleet proxy has flags for "
                                                "the rest)", False))
    if grpc_options is not None:
        notes(Note("start.grpc_options", "serve.start(grpc_options=...): not used: the "
                                         "embedded cluster serves no gRPC (servefleet up with "
                                         "a config file's grpc_options does)", False))
    if logging_config is not None:
        notes(Note("start.logging_config", "serve.start(logging_config=...): not used: "
                                           f"{WHY_NO_LOGGING}", False))
    for key in old_keywords:
        notes(Note(f"start.{key}", f"serve.start({key}=...): not used: Ray's older keyword, "
                                   "with nothing to do here", False))
