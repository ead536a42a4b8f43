"""Ray's runtime_env, as servefleet's `runtime` options.

Ray installs a runtime environment per application or replica: it uploads
or downloads a working_dir, installs pip or conda packages, sets env_vars.
servefleet's replicas import code from a local working_dir (hashed into the
code version) or an image, with environment variables, and install nothing.
So `working_dir` (a local directory), `env_vars` (as `env`), `excludes` and
`image_uri` (as `image`) are mapped; `config` (Ray's setup timeout and eager
install) is noted and not used; `pip`, `conda`, `uv`, `py_modules`,
`container`, `py_executable`, `java_jars` and a remote working_dir are
errors that say what to do instead. Running without the packages a
deployment asked for would fail later (an ImportError in a replica), further
from the cause, or worse, run with other versions than asked.

Used for `applications[].runtime_env` in config files and for
`ray_actor_options.runtime_env` in code and config files alike; Ray's
per-deployment runtime_env inherits the application's, which servefleet's
layering of runtime options does too (controller/goals/app_specs.py).
The keys, and what is said of the refused ones, are the table RUNTIME_ENV of
servefleet/_private/configuration/option_fields.py.
"""

from __future__ import annotations

from typing import Any

from servefleet._private.configuration.field_table import check_field
from servefleet._private.configuration.option_checks import OptionError, check_mapping, check_str
from servefleet._private.configuration.option_fields import RUNTIME_ENV
from servefleet._private.configuration.option_notes import Note, Notes

RUNTIME_ENV_MAPPED = RUNTIME_ENV.keys
RUNTIME_ENV_REFUSED = {f.name: f.help for f in RUNTIME_ENV.fields if f.kind == "refused"}
WHY_NOT_USED_CONFIG = RUNTIME_ENV["config"].unused


def runtime_from_ray_env(path: str, value: Any, notes: Notes) -> dict[str, Any]:
    """Ray's runtime_env as servefleet's `runtime` options: working_dir (a
    local directory), env_vars as env, excludes, image_uri as image. What
    servefleet cannot do (install packages, download a remote working_dir)
    is an OptionError saying what to do instead: running without the
    packages a deployment asked for would fail later, further from the cause."""
    env = check_mapping(path, value)
    out: dict[str, Any] = {}
    for key, item in env.items():
        where = f"{path}.{key}"
        if key in RUNTIME_ENV_REFUSED:
            check_field(where, RUNTIME_ENV[key], item)  # the error saying what to do instead
        if key not in RUNTIME_ENV_MAPPED:
            raise OptionError(f"{where}: unknown runtime_env key (servefleet takes "
                              f"{', '.join(RUNTIME_ENV_MAPPED)})")
        if item is None:
            continue
        if key == "working_dir":
            directory = check_str(where, item)
            if "://" in directory:
                raise OptionError(f"{where}: a remote URI ({directory!r}); servefleet "
                                  "downloads no code: give a local directory, or an image "
                                  "that holds the code (runtime.image)")
            out["working_dir"] = directory
        elif key == "env_vars":
            out["env"] = check_field(where, RUNTIME_ENV[key], item)
        elif key == "excludes":
            out["excludes"] = check_field(where, RUNTIME_ENV[key], item)
        elif key == "image_uri":
            out["image"] = check_field(where, RUNTIME_ENV[key], item)
        else:
            check_field(where, RUNTIME_ENV[key], item)
            notes(Note("runtime_env.config", f"{where}: not used: {WHY_NOT_USED_CONFIG}",
                       False))
    return out
