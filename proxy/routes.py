"""Longest-prefix routing of request paths to deployments (pure).

A route prefix matches a path equal to it or continuing it after a "/":
"/api" matches "/api", "/api/" and "/api/v1", not "/apix". "/" matches
everything, so it is the fallback when nothing longer does.
"""

from __future__ import annotations

from dataclasses import dataclass

from servefleet.v1 import watch_pb2


@dataclass(frozen=True)
class Target:
    route_prefix: str
    application: str
    deployment: str


class RouteTable:
    def __init__(self, routes: list[Target] | None = None) -> None:
        # Longest first, so the first match is the longest.
        self.routes = sorted(routes or [], key=lambda t: len(t.route_prefix), reverse=True)

    @classmethod
    def from_snapshot(cls, table: watch_pb2.RouteTable) -> RouteTable:
        return cls([Target(r.route_prefix, r.application, r.deployment) for r in table.routes])

    def match(self, path: str) -> Target | None:
        for target in self.routes:
            prefix = target.route_prefix
            if prefix == "/" or path == prefix or path.startswith(prefix + "/"):
                return target
        return None

    def as_json(self) -> dict[str, str]:
        return {t.route_prefix: f"{t.application}/{t.deployment}" for t in
                sorted(self.routes, key=lambda t: t.route_prefix)}
