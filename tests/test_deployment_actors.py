"""Ray's deployment-scoped actors as hidden deployments of one replica
(servefleet/_private/ray_actors.py): what the application graph holds."""

from __future__ import annotations

import json

import pytest

from servefleet import serve
from servefleet._private.actor_env import ACTOR_OF_ENV
from servefleet._private.applications.api import graph_of
from servefleet._private.configuration.option_checks import OptionError
from servefleet._private.configuration.options import to_override
from servefleet._private.ray_actors import ACTORS_ENV, deployment_name
from servefleet.serve.config import DeploymentActorConfig
from servefleet.serve.exceptions import RayServeException


class Counter:
    def __init__(self, start: int = 0) -> None:
        self.value = start

    def increment(self) -> int:
        self.value += 1
        return self.value


class AsyncCache:
    async def get(self, key: str) -> str:
        return key


@serve.deployment(num_replicas=2, runtime={"env": {"A": "1"}}, deployment_actors=[
    DeploymentActorConfig(name="counter", actor_class=Counter, init_kwargs={"start": 10},
                          actor_options={"num_cpus": 0, "max_restarts": 3}),
    {"name": "cache", "actor_class": AsyncCache}])
class Front:
    def __call__(self) -> str:
        return "hi"


def test_each_actor_is_a_hidden_deployment_of_one_replica(caplog) -> None:
    graph = graph_of(Front.bind())
    nodes = {n["name"]: n for n in graph["deployments"]}
    version = actor_version(graph)
    assert graph["ingress"] == "Front" and set(nodes) == {
        "Front", f"Front-counter-{version}", f"Front-cache-{version}"}
    counter, cache = nodes[f"Front-counter-{version}"], nodes[f"Front-cache-{version}"]
    assert counter["import_path"].endswith(":Counter") and counter["init_kwargs"] == {
        "start": 10}
    # Ray's actor concurrency: one call at a time for a plain class, 1000 for async.
    assert (counter["options"]["num_replicas"], counter["options"]["max_ongoing_requests"]) \
        == (1, 1)
    assert cache["options"]["max_ongoing_requests"] == 1000
    # The parent's replicas find their actors in their environment, beside the user's.
    env = nodes["Front"]["options"]["runtime"]["env"]
    assert env["A"] == "1"
    assert json.loads(env[ACTORS_ENV]) == {"counter": f"Front-counter-{version}",
                                           "cache": f"Front-cache-{version}"}
    # Each actor's deployment names the deployment it serves (for the controller).
    assert counter["options"]["runtime"]["env"] == {ACTOR_OF_ENV: "Front"}
    assert "deployment_actors" not in nodes["Front"]["options"]
    assert any("actor_options.max_restarts: not used" in r.getMessage()
               for r in caplog.records)


def actor_version(graph: dict) -> str:
    """The version suffix of the graph's actor deployments (all the same)."""
    env = next(n for n in graph["deployments"]
               if n["name"] == graph["ingress"])["options"]["runtime"]["env"]
    suffixes = {name.rpartition("-")[2] for name in json.loads(env[ACTORS_ENV]).values()}
    assert len(suffixes) == 1
    return suffixes.pop()


def test_actors_are_per_version_of_the_deployment_s_code() -> None:
    """As Ray keys them by code version: what rolls the replicas names new
    actors; a new replica count or user_config keeps them."""
    first = actor_version(graph_of(Front.bind()))
    assert actor_version(graph_of(Front.bind())) == first
    assert actor_version(graph_of(Front.options(num_replicas=5, user_config={"a": 1},
                                                max_ongoing_requests=9).bind())) == first
    changed = [Front.options(version="2").bind(),
               Front.options(runtime={"env": {"A": "2"}}).bind(),
               Front.options(deployment_actors=[DeploymentActorConfig(
                   name="counter", actor_class=Counter, init_kwargs={"start": 11})]).bind(),
               Front.options(deployment_actors=[DeploymentActorConfig(
                   name="counter", actor_class=AsyncCache)]).bind()]
    versions = [actor_version(graph_of(app)) for app in changed]
    assert first not in versions and len(set(versions)) == len(versions)


def test_bad_actor_configs_are_refused_by_name() -> None:
    with pytest.raises(OptionError, match=r"deployment_actors\[1\]\.name: must be a name"):
        serve.deployment(deployment_actors=[{"name": "a", "actor_class": Counter},
                                            {"name": "a", "actor_class": Counter}])(AsyncCache)
    with pytest.raises(OptionError, match="actor_class: expected a class"):
        serve.deployment(deployment_actors=[{"name": "a", "actor_class": 3}])(AsyncCache)
    with pytest.raises(ValueError, match="actor_class"):
        DeploymentActorConfig(name="a")
    # A config file cannot name a class: refused, not dropped.
    with pytest.raises(OptionError, match="not supported: give deployment_actors in code"):
        to_override("d", {"deployment_actors": [{"name": "a", "actor_class": "m:C"}]})


def test_names_are_deployment_names() -> None:
    assert deployment_name("Front", "my cache!") == "Front-my-cache"
    assert deployment_name("Front", "my cache!", "0a1b2c3d") == "Front-my-cache-0a1b2c3d"
    assert len(deployment_name("F" * 60, "counter")) <= 63
    long = deployment_name("F" * 60, "counter", "0a1b2c3d")
    assert len(long) == 63 and long.endswith("F-counter-0a1b2c3d")


def test_only_a_replica_has_actors() -> None:
    with pytest.raises(RayServeException, match="only in a running replica"):
        serve.get_deployment_actor("counter")
