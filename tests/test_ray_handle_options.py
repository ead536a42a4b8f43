"""Ray's handle options that servefleet accepts (ray_handle_options.py):
applied or said once, never dropped silently."""

from __future__ import annotations

import logging

import pytest

from servefleet._private.configuration import option_notes
from servefleet.serve.handle import DeploymentHandle


@pytest.fixture
def handle(monkeypatch) -> DeploymentHandle:
    monkeypatch.setattr(option_notes, "_noted", set())
    return DeploymentHandle("d", "a", controllers="127.0.0.1:1")


def test_by_value_is_what_servefleet_does_and_by_reference_is_said_once(handle, caplog) -> None:
    caplog.set_level(logging.WARNING, "servefleet._private.configuration.options")
    assert handle.options(_by_reference=False).method == "__call__"
    assert not caplog.records
    for _ in range(3):
        handle.options(_by_reference=True, method_name="m")
    (record,) = caplog.records
    assert "_by_reference=True): not used" in record.getMessage()
    assert "by value" in record.getMessage()


def test_local_routing_is_said_and_the_new_api_is_the_only_one(handle, caplog) -> None:
    caplog.set_level(logging.WARNING, "servefleet._private.configuration.options")
    handle.options(_prefer_local_routing=True, use_new_handle_api=True)
    assert [r.getMessage() for r in caplog.records] == [
        "DeploymentHandle.options(_prefer_local_routing=True): not used: handles route over "
        "every replica, with no notion of nodes"]
    with pytest.raises(ValueError, match="old handle API is gone"):
        handle.options(use_new_handle_api=False)
    with pytest.raises(TypeError, match="_by_reference"):
        handle.options(_by_reference="yes")  # type: ignore[arg-type]
