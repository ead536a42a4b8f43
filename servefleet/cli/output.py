"""How the CLI prints replies: readable text, or JSON with proto field names."""

from __future__ import annotations

import json
from collections.abc import Sequence

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from servefleet.v1 import controller_pb2, records_pb2, replica_pb2, status_pb2


def _dict(message: Message) -> dict:
    return MessageToDict(message, preserving_proto_field_name=True)


def to_json(message: Message) -> str:
    return json.dumps(_dict(message), indent=2, sort_keys=True)


def records_json(records: Sequence[Message]) -> str:
    return json.dumps([_dict(r) for r in records], indent=2, sort_keys=True)


def _enum_word(enum: object, value: int, prefix: str) -> str:
    return enum.Name(value).removeprefix(prefix)  # type: ignore[attr-defined]


def status_text(reply: controller_pb2.GetStatusResponse) -> str:
    standbys = [c for c in reply.controllers if c != reply.leader]
    lines = [f"cluster {reply.cluster}, leader {reply.leader}"
             + (f", standbys {', '.join(standbys)}" if standbys else "")]
    if not reply.applications:
        lines.append("no applications")
    for app in reply.applications:
        word = _enum_word(status_pb2.ApplicationStatus, app.status, "APPLICATION_STATUS_")
        lines.append(f"application {app.name}: {word}" + (f" ({app.message})" if app.message
                                                         else ""))
        for dep in app.deployments:
            dword = _enum_word(status_pb2.DeploymentStatus, dep.status, "DEPLOYMENT_STATUS_")
            states = ", ".join(f"{n} {state}" for state, n in sorted(dep.replica_states.items()))
            lines.append(f"  {dep.name}: {dword}, {dep.replica_states.get('RUNNING', 0)}/"
                         f"{dep.target_replicas} running, version {dep.version}"
                         + (f" [{states}]" if states else "")
                         + (f": {dep.message}" if dep.message else ""))
    if reply.proxies:
        lines.append("proxies:")
        lines.extend(f"  {p.id} {p.address} {'healthy' if p.healthy else 'UNHEALTHY'}"
                     for p in reply.proxies)
    return "\n".join(lines)


def _table(rows: list[tuple[str, ...]]) -> str:
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
                     _enum_word(replica_pb2.ReplicaState, info.state, "REPLICA_STATE_"),
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
