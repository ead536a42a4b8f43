"""Protobuf messages as JSON data, and errors as one line, the way servefleet
shows them to people.

Proto field names (`target_replicas`), every field present (zero values and
empty lists too, so the shape does not change with the state), and enum
values as short words (`HEALTHY`, not `DEPLOYMENT_STATUS_HEALTHY`). The CLI's
--json and the dashboard's /api/status both use it.
"""

from __future__ import annotations

import re
from typing import Any, cast

from google.protobuf.descriptor import Descriptor, EnumDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message


def message_dict(message: Message) -> dict[str, Any]:
    """`message` as JSON data: proto field names, every field, short enum words."""
    data = MessageToDict(message, preserving_proto_field_name=True,
                         always_print_fields_with_no_presence=True)
    # The upb runtime's Descriptor, which the stubs type apart from the Python one.
    _shorten_enums(cast(Descriptor, message.DESCRIPTOR), data)
    return data


def enum_prefix(enum: EnumDescriptor) -> str:
    """"ApplicationStatus" -> "APPLICATION_STATUS_", the prefix buf lint makes
    every value of an enum carry."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", enum.name).upper() + "_"


def _short(enum: EnumDescriptor, value: Any) -> Any:
    prefix = enum_prefix(enum)
    if isinstance(value, list):
        return [v.removeprefix(prefix) if isinstance(v, str) else v for v in value]
    return value.removeprefix(prefix) if isinstance(value, str) else value


def _shorten_enums(descriptor: Descriptor, data: dict[str, Any]) -> None:
    """Replace, in place, the enum values of `data` (a MessageToDict of a
    `descriptor` message) by their short names."""
    for field in descriptor.fields:
        if field.name not in data:
            continue
        value = data[field.name]
        if field.enum_type is not None:
            data[field.name] = _short(field.enum_type, value)
        elif field.message_type is not None and field.message_type.GetOptions().map_entry:
            inner = field.message_type.fields_by_name["value"]
            for key, item in value.items():
                if inner.enum_type is not None:
                    value[key] = _short(inner.enum_type, item)
                elif inner.message_type is not None and isinstance(item, dict):
                    _shorten_enums(inner.message_type, item)
        elif field.message_type is not None:
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, dict):  # well-known types are strings
                    _shorten_enums(field.message_type, item)


TRACEBACK = "Traceback (most recent call last):"
# The longest one-line summary; status has the whole error.
MAX_SUMMARY = 1000


def error_summary(text: str) -> str:
    """One line for an error that may carry a traceback: the text before the
    traceback if there is any, else the traceback's last line (the exception)."""
    head, found, tail = text.partition(TRACEBACK)
    lines = [line.strip() for line in (head if head.strip() or not found else tail).splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return ""
    line = " ".join(lines) if head.strip() else lines[-1]
    return line if len(line) <= MAX_SUMMARY else line[:MAX_SUMMARY - 3] + "..."
