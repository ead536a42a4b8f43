"""The layout of a cluster's hard state in the store (docs/design.md, "Hard state").

    /servefleet/<cluster>/leader                      lease-bound, the leader's address
    /servefleet/<cluster>/last-write                  "<term> <address>" of the leader
                                                      that wrote last (election.py's
                                                      FencedStore: in every leader write)
    /servefleet/<cluster>/controllers/<member id>     lease-bound, a live controller's address
    /servefleet/<cluster>/metrics-endpoints/<id>      lease-bound, a controller's /metrics address
    /servefleet/<cluster>/deployments/<app>/<name>    DeploymentRecord (protobuf bytes)
    /servefleet/<cluster>/applications/<app>          ApplicationRecord (protobuf bytes)
    /servefleet/<cluster>/http_options                HttpOptions (protobuf bytes)
    /servefleet/<cluster>/replicas/<app>/<name>/<id>  ReplicaRecord (protobuf bytes)

Application and deployment names cannot contain "/" (goals/spec.py checks them), so
every key splits back into its parts unambiguously.
"""

from __future__ import annotations


class ClusterKeys:
    def __init__(self, cluster: str) -> None:
        self.root = f"/servefleet/{cluster}/"
        self.leader = self.root + "leader"
        self.last_write = self.root + "last-write"
        self.controllers = self.root + "controllers/"
        self.metrics_endpoints = self.root + "metrics-endpoints/"
        self.deployments = self.root + "deployments/"
        self.replicas = self.root + "replicas/"
        self.applications = self.root + "applications/"
        self.http_options = self.root + "http_options"

    def application(self, name: str) -> str:
        return self.applications + name

    def deployment(self, application: str, name: str) -> str:
        return f"{self.deployments}{application}/{name}"

    def replica(self, application: str, name: str, replica_id: str) -> str:
        return f"{self.replicas}{application}/{name}/{replica_id}"
