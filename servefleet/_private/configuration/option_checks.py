"""The type checks every option parser shares, and the error they raise.

Options arrive as plain data (keyword arguments in code, YAML in config
files, JSON from the build step), so each value is checked for its type
before it reaches a protobuf message, whose own errors name nothing. Every
check raises `OptionError` whose message starts with the path of the value,
e.g. `applications[0].deployments[1].num_replicas: expected an integer, got
'two'`.
"""

from __future__ import annotations

import json
from typing import Any


class OptionError(ValueError):
    """A bad option; the message starts with the path of the value."""


def type_name(value: Any) -> str:
    """The value itself for a scalar (short enough to show), else its type."""
    return f"{value!r}" if isinstance(value, str | int | float | bool) else type(value).__name__


def check_int(path: str, value: Any, bounds: tuple[int, int] | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionError(f"{path}: expected an integer, got {type_name(value)}")
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        note = " (-1: no limit)" if bounds[0] == -1 else ""
        raise OptionError(f"{path}: must be between {bounds[0]} and {bounds[1]}{note}, "
                          f"got {value}")
    return value


def check_float(path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OptionError(f"{path}: expected a number, got {type_name(value)}")
    return float(value)


def check_non_negative(path: str, value: Any) -> float:
    number = check_float(path, value)
    if not number >= 0:  # also refuses NaN
        raise OptionError(f"{path}: must be a number >= 0, got {value!r}")
    return number


def check_bool(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise OptionError(f"{path}: expected true or false, got {type_name(value)}")
    return value


def check_str(path: str, value: Any) -> str:
    if not isinstance(value, str):
        raise OptionError(f"{path}: expected a string, got {type_name(value)}")
    return value


def check_mapping(path: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise OptionError(f"{path}: expected a mapping, got {type_name(value)}")
    for key in value:
        if not isinstance(key, str):
            raise OptionError(f"{path}: keys must be strings, got {type_name(key)}")
    return value


def check_str_list(path: str, value: Any, what: str = "strings") -> list[str]:
    if not isinstance(value, list):
        raise OptionError(f"{path}: expected a list of {what}, got {type_name(value)}")
    return [check_str(f"{path}[{i}]", item) for i, item in enumerate(value)]


def check_keys(path: str, value: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for key in value:
        if key not in allowed:
            raise OptionError(f"{path}.{key}: unknown key (expected one of "
                              f"{', '.join(allowed)})")


def to_json(path: str, value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise OptionError(f"{path}: must be JSON-serializable ({e})") from None
