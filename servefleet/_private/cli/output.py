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
from collections.abc import Sequence
from typing import Any

from google.protobuf.message import Message

from servefleet._private.messages import enum_prefix, message_dict
from servefleet.v1 import controller_pb2, records_pb2, replica_pb2, status_pb2


def to_json(message: Message) -> str:
    return json.dumps(message_dict(message), indent=2, sort_keys=True)


def records_json(records: Sequence[Message]) -> str:
    return json.dumps([message_dict(r) for r in records], indent=2, sort_keys=True)


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
            if dep.HasField("traffic"):
                t = dep.traffic
                lines.append(f"    traffic: {t.requests_per_s:.1f} req/s, "
                             f"{t.errors_per_s:.1f} errors/s, p50 {t.p50_ms:.1f} ms, "
                             f"p99 {t.p99_ms:.1f} ms (through the proxies, last seconds)")
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
    grpc = any(info.record.grpc_address for info in infos)  # a column only when used
    rows = [("REPLICA", "DEPLOYMENT", "STATE", "VERSION", "SLOT", "HTTP",
             *(("GRPC",) if grpc else ()), "PID", "MESSAGE")]
    for info in infos:
        r = info.record
        rows.append((r.replica_id, f"{r.application}/{r.deployment}",
                     enum_word(replica_pb2.ReplicaState, info.state),
                     r.version, str(r.slot), r.http_address or "-",
                     *((r.grpc_address or "-",) if grpc else ()),
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
