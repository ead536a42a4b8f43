"""Request routers as pure logic (servefleet/_private/dataplane/routers.py,
prefix_affinity.py) and inside a pool (balancer.py): fake replicas, no servers."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import servefleet
from servefleet import serve
from servefleet._private.configuration.config_file import load_config
from servefleet._private.configuration.option_checks import OptionError
from servefleet._private.configuration.options import to_override
from servefleet._private.dataplane.balancer import ReplicaPool
from servefleet._private.dataplane.router_loader import RouterLoader, allow_all, allow_modules
from servefleet._private.dataplane.routers import place_model
from servefleet.routing import (
    PowerOfTwoChoices,
    PrefixAffinity,
    ReplicaInfo,
    RequestInfo,
    RequestRouter,
)


def replicas(*loads: int) -> list[ReplicaInfo]:
    return [ReplicaInfo(f"r{i}", load, 10) for i, load in enumerate(loads)]


def test_prefix_affinity_keeps_a_conversation_on_its_replica_until_it_is_too_busy() -> None:
    router = PrefixAffinity(imbalance_threshold=2, block_chars=8)
    conversation = "User: tell me of the flood. "
    first = router.choose(replicas(0, 0, 0), RequestInfo(routing_key=conversation))
    assert first is not None
    for turn in range(5):  # each turn's key: the conversation so far
        conversation += f"Assistant: answer {turn}. User: and then? "
        chosen = router.choose(replicas(1, 1, 1), RequestInfo(routing_key=conversation))
        assert chosen is not None and chosen.replica_id == first.replica_id
    busy = [ReplicaInfo(r.replica_id, 5 if r.replica_id == first.replica_id else 1, 10)
            for r in replicas(0, 0, 0)]
    moved = router.choose(busy, RequestInfo(routing_key=conversation + "more"))
    assert moved is not None and moved.replica_id != first.replica_id
    # ... and the conversation now lives there.
    again = router.choose(replicas(0, 0, 0), RequestInfo(routing_key=conversation + "more!"))
    assert again is not None and again.replica_id == moved.replica_id


def test_prefix_affinity_spreads_new_keys_forgets_gone_replicas_and_is_bounded() -> None:
    router = PrefixAffinity(block_chars=4, max_blocks=50)
    owners = {router.choose(replicas(0, 0, 0, 0), RequestInfo(routing_key=f"{k:04d}conv"))
              .replica_id for k in range(40)}  # type: ignore[union-attr]
    assert len(owners) > 1  # new conversations are not all sent to one replica
    assert len(router._owners) <= 50
    router.replicas_changed(["r0"])
    assert set(router._owners.values()) <= {"r0"}
    keyless = router.choose(replicas(3, 0), RequestInfo())
    assert keyless is not None  # no key: power of two choices
    for bad in ({"imbalance_threshold": -1}, {"block_chars": 0}, {"max_blocks": "many"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            PrefixAffinity(**bad)  # type: ignore[arg-type]


def test_the_loader_makes_builtins_and_allowed_user_routers_only(caplog, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "apps"))  # my_routers
    strict = RouterLoader(allow_modules(["my_routers"]))
    assert strict.make("", "", "a/b") is None and strict.make("power_of_two", "", "a/b") is None
    router = strict.make("prefix_affinity", json.dumps({"imbalance_threshold": 5}), "a/b")
    assert isinstance(router, PrefixAffinity) and router.imbalance_threshold == 5
    assert isinstance(strict.make("my_routers:Lowest", "", "a/b"), RequestRouter)
    with caplog.at_level(logging.ERROR):
        assert RouterLoader(allow_modules([])).make("my_routers:Lowest", "", "a/b") is None
        assert RouterLoader(allow_all).make("json:JSONDecoder", "", "a/b") is None
        assert strict.make("prefix_affinity", '{"nonsense": 1}', "a/b") is None
    messages = [r.getMessage() for r in caplog.records]
    assert any("--allow-router-module" in m for m in messages)
    assert any("standard library" in m for m in messages)
    assert any("nonsense" in m for m in messages)
    assert allow_modules(["pkg"])("pkg.sub") and not allow_modules(["pkg"])("pkgx")


class Raising(RequestRouter):
    def choose(self, replicas, request):
        raise RuntimeError("broken router")


class Named(RequestRouter):
    def __init__(self, wanted: str) -> None:
        self.wanted = wanted
        self.seen: list[RequestInfo] = []

    def choose(self, replicas, request):
        self.seen.append(request)
        return next((r for r in replicas if r.replica_id == self.wanted), None)


async def test_a_pool_asks_its_router_and_falls_back_when_it_fails(caplog) -> None:
    pool = ReplicaPool(max_ongoing=2, key=("app", "dep"))
    pool.update([("r0", "a:1"), ("r1", "a:2")], 2, -1)
    named = Named("r1")
    pool.use_router(named, ("x:Named", ""))
    picked = [await pool.acquire(routing=RequestInfo(routing_key="k")) for _ in range(2)]
    assert [r.replica_id for r in picked] == ["r1", "r1"]
    third = await pool.acquire(routing=RequestInfo(routing_key="k"))  # r1 is full
    assert third.replica_id == "r0" and named.seen[-1].routing_key == "k"
    pool.use_router(Raising(), ("x:Raising", ""))
    with caplog.at_level(logging.ERROR):
        pool.release(third)
        assert (await pool.acquire()).replica_id == "r0"
    assert sum("broken router" in r.getMessage() for r in caplog.records) == 1


def test_a_models_requests_go_where_it_is_held_by_each_builtin() -> None:
    held = [ReplicaInfo("r0", 0, 10, frozenset({"b"})), ReplicaInfo("r1", 3, 10),
            ReplicaInfo("r2", 4, 10, frozenset({"a"})), ReplicaInfo("r3", 1, 10,
                                                                   frozenset({"a"}))]
    wanted = RequestInfo(model_id="a")
    assert place_model(held, "a").replica_id == "r3"  # the least loaded holder
    assert PowerOfTwoChoices().choose(held, wanted).replica_id == "r3"  # type: ignore[union-attr]
    assert place_model(held, "new").replica_id == "r1"  # holds the fewest models
    router = PrefixAffinity(imbalance_threshold=2, block_chars=4)
    first = router.choose(held, RequestInfo("a", "a long conversation"))
    assert first is not None and first.replica_id == "r3"
    # The prefix's owner among the model's holders, not elsewhere.
    busier = [ReplicaInfo(r.replica_id, 2, 10, r.models) for r in held]
    again = router.choose(busier, RequestInfo("a", "a long conversation, and more"))
    assert again is not None and again.replica_id == "r3"
    unheld = router.choose(held, RequestInfo("c", "another conversation"))
    assert unheld is not None and unheld.replica_id == place_model(held, "c").replica_id


async def test_a_pool_asks_its_router_for_a_models_requests_too() -> None:
    pool = ReplicaPool(max_ongoing=4, key=("app", "dep"))
    pool.update([("r0", "a:1"), ("r1", "a:2")], 4, -1)
    pool.replicas["r0"].models = frozenset({"m"})
    assert (await pool.acquire(model_id="m")).replica_id == "r0"  # no router: placement
    named = Named("r1")
    pool.use_router(named, ("x:Named", ""))
    assert (await pool.acquire(model_id="m")).replica_id == "r1"
    assert named.seen[-1].model_id == "m"
    pool.use_router(Named("nobody"), ("x:Named", "{}"))  # None: placement again
    assert (await pool.acquire(model_id="m")).replica_id == "r0"


class Stray(RequestRouter):
    def choose(self, replicas, request):
        return ReplicaInfo("elsewhere", 0, 1)


async def test_a_router_choosing_no_candidate_is_logged_once_and_overruled(caplog) -> None:
    pool = ReplicaPool(max_ongoing=4, key=("app", "dep"))
    pool.update([("r0", "a:1")], 4, -1)
    pool.use_router(Stray(), ("x:Stray", ""))
    with caplog.at_level(logging.ERROR):
        assert [(await pool.acquire()).replica_id for _ in range(3)] == ["r0"] * 3
    assert sum("not one of the candidates" in r.getMessage() for r in caplog.records) == 1


def test_the_router_option_in_each_form_becomes_the_spec(tmp_path) -> None:
    @servefleet.deployment(request_router="prefix_affinity")
    class Chat:
        pass

    tuned = Chat.options(request_router_kwargs={"imbalance_threshold": 3})
    config = to_override("d", tuned.options_dict).replica_config
    assert (config.request_router, json.loads(config.request_router_kwargs_json)) == (
        "prefix_affinity", {"imbalance_threshold": 3})

    @serve.deployment(request_router_config={"request_router_class": "my_routers.Lowest",
                                             "request_router_kwargs": {"note": "n"}})
    class RayChat:
        pass

    config = to_override("d", RayChat.options_dict).replica_config
    assert (config.request_router, json.loads(config.request_router_kwargs_json)) == (
        "my_routers:Lowest", {"note": "n"})
    path = tmp_path / "app.yaml"
    path.write_text("applications:\n  - name: chat\n    import_path: routed_app:app\n"
                    "    deployments:\n      - name: Routed\n        request_router: "
                    "my_routers:Lowest\n        request_router_kwargs: {note: n}\n")
    (deployment,) = load_config(str(path)).applications[0].deployments
    assert deployment.replica_config.request_router == "my_routers:Lowest"
    with pytest.raises(OptionError, match="request_router_kwargs"):
        Chat.options(request_router_kwargs=[1])


def test_a_key_shorter_than_a_block_is_found_as_the_prefix_of_the_next() -> None:
    router = PrefixAffinity(imbalance_threshold=2)  # 64-character blocks
    firsts = {}
    for c in range(12):
        chosen = router.choose(replicas(0, 0, 0), RequestInfo(routing_key=f"User {c}: hi?"))
        assert chosen is not None
        firsts[c] = chosen.replica_id
    assert len(set(firsts.values())) > 1
    for c, first in firsts.items():
        key = f"User {c}: hi?"
        for turn in range(6):  # the key crosses block boundaries as it grows
            key += f" Assistant: answer {turn}. User: and then?"
            chosen = router.choose(replicas(0, 0, 0), RequestInfo(routing_key=key))
            assert chosen is not None and chosen.replica_id == first, (c, turn)
    other = router.choose(replicas(0, 0, 0), RequestInfo(routing_key="User 1: hi!"))
    assert other is not None  # shares "User 1: hi" only: no remembered prefix


def test_rays_own_routers_are_the_builtins(tmp_path) -> None:
    @serve.deployment(request_router_config={
        "request_router_class": "ray.serve.llm.request_router.PrefixCacheAffinityRouter",
        "request_router_kwargs": {"imbalanced_threshold": 5, "do_eviction": True}})
    class Prefixed:
        pass

    config = to_override("d", Prefixed.options_dict).replica_config
    assert (config.request_router, json.loads(config.request_router_kwargs_json)) == (
        "prefix_affinity", {"imbalance_threshold": 5})
    default = "ray.serve._private.request_router:PowerOfTwoChoicesRequestRouter"
    config = to_override("d", Prefixed.options(request_router_config={
        "request_router_class": default}).options_dict).replica_config
    assert (config.request_router, config.request_router_kwargs_json) == ("power_of_two", "{}")
    for bad, field in (("ray.serve.request_router:Other", "request_router_class"),
                       ({"imbalanced_threshold": -1}, "imbalanced_threshold"),
                       ({"tree": 1}, "request_router_kwargs.tree")):
        router = bad if isinstance(bad, str) else \
            "ray.serve.llm.request_router:PrefixCacheAffinityRouter"
        kwargs = {} if isinstance(bad, str) else bad
        with pytest.raises(OptionError, match=field):
            Prefixed.options(request_router_config={"request_router_class": router,
                                                    "request_router_kwargs": kwargs})
    path = tmp_path / "app.yaml"
    path.write_text("applications:\n  - name: chat\n    import_path: routed_app:app\n"
                    "    deployments:\n      - name: Routed\n        request_router_config:\n"
                    "          request_router_class: ray.serve.llm.request_router."
                    "PrefixCacheAffinityRouter\n"
                    "          request_router_kwargs: {imbalanced_threshold: 4}\n")
    (deployment,) = load_config(str(path)).applications[0].deployments
    assert (deployment.replica_config.request_router,
            json.loads(deployment.replica_config.request_router_kwargs_json)) == (
        "prefix_affinity", {"imbalance_threshold": 4})
