"""A small base for Ray's option classes (AutoscalingConfig, HTTPOptions...).

Ray makes them pydantic models; servefleet does not depend on pydantic, and
what users do with them is small: construct with keywords, read and set
attributes, `.dict()` them, compare them. This base does that, refuses an
unknown keyword with a TypeError naming it (a typo must not pass silently),
and remembers which fields the user set: only those become servefleet
options, so a config file can still override the rest field by field.
"""

from __future__ import annotations

import builtins
import copy
from typing import Any, ClassVar


class OptionsModel:
    # Field name -> default, in declaration order (each subclass sets it).
    FIELDS: ClassVar[dict[str, Any]] = {}

    def __init__(self, **values: Any) -> None:
        unknown = [name for name in values if name not in self.FIELDS]
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown field {unknown[0]!r} (fields: "
                            f"{', '.join(self.FIELDS)})")
        for name, default in self.FIELDS.items():
            object.__setattr__(self, name, copy.copy(values.get(name, default)))
        object.__setattr__(self, "_explicit", set(values))
        self._validate()

    def _validate(self) -> None:
        """Check the values; raise ValueError naming the field (subclasses)."""

    def __getattr__(self, name: str) -> Any:
        # Only reached for a name that is not set: the fields all are. (Declared
        # so that type checkers accept the fields, which __init__ sets.)
        raise AttributeError(f"{type(self).__name__} has no field {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self.FIELDS:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}")
        object.__setattr__(self, name, value)
        self._explicit.add(name)
        self._validate()

    def dict(self, *, exclude_unset: bool = False) -> builtins.dict[str, Any]:
        """The fields as a dict (only those given, with exclude_unset=True)."""
        return {name: copy.copy(getattr(self, name)) for name in self.FIELDS
                if not exclude_unset or name in self._explicit}

    model_dump = dict

    def explicit(self) -> builtins.dict[str, Any]:
        """The fields the user gave, as given."""
        return self.dict(exclude_unset=True)

    @classmethod
    def parse_obj(cls, value: Any) -> Any:
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise TypeError(f"{cls.__name__}: expected a dict or {cls.__name__}, got "
                            f"{type(value).__name__}")
        return cls(**value)

    model_validate = parse_obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OptionsModel) and type(other) is type(self) \
            and self.dict() == other.dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.dict().items())
        return f"{type(self).__name__}({fields})"


def number(owner: str, name: str, value: Any, *, minimum: float = 0.0, strict: bool = False,
           optional: bool = False, integer: bool = False) -> None:
    """Check one numeric field: ValueError naming `owner.name` when it is not
    a number (an integer with `integer`), or below `minimum` (or equal to it,
    with `strict`); None passes when `optional`."""
    if value is None and optional:
        return
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise ValueError(f"{owner}.{name}: expected {kind}, got {value!r}")
    if value < minimum or (strict and value == minimum):
        bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise ValueError(f"{owner}.{name}: must be {bound}, got {value!r}")
