"""stop_cluster (servefleet/_private/testing.py), the one teardown of the
fixtures that start a controller, a client and proxies: every step runs in
order even when one fails, and a failure still reaches the test."""

from __future__ import annotations

from typing import Any, cast

import pytest

from servefleet._private.testing import stop_cluster


class _Part:
    def __init__(self, name: str, done: list[str], fails: str = "") -> None:
        self.name, self.done, self.fails = name, done, fails
        self.cluster = f"stop-cluster-test-{id(self)}"  # no replica of the process runtime has it

    def __getattr__(self, step: str) -> Any:
        def run() -> None:
            self.done.append(f"{self.name}.{step}")
            if step == self.fails:
                raise RuntimeError(f"{self.name}.{step} failed")
        return run


def test_proxies_then_shutdown_then_the_client_then_the_controller() -> None:
    done: list[str] = []
    stop_cluster(cast(Any, _Part("controller", done)), cast(Any, _Part("client", done)),
                 [cast(Any, _Part("proxy", done))], kill_replicas=True)
    assert done == ["proxy.stop", "client.shutdown", "client.close", "controller.stop"]


def test_a_failed_shutdown_still_stops_the_rest_and_is_raised() -> None:
    done: list[str] = []
    with pytest.raises(RuntimeError, match=r"client\.shutdown failed"):
        stop_cluster(cast(Any, _Part("controller", done)),
                     cast(Any, _Part("client", done, fails="shutdown")),
                     [cast(Any, _Part("a", done)), cast(Any, _Part("b", done))])
    assert done == ["a.stop", "b.stop", "client.shutdown", "client.close", "controller.stop"]
