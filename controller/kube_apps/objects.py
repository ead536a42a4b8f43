"""A ServeApplication object read as the application it declares.

Its `spec` holds what one entry of a config file's `applications` holds,
and is checked by the same validator (config_file.parse_config, then the
controller's own checks of an application, app_specs.normalize_application),
so an object and a config file are refused for the same things, with the
same words; the path in a message starts at `spec` (`spec.deployments[0].
num_replicas: expected an integer, got 'two'`).

Two things differ from a config file. The application's name defaults to
the object's name (a config file's default is Ray's "default"). And a
relative `working_dir` is refused: a config file's is relative to the file,
and an object has no file; code comes from a directory the controller's
host (or its image) has, named by its absolute path, or from an image.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servefleet._private.configuration.config_file import parse_config
from servefleet._private.configuration.options import OptionError
from servefleet.v1 import application_pb2 as apb

from ..errors import InvalidArgument
from ..goals.app_specs import normalize_application

# Where a config file's entry puts an application; an object's is `spec`.
_CONFIG_PATH = "applications[0]"
_RUNTIMES = ("runtime", "runtime_env")


@dataclass(frozen=True)
class ServeApp:
    """One ServeApplication as the controller reads it. `spec` is None when
    the object is refused; `error` then names the field and the rule."""

    name: str  # metadata.name
    uid: str
    generation: int
    created: str  # metadata.creationTimestamp, RFC 3339 (sorts as text)
    application: str  # the servefleet application it declares; "" when unreadable
    spec: apb.ApplicationSpec | None
    error: str = ""
    warnings: tuple[str, ...] = ()


def read_object(obj: dict[str, Any]) -> ServeApp:
    """The application `obj` declares, or why it declares none."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    identity = (name, str(meta.get("uid", "")), int(meta.get("generation") or 0),
                str(meta.get("creationTimestamp", "")))
    data = obj.get("spec")
    if not isinstance(data, dict):
        return ServeApp(*identity, "", None, "spec: expected a mapping of an application's keys")
    data = dict(data)
    named = data.get("name") is not None
    data.setdefault("name", name)
    if data["name"] is None:
        data["name"] = name
    application = data["name"] if isinstance(data["name"], str) else ""
    warnings: list[str] = []
    try:
        _check_working_dirs(data)
        request = parse_config({"applications": [data]}, "/", warnings.append)
        spec = normalize_application(request.applications[0], "spec")
    except OptionError as e:
        return ServeApp(*identity, application, None, in_spec(str(e)))
    except InvalidArgument as e:
        error = e.message
        if e.field == "spec.name" and not named:
            error = (f"metadata.name: {name!r} is no application name ({e.rule}): "
                     "give spec.name")
        return ServeApp(*identity, application, None, error)
    return ServeApp(*identity, spec.name, spec, warnings=tuple(in_spec(w) for w in warnings))


def in_spec(message: str) -> str:
    """A validator's message with its path starting at the object's `spec`."""
    return message.replace(_CONFIG_PATH, "spec")


def _check_working_dirs(data: dict[str, Any]) -> None:
    places = [(f"{_CONFIG_PATH}.{key}", data.get(key)) for key in _RUNTIMES]
    deployments = data.get("deployments")
    for i, entry in enumerate(deployments if isinstance(deployments, list) else []):
        if isinstance(entry, dict):
            places += [(f"{_CONFIG_PATH}.deployments[{i}].{key}", entry.get(key))
                       for key in _RUNTIMES]
    for path, runtime in places:
        value = runtime.get("working_dir") if isinstance(runtime, dict) else None
        if isinstance(value, str) and not value.startswith("/") and "://" not in value:
            raise OptionError(f"{path}.working_dir: must be an absolute path ({value!r}): a "
                              "ServeApplication has no file for it to be relative to")
