"""A config key's definition: its type, bounds, accepted values and help.

The keys of a config file and of a deployment's options are tables of
`Field`s grouped in `Section`s (servefleet/_private/configuration/option_fields.py,
config_fields.py). The same tables drive two readers, so they cannot drift:
the validator (config_file.py, options.py, ray_options.py, ray_config.py),
which takes each section's key list and checks each plain value with
`check_field`, and the JSON Schema of the config file (config_schema.py),
which editors use to validate and complete it.

A few rules are more than a type: Ray's route prefix rule, a runtime_env
working_dir that must be local, pairs of keys that exclude or need each
other. Their code stays in the validator, with its own messages; the table
states them once more for the schema (`Field.schema`, `Section.exclusive`,
`Section.needs`) and tests/test_config_schema.py checks that both readers
give the same verdict on each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from servefleet._private.configuration.option_checks import (
    OptionError,
    check_bool,
    check_float,
    check_int,
    check_mapping,
    check_non_negative,
    check_str,
    check_str_list,
    type_name,
)

Kind = Literal[
    "int",           # an integer within `bounds`
    "number",        # an integer or a float
    "non_negative",  # a number >= 0
    "bool",
    "str",           # a string (one of `choices` when given)
    "str_list",      # a list of strings; `items` says what they are in errors
    "mapping",       # any mapping with string keys (values as `values` says)
    "json",          # any value (user_config)
    "any",           # any value: a Ray key checked by nobody
    "section",       # a mapping of the keys of `section`
    "section_list",  # a list of mappings of the keys of `section`
    "refused",       # never accepted: `help` says what to do instead
]


@dataclass(frozen=True)
class Field:
    """One key: what it holds, what it means, and what Ray Serve has to do with it."""
    name: str
    kind: Kind
    help: str
    bounds: tuple[int, int] | None = None  # "int": the inclusive range
    choices: tuple[Any, ...] = ()  # the only values accepted (besides null when nullable)
    also: tuple[Any, ...] = ()  # values accepted besides the kind's (num_replicas: "auto")
    nullable: bool = False  # null counts as not given
    required: bool = False
    values: Kind | None = None  # "mapping": the kind of every value (None: any)
    items: str = "strings"  # "str_list": what the items are, for errors
    # "section", "section_list"; for "mapping": a list of such sections is
    # accepted too (traffic.split).
    section: Section | None = None
    # Ray Serve compatibility: the key Ray renamed this to, or why it is
    # accepted and not used (said in the warning line, word for word), or
    # what becomes of it.
    renamed_to: str = ""
    unused: str = ""
    ray: str = ""
    # JSON Schema keywords for a rule the kind does not say (its code is in
    # the validator; the agreement test covers each).
    schema: dict[str, Any] = field(default_factory=dict)

    @property
    def is_ray(self) -> bool:
        """A key of Ray Serve's that servefleet's own vocabulary lacks."""
        return bool(self.renamed_to or self.unused or self.ray)

    @property
    def deprecated(self) -> bool:
        return bool(self.renamed_to) or self.ray.startswith("deprecated")


@dataclass(frozen=True)
class Section:
    """A mapping's keys, in the order errors list them. `exclusive`: pairs
    of dotted paths that may not both be given (non-null); `needs`: (a, b)
    where a given needs b given."""
    name: str
    help: str
    fields: tuple[Field, ...]
    exclusive: tuple[tuple[str, str], ...] = ()
    needs: tuple[tuple[str, str], ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys accepted (refused ones are not)."""
        return tuple(f.name for f in self.fields if f.kind != "refused")

    def __getitem__(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def names(self, **where: Any) -> tuple[str, ...]:
        """The keys whose attributes equal `where` (e.g. kind="int")."""
        return tuple(f.name for f in self.fields
                     if all(getattr(f, k) == v for k, v in where.items()))


_SCALAR_CHECKS = {"number": check_float, "non_negative": check_non_negative,
                  "bool": check_bool, "str": check_str}


def check_field(path: str, spec: Field, value: Any) -> Any:
    """`value` checked as `spec`'s kind says (None passes when nullable);
    OptionError naming `path` otherwise. Sections are checked as mappings
    only: their keys are their parser's to check."""
    if value is None and spec.nullable:
        return None
    if value in spec.also and not isinstance(value, bool):
        return value
    if spec.kind in _SCALAR_CHECKS or spec.kind == "int":
        checked = check_int(path, value, spec.bounds) if spec.kind == "int" \
            else _SCALAR_CHECKS[spec.kind](path, value)
        if spec.choices and checked not in spec.choices:
            raise OptionError(f"{path}: must be one of "
                              f"{', '.join(map(str, spec.choices))}, got {value!r}")
        return checked
    if spec.kind == "str_list":
        return check_str_list(path, value, spec.items)
    if spec.kind in ("mapping", "section"):
        mapping = check_mapping(path, value)
        if spec.values is not None:
            value_spec = Field(spec.name, spec.values, "")
            return {k: check_field(f"{path}.{k}", value_spec, v) for k, v in mapping.items()}
        return mapping
    if spec.kind == "section_list":
        if not isinstance(value, list):
            raise OptionError(f"{path}: expected a list, got {type(value).__name__}")
        return value
    if spec.kind == "refused":
        raise OptionError(f"{path}: not supported: {spec.help}")
    return value  # "json", "any"


__all__ = ["Field", "Kind", "Section", "check_field", "type_name"]
