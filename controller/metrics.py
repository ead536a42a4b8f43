"""The controller's Prometheus metrics (served on --metrics-listen, /metrics).

Kept as they happen:
- servefleet_controller_terms_total: leader terms this controller began.
- servefleet_controller_reconcile_seconds{reconciler}: one pass of each
  reconciler on the loop (histogram).
- servefleet_store_txn_seconds: fenced writes to the store (histogram);
  servefleet_store_txn_failures_total: ones the store did not answer.
- servefleet_controller_fenced_writes_refused_total: writes refused because
  another controller had taken over.

Read when scraped (from the serving term; a standby reports only `leader`):
- servefleet_controller_leader{controller}: 1 while this controller leads.
- servefleet_deployments{status}, servefleet_replicas{state}: counts.
- servefleet_watchers{kind}: open Watch streams (proxy, replica, handle, ...).
- servefleet_autoscaling_target_replicas / _current_replicas
  {application, deployment}: the autoscaler's decision and what runs.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from servefleet._private.observability.exposition import LATENCY_BUCKETS
from servefleet.v1 import status_pb2, watch_pb2


class ServingTerm(Protocol):
    """What the collector reads of the serving term (term.LeaderTerm, which
    imports this module through the reconcilers: a protocol, not an import)."""

    def status(self) -> list[status_pb2.ApplicationStatusInfo]: ...

    def watcher_kinds(self) -> Iterable[watch_pb2.WatcherKind]: ...


TERMS = Counter("servefleet_controller_terms", "leader terms this controller began")
RECONCILE = Histogram("servefleet_controller_reconcile_seconds", "one reconciler pass",
                      ["reconciler"], buckets=LATENCY_BUCKETS)
STORE_TXN = Histogram("servefleet_store_txn_seconds", "fenced writes to the store",
                      buckets=LATENCY_BUCKETS)
STORE_FAILURES = Counter("servefleet_store_txn_failures", "fenced writes the store did not answer")
FENCED_REFUSED = Counter("servefleet_controller_fenced_writes_refused",
                         "writes refused: another controller had taken over")


class TermCollector(Collector):
    """Figures of the serving term, read at scrape time."""

    def __init__(self) -> None:
        self.identity = ""
        self.term: Callable[[], ServingTerm | None] = lambda: None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        term = self.term()
        leader = GaugeMetricFamily("servefleet_controller_leader",
                                   "1 while this controller is the serving leader",
                                   labels=["controller"])
        leader.add_metric([self.identity], 1.0 if term is not None else 0.0)
        yield leader
        if term is None:
            return
        deployments, replicas = Tally[str](), Tally[str]()
        target = GaugeMetricFamily("servefleet_autoscaling_target_replicas",
                                   "the autoscaler's replica count",
                                   labels=["application", "deployment"])
        current = GaugeMetricFamily("servefleet_autoscaling_current_replicas",
                                    "replicas running, of autoscaled deployments",
                                    labels=["application", "deployment"])
        for app in term.status():
            for dep in app.deployments:
                deployments[status_pb2.DeploymentStatus.Name(dep.status)
                            .removeprefix("DEPLOYMENT_STATUS_")] += 1
                replicas.update({state: n for state, n in dep.replica_states.items()})
                if dep.HasField("autoscaling"):
                    target.add_metric([app.name, dep.name], dep.autoscaling.target_replicas)
                    current.add_metric([app.name, dep.name], dep.autoscaling.current_replicas)
        yield _family("servefleet_deployments", "deployments by status", "status", deployments)
        yield _family("servefleet_replicas", "replicas by state", "state", replicas)
        watchers = Tally(watch_pb2.WatcherKind.Name(kind).removeprefix("WATCHER_KIND_")
                         .lower() for kind in term.watcher_kinds())
        yield _family("servefleet_watchers", "open Watch streams by kind", "kind", watchers)
        yield target
        yield current


def _family(name: str, help_text: str, label: str, counts: Tally[str]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=[label])
    for value, count in sorted(counts.items()):
        family.add_metric([value], count)
    return family


TERM = TermCollector()
REGISTRY.register(TERM)
