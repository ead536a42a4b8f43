"""How the CLI prints replies: readable text, or JSON.

The JSON is the reply's protobuf message with its proto field names
(`target_replicas`, not `targetReplicas`), every field present (zero values
and empty lists too, so the shape does not change with the state), and enum
values as the short words the text output uses (`HEALTHY`, `RUNNING`), not
the proto's prefixed names (`DEPLOYMENT_STATUS_HEALTHY`). The README's "JSON
output" section shows the shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, cast

from google.protobuf.descriptor import Descriptor, EnumDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from servefleet.v1 import controller_pb2, records_pb2, replica_pb2, status_pb2


def _dict(message: Message) -> dict:
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


def to_json(message: Message) -> str:
    return json.dumps(_dict(message), indent=2, sort_keys=True)


def records_json(records: Sequence[Message]) -> str:
    return json.dumps([_dict(r) for r in records], indent=2, sort_keys=True)


def enum_word(enum: Any, value: int) -> str:
    """The short name of an enum value: DeploymentStatus 2 -> "HEALTHY"."""
    return str(enum.Name(value)).removeprefix(enum_prefix(enum.DESCRIPTOR))


def status_text(reply: controller_pb2.GetStatusResponse) -> str:
    standbys = [c for c in reply.controllers if c != reply.leader]
    lines = [f"cluster {reply.cluster}, leader {reply.leader}"
             + (f", standbys {', '.join(standbys)}" if standbys else "")]
    if not reply.applications:
        lines.append("no applications")
    for app in reply.applications:
        word = enum_word(status_pb2.ApplicationStatus, app.status)
        lines.append(f"application {app.name}: {word}" + (f" ({app.message})" if app.message
                                                         else ""))
        for dep in app.deployments:
            dword = enum_word(status_pb2.DeploymentStatus, dep.status)
            states = ", ".join(f"{n} {state}" for state, n in sorted(dep.replica_states.items()))
            lines.append(f"  {dep.name}: {dword}, {dep.replica_states.get('RUNNING', 0)}/"
                         f"{dep.target_replicas} running, version {dep.version}"
                         + (f" [{states}]" if states else "")
                         + (f": {dep.message}" if dep.message else ""))
            if dep.HasField("autoscaling"):
                auto = dep.autoscaling
                lines.append(f"    autoscaling: load {auto.load:g} asks for "
                             f"{auto.desired_replicas}, target {auto.target_replicas}"
                             + (f"; last change: {auto.reason}" if auto.reason else "")
                             + (f"; POLICY ERROR: {auto.policy_error}"
                                if auto.policy_error else ""))
    if reply.proxies:
        lines.append("proxies:")
        lines.extend(f"  {p.id} {p.address} {'healthy' if p.healthy else 'UNHEALTHY'}"
                     for p in reply.proxies)
    return "\n".join(lines)


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def replicas_text(infos: Sequence[replica_pb2.ReplicaInfo]) -> str:
    if not infos:
        return "no replicas"
    rows = [("REPLICA", "DEPLOYMENT", "STATE", "VERSION", "SLOT", "HTTP", "PID", "MESSAGE")]
    for info in infos:
        r = info.record
        rows.append((r.replica_id, f"{r.application}/{r.deployment}",
                     enum_word(replica_pb2.ReplicaState, info.state),
                     r.version, str(r.slot), r.http_address or "-",
                     r.handle.partition(":")[0] or "-",
                     info.message.splitlines()[0] if info.message else ""))
    return _table(rows)


def records_text(records: Sequence[records_pb2.DeploymentRecord]) -> str:
    if not records:
        return "no deployments"
    rows = [("DEPLOYMENT", "VERSION", "REPLICAS", "ROUTE", "STARTED", "ENDED")]
    for r in records:
        config = r.spec.replica_config
        replicas = (f"auto {config.autoscaling_config.min_replicas}-"
                    f"{config.autoscaling_config.max_replicas}"
                    if config.HasField("autoscaling_config") else str(config.num_replicas))
        rows.append((
            f"{r.spec.application}/{r.spec.name}", r.version, replicas,
            r.spec.route_prefix if r.spec.HasField("route_prefix") else "-",
            r.start_time.ToDatetime().strftime("%Y-%m-%d %H:%M:%S"),
            r.end_time.ToDatetime().strftime("%Y-%m-%d %H:%M:%S") if r.deleted else "-",
        ))
    return _table(rows)
