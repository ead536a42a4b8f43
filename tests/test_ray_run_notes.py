"""Every Ray argument servefleet accepts and does not apply is said once
(ray_run_notes.py, ray_options.py): serve.run, serve.start, the router config."""

from __future__ import annotations

from collections.abc import Callable

from servefleet._private.configuration.option_notes import Note
from servefleet._private.configuration.ray_options import normalize_options
from servefleet._private.ray_run_notes import note_run, note_start
from servefleet.serve.config import HTTPOptions, ProxyLocation


def heard() -> tuple[list[Note], Callable[[Note], None]]:
    notes: list[Note] = []
    return notes, notes.append


def test_run_and_start_say_what_they_do_not_apply() -> None:
    notes, hear = heard()
    note_run(None, hear)
    note_start(ProxyLocation.EveryNode, HTTPOptions(host="0.0.0.0", port=8001).explicit(),
               None, None, [], hear)
    assert notes == []  # all applied
    note_run({"encoding": "JSON"}, hear)
    note_start(ProxyLocation.Disabled, HTTPOptions(port=1, request_timeout_s=3,
                                                   root_path="/x").explicit(),
               {"port": 9000}, {"log_level": "DEBUG"}, ["detached"], hear)
    said = [n.message for n in notes]
    assert all(not n.deprecated for n in notes)
    assert said == [
        "serve.run(logging_config=...): not used: processes log as servefleet's --log-format "
        "and --log-level say",
        "serve.start(proxy_location=Disabled): not used: the embedded cluster always runs "
        "its proxy",
        "serve.start(http_options.request_timeout_s=...): not used: the embedded cluster's "
        "proxy takes host and port only (servefleet proxy has flags for the rest)",
        "serve.start(http_options.root_path=...): not used: the embedded cluster's proxy "
        "takes host and port only (servefleet proxy has flags for the rest)",
        "serve.start(grpc_options=...): not used: the embedded cluster serves no gRPC "
        "(servefleet up with a config file's grpc_options does)",
        "serve.start(logging_config=...): not used: processes log as servefleet's "
        "--log-format and --log-level say",
        "serve.start(detached=...): not used: Ray's older keyword, with nothing to do here"]


def test_the_router_configs_backoff_settings_are_said() -> None:
    notes, hear = heard()
    out = normalize_options("d", {"request_router_config": {
        "request_router_class": "m:R", "initial_backoff_s": 0.1,
        "request_routing_stats_period_s": 5}}, hear)
    assert out["request_router"] == "m:R"
    assert [n.message for n in notes] == [
        "d.request_router_config.initial_backoff_s: not used: servefleet's routers take no "
        "backoff or routing-stats settings",
        "d.request_router_config.request_routing_stats_period_s: not used: servefleet's "
        "routers take no backoff or routing-stats settings"]
