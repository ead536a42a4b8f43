"""The CPU threads of replicas' numeric libraries (controller/runtime/threads.py):
the deployment's choice, else its num_cpus, else the host's cores shared."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx

from servefleet.controller.runtime import ReplicaLaunch
from servefleet.controller.runtime.process import ProcessRuntime
from servefleet.controller.runtime.threads import thread_env

APPS = str(Path(__file__).parent / "apps")


def test_the_deployments_choice_then_num_cpus_then_a_share_of_the_cores() -> None:
    assert thread_env({}, 0, 8, 4) == {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2",
                                       "MKL_NUM_THREADS": "2", "SERVEFLEET_CPU_THREADS": "2"}
    assert thread_env({}, 0, 2, 4)["OMP_NUM_THREADS"] == "1"  # never 0
    assert thread_env({}, 2.5, 2, 4)["OMP_NUM_THREADS"] == "3"  # num_cpus, rounded up
    mine = thread_env({"OMP_NUM_THREADS": "6", "MKL_NUM_THREADS": "5"}, 1, 2, 1)
    assert mine == {"OPENBLAS_NUM_THREADS": "6", "SERVEFLEET_CPU_THREADS": "6"}
    assert thread_env({"OMP_NUM_THREADS": "many"}, 0, 4, 1)["OPENBLAS_NUM_THREADS"] == "4"


async def test_replicas_on_one_host_share_its_cores(tmp_path) -> None:
    runtime = ProcessRuntime(tmp_path / "runtime", "th")

    def launch(replica_id: str, env: dict[str, str] | None = None) -> ReplicaLaunch:
        return ReplicaLaunch(cluster="th", application="a", deployment="d",
                             replica_id=replica_id, version="v", working_dir=APPS,
                             settings={"import_path": "probe_app:Probe"}, env=env or {})

    started = [await runtime.start(launch("r0")),
               await runtime.start(launch("r1", {"OMP_NUM_THREADS": "3"}))]
    try:
        seen = [await _threads(f"http://{r.http_address}/") for r in started]
        cores = os.cpu_count() or 1
        assert seen[0] == {"OMP_NUM_THREADS": str(cores), "OPENBLAS_NUM_THREADS": str(cores)}
        assert seen[1] == {"OMP_NUM_THREADS": "3", "OPENBLAS_NUM_THREADS": "3"}
    finally:
        for replica in started:
            await runtime.stop(replica.handle, 5)
        runtime.close()  # and its zygote


async def _threads(url: str) -> dict[str, str]:
    """The thread variables the replica at `url` sees, once it answers (60 s at most)."""
    async with httpx.AsyncClient(timeout=5) as client:
        for _ in range(300):
            try:
                answer = await client.get(url)
                if answer.status_code == 200:
                    return answer.json()["threads"]
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    raise AssertionError(f"{url} did not answer within 60 s")
