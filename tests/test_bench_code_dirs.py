"""Benchmarks run their own code from wherever they are started: the
controller a bench starts allows the bench's code directory
(--allow-working-dir) rather than relying on being run from the
repository's root (its default allows only the directory it runs in).
Real controllers, started from a directory of their own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from servefleet._private.testing import wait_for
from servefleet.client import ControllerClient

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import models  # noqa: E402
from nemesis.disk_full import MountRefused  # noqa: E402
from nemesis.embedded import EmbeddedSide  # noqa: E402
from nemesis.history import OK  # noqa: E402

pytestmark = pytest.mark.slow


def test_the_models_bench_deploys_its_models_from_another_directory(tmp_path,
                                                                      monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    controller = models.start_controller(str(tmp_path))
    try:
        wait_for(controller.is_leader, 30, "a leader")
        with ControllerClient(controller.address, timeout=30) as client:
            for spec in models.deployments():
                spec.replica_config.num_replicas = 0  # the policy is all this is about
                client.deploy(spec)
            assert len(client.list()) == 5
            client.shutdown()
    finally:
        controller.stop()


def test_the_chaos_runs_embedded_side_deploys_from_another_directory(tmp_path,
                                                                      monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    try:
        side = EmbeddedSide(tmp_path)
    except MountRefused as e:
        pytest.skip(f"the embedded side needs a tmpfs: {e}")
    try:
        side.start(seed=1)
        (deployed,) = side.recorded_ops()
        assert (deployed.outcome, deployed.error) == (OK, "")
    finally:
        assert side.stop() == []
