"""HAProxy's own counters (`show stat`), read back as servefleet's load figures (pure).

Per backend (deployment): requests queued (the backend's queue and its
servers'), requests at replicas (current sessions), requests and 5xx
answers so far, HAProxy's mean total time over its last 1024 requests, and
the servers its checks hold DOWN (passive health: reported to the
controller as ejected, as the Python proxy reports the replicas it ejects).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field


@dataclass
class BackendLoad:
    queued: int = 0
    ongoing: int = 0
    # Counters since the worker started (a reload starts them again).
    requests: int = 0
    errors: int = 0
    mean_ms: int = 0
    down: list[str] = field(default_factory=list)


def _int(row: dict[str, str], key: str) -> int:
    value = row.get(key) or "0"
    return int(value) if value.isdigit() else 0


def parse_stat(text: str, backends: set[str]) -> dict[str, BackendLoad]:
    """The load of each backend in `backends` from `show stat`'s CSV."""
    text = text.lstrip()
    if text.startswith("# "):
        text = text[2:]
    loads: dict[str, BackendLoad] = {}
    for row in csv.DictReader(io.StringIO(text)):
        name = row.get("pxname", "")
        if name not in backends:
            continue
        load = loads.setdefault(name, BackendLoad())
        server = row.get("svname", "")
        if server == "BACKEND":
            load.queued += _int(row, "qcur")
            load.ongoing = _int(row, "scur")
            load.requests = _int(row, "req_tot") or _int(row, "stot")
            load.errors = _int(row, "hrsp_5xx")
            load.mean_ms = _int(row, "ttime")
        elif server != "FRONTEND":
            load.queued += _int(row, "qcur")
            if row.get("status", "").startswith("DOWN"):
                load.down.append(server)
    return loads
