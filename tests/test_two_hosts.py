"""Two hosts for real (issue 41): bench/two_hosts.py makes two network
namespaces with a Docker engine each, joined in one swarm over a veth,
deploys deploy/stack.yml across them, and checks the stack's services on
both nodes, placement, a lost worker and its return. Here it runs as CI's
check; its printed results are the docs' table
(docs/guides/docker.md, "Across two hosts")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_compose import _unavailable

pytestmark = [pytest.mark.slow, pytest.mark.serial]
ROOT = Path(__file__).resolve().parent.parent


def test_placement_a_lost_worker_and_its_return_across_two_hosts() -> None:
    if os.environ.get("SERVEFLEET_DOCKER_TESTS") == "skip":
        pytest.skip("SERVEFLEET_DOCKER_TESTS=skip")
    if os.geteuid() != 0:
        _unavailable("network namespaces and engines of its own need root")
    if subprocess.run(["docker", "image", "inspect", "servefleet:latest"],
                      capture_output=True).returncode:
        _unavailable("no Docker engine with the servefleet image (scripts/docker-image)")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "two_hosts.py")],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(done.stdout[:done.stdout.rindex("}") + 1])
    tasks = results["1. tasks by node"]
    assert {"controller", "etcd-1", "proxy"} <= set(tasks["10.232.0.1"]), tasks
    assert "proxy" in tasks["10.232.0.2"] and "controller" not in tasks["10.232.0.2"], tasks
    assert results["1. pinned to zone b: replica at"] == ["10.232.0.2"]
    assert results["1. replicas by host"] == ["10.232.0.1", "10.232.0.2"]
    assert results["2. failed requests (of all)"].startswith("0 of ")
    assert results["3. the worker's proxy answers again"] is True
    assert "10.232.0.2" in results["3. replicas by host after a scale-up"]
