"""The wire names: Watch keys built and parsed (pure)."""

from __future__ import annotations

import pytest

from servefleet._private.wire import (
    CONFIG_KIND,
    REPLICAS_KIND,
    ROUTES_KEY,
    WatchKey,
    config_key,
    parse_watch_key,
    replicas_key,
)


def test_keys_and_prefixes_are_built_as_watch_proto_says() -> None:
    assert replicas_key("app", "Model") == "replicas/app/Model"
    assert config_key("app", "Model") == "config/app/Model"
    assert replicas_key("app") == "replicas/app/"
    assert replicas_key() == "replicas/"
    assert config_key() == "config/"


@pytest.mark.parametrize(("application", "deployment"), [("", "Model"), ("a/b", "M"),
                                                         ("app", "M/x")])
def test_keys_are_not_built_from_bad_names(application: str, deployment: str) -> None:
    with pytest.raises(ValueError):
        replicas_key(application, deployment)


@pytest.mark.parametrize(("key", "parsed"), [
    ("routes", WatchKey(ROUTES_KEY)),
    ("replicas/", WatchKey(REPLICAS_KIND)),
    ("config/app/", WatchKey(CONFIG_KIND, "app")),
    ("replicas/app/Model", WatchKey(REPLICAS_KIND, "app", "Model")),
])
def test_parsing_undoes_building(key: str, parsed: WatchKey) -> None:
    assert parse_watch_key(key) == parsed
    assert parsed.is_prefix == key.endswith("/")


def test_a_bad_key_is_refused_naming_the_shapes() -> None:
    with pytest.raises(ValueError, match="must be 'routes'"):
        parse_watch_key("replicas/a/b/c")
