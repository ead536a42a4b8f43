"""The keys of Ray Serve's config files that servefleet's own file lacks.

A config file written for `serve deploy` (Ray's ServeDeploySchema) deploys
with `servefleet deploy` as it is. servefleet/_private/configuration/config_file.py reads the keys
both have; this module reads Ray's others, each checked as Ray checks it,
and either maps it or says, in a warning line, why it is not used:

- `proxy_location` (EveryNode, HeadOnly, Disabled): not used. servefleet's
  proxies are processes of their own (`servefleet up`, `servefleet proxy`),
  started where the operator starts them.
- `logging_config` (top level and per application): not used; processes
  log as their --log-format and --log-level say.
- `target_capacity`: null or 100 accepted (full capacity, what servefleet
  always runs); any other value is an error, since running at full capacity
  what the file asks to run at less would not be what it says.
- `http_options.keep_alive_timeout_s`: not used here: it is `servefleet
  proxy --keep-alive-timeout-s`; `ssl_keyfile`, `ssl_certfile`: `servefleet
  proxy --tls-key/--tls-cert`; `location` (Ray's older proxy_location): not
  used; `root_path`: "" accepted, another is an error (servefleet has no
  prefix over every route: put it in each route_prefix).
- `grpc_options.request_timeout_s`: not used (the gRPC ingress keeps the
  caller's deadline). `grpc_options.port` (and servefleet's `host`): where
  `servefleet up` starts its proxy's gRPC ingress; a deploy, which cannot
  move the ports of running proxies, says so in a warning line (`up`, which
  applies them, leaves that line out: `grpc_listen_note`).
- `applications[].runtime_env`: the application's `runtime`
  (servefleet/_private/configuration/ray_options.py's runtime_from_ray_env: working_dir, env_vars,
  excludes, image_uri; pip, conda and remote working dirs are errors).

The keys, and what is said of each, are in the tables of
servefleet/_private/configuration/config_fields.py (marked as Ray's), which the config
file's JSON Schema is written from too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servefleet._private.configuration.config_fields import (
    APPLICATION,
    GRPC,
    HTTP,
    PROXY_LOCATIONS,
    TOP,
)
from servefleet._private.configuration.field_table import check_field
from servefleet._private.configuration.option_checks import (
    OptionError,
    check_float,
    check_keys,
    check_mapping,
    check_str,
)
from servefleet._private.configuration.option_fields import LOGGING
from servefleet._private.configuration.option_notes import Note
from servefleet._private.configuration.ray_options import config_dict
from servefleet._private.configuration.ray_runtime_env import runtime_from_ray_env

Say = Callable[[str], None]

RAY_TOP_KEYS = TOP.names(is_ray=True)
RAY_HTTP_KEYS = HTTP.names(is_ray=True)
RAY_GRPC_KEYS = GRPC.names(is_ray=True)
RAY_APP_KEYS = APPLICATION.names(is_ray=True)


def read_top_level(data: dict[str, Any], say: Say) -> None:
    """proxy_location, logging_config and target_capacity: checked, then
    noted as not used (or refused, for a capacity below 100)."""
    if data.get("proxy_location") is not None:
        _proxy_location("proxy_location", data["proxy_location"], say)
    if data.get("logging_config") is not None:
        _logging_config("logging_config", data["logging_config"], say)
    if data.get("target_capacity") is not None:
        capacity = check_float("target_capacity", data["target_capacity"])
        if capacity != 100:
            raise OptionError(f"target_capacity: servefleet runs every application at full "
                              f"capacity (100); remove the key or scale num_replicas, got "
                              f"{data['target_capacity']!r}")


def read_http_extras(value: dict[str, Any], say: Say) -> None:
    """Ray's http_options that are flags of `servefleet proxy` here."""
    for key in RAY_HTTP_KEYS:
        if value.get(key) is None:
            continue
        path = f"http_options.{key}"
        if key == "root_path":
            if check_str(path, value[key]) not in ("", "/"):
                raise OptionError(f"{path}: servefleet has no prefix over every route: put "
                                  f"{value[key]!r} at the start of each application's "
                                  "route_prefix")
        elif key == "location":
            _proxy_location(path, value[key], say)
        else:  # keep_alive_timeout_s, ssl_keyfile, ssl_certfile: flags of servefleet proxy
            check_field(path, HTTP[key], value[key])
            say(f"{path}: {HTTP[key].ray}")


def read_grpc_extras(value: dict[str, Any], say: Say) -> None:
    if value.get("request_timeout_s") is not None:
        check_float("grpc_options.request_timeout_s", value["request_timeout_s"])
        say(f"grpc_options.request_timeout_s: not used: {GRPC['request_timeout_s'].unused}")
    for key in GRPC_LISTEN_KEYS:
        if value.get(key) is not None:
            say(grpc_listen_note(key))


# Where the gRPC ingress listens: a proxy's own flag, which only `servefleet up`
# sets from the file (Ray too keeps a running Serve's gRPC port when a config
# is deployed to it).
GRPC_LISTEN_KEYS = ("host", "port")


def grpc_listen_note(key: str) -> str:
    """The warning line for grpc_options' `key` (host or port) from every reader
    of the file but `servefleet up`."""
    return (f"grpc_options.{key}: not applied by a deploy: running proxies serve gRPC "
            "where they were started (servefleet proxy --grpc-listen); only servefleet up "
            "reads it, when it starts its proxy")


def read_app_extras(path: str, value: dict[str, Any], say: Say) -> dict[str, Any] | None:
    """An application's Ray keys: its runtime_env as servefleet's `runtime`
    options (None when it has none); its logging_config checked and noted."""
    if value.get("logging_config") is not None:
        _logging_config(f"{path}.logging_config", value["logging_config"], say)
    if value.get("runtime_env") is None:
        return None
    if value.get("runtime") is not None:
        raise OptionError(f"{path}.runtime_env: give runtime or runtime_env, not both")
    return runtime_from_ray_env(f"{path}.runtime_env", value["runtime_env"],
                                lambda note: say(note.message))


def note_saying(say: Say) -> Callable[[Note], None]:
    """A ray_options Notes that writes each note as one warning line."""
    return lambda note: say(note.message)


def _proxy_location(path: str, value: Any, say: Say) -> None:
    if check_str(path, value) not in PROXY_LOCATIONS:
        raise OptionError(f"{path}: must be one of {', '.join(PROXY_LOCATIONS[:3])}, got "
                          f"{value!r}")
    say(f"{path}: not used: {TOP['proxy_location'].unused}")


def _logging_config(path: str, value: Any, say: Say) -> None:
    config = check_mapping(path, config_dict(path, value))
    check_keys(path, config, LOGGING.keys)
    say(f"{path}: not used: {TOP['logging_config'].unused}")
