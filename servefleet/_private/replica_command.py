"""A replica's command line, written by the runtimes and read back, in one place.

    python -m servefleet.replica --cluster C --application A --deployment D
        --replica-id R --version V --host H --control-port P --http-port P
        [--metrics-port P] [--grpc-port P] [--http-tls 1] --config-file F

The command line is the replica's identity where a runtime can read it back:
the process runtime scans /proc for it, the zygote records it per forked
child (as the same flag names, without dashes), and the Docker runtime reads
the container's command. Replicas started by older versions lack the
optional ports; they parse with those ports 0 (none).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, fields

MODULE = "servefleet.replica"
# The environment every replica starts with; a deployment's runtime.env comes
# after it. Replicas run on uvloop (lifecycle.run), which starts a subprocess
# with fork() rather than vfork: a child forked while gRPC calls are in flight
# ran gRPC's fork handlers and crashed with SIGSEGV before it could exec. With
# gRPC's fork support off (it is read when grpc is imported, so it must be
# there from the start) the child only execs. Nothing in a replica forks to
# go on using gRPC in the child: the zygote forks before gRPC starts.
REPLICA_ENV = {"PYTHONUNBUFFERED": "1", "GRPC_ENABLE_FORK_SUPPORT": "0"}
# Ports a replica may be started without (0: it serves nothing there).
_OPTIONAL = ("metrics_port", "grpc_port", "http_tls")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class ReplicaCommand:
    cluster: str
    application: str
    deployment: str
    replica_id: str
    version: str
    host: str
    control_port: int
    http_port: int
    config_file: str
    metrics_port: int = 0
    grpc_port: int = 0
    # 1: the HTTP port serves TLS with the cluster's certificates (hop_tls.py).
    http_tls: int = 0

    def argv(self) -> list[str]:
        """The flags after `python -m servefleet.replica`."""
        out: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _OPTIONAL and not value:
                continue
            out += [_flag(f.name), str(value)]
        return out

    def identity(self) -> dict[str, str]:
        """The flags as a record (flag names without dashes), as the zygote keeps them."""
        return {_flag(k)[2:]: str(v) for k, v in asdict(self).items()}

    def address(self, port: int, host: str | None = None) -> str:
        """host:port for one of the ports; "" for a port it does not serve."""
        return f"{host or self.host}:{port}" if port else ""

    @classmethod
    def from_identity(cls, found: dict[str, str]) -> ReplicaCommand | None:
        """From flag names to values; None when a required one is missing or bad."""
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = found.get(_flag(f.name)[2:])
            if raw is None:
                if f.name in _OPTIONAL:
                    continue
                return None
            if f.type == "int":
                if not raw.isdigit():
                    return None
                values[f.name] = int(raw)
            else:
                values[f.name] = raw
        return cls(**values)  # type: ignore[arg-type]

    @classmethod
    def parse(cls, argv: list[str]) -> ReplicaCommand | None:
        """From a full command line (`python -m servefleet.replica ...`); None
        when it is not a replica's."""
        if MODULE not in argv:
            return None
        argv = argv[argv.index(MODULE) + 1:]
        names = {_flag(f.name) for f in fields(cls)}
        found = {argv[i][2:]: argv[i + 1] for i in range(len(argv) - 1) if argv[i] in names}
        return cls.from_identity(found)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The replica's own parser (replica/main.py) accepts exactly these flags."""
    for f in fields(ReplicaCommand):
        if f.type == "int":
            parser.add_argument(_flag(f.name), type=int, default=0,
                                required=f.name not in _OPTIONAL)
        else:
            parser.add_argument(_flag(f.name), required=f.name != "host",
                                default="127.0.0.1" if f.name == "host" else None)
