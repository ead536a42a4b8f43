"""The REST face against its own OpenAPI document (schemathesis): a real
controller process, its document fetched from /api/openapi.json, and
requests generated from it, valid and not, for every operation. Every answer
must be documented (status, content type, body schema), none a 5xx, and a
body that breaks the schema must be refused (negative_data_rejection).
positive_data_acceptance is left out: a body the schema allows may still be
refused by what only the controller knows (a module that does not exist).

Bounded in time: a few dozen examples per operation, on a controller with
--runtime none (an application is refused before any build, 409) and one
deployment deployed on its own, so that GET has a deployment to describe."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import positive_data_acceptance
from schemathesis.generation import GenerationMode

from servefleet._private.testing import ControllerProcess, free_port
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as dpb

# Hypothesis warns (an error here) when the global `random` changes while it
# draws a case; a thread an earlier test left in this process (a client's
# jittered backoff) can do that at any moment, which says nothing of the case
# (as in test_fuzz_surfaces.py).
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies")]
APPS = str(Path(__file__).parent / "apps")
# Per operation and mode (valid, invalid): enough to reach every branch of
# the PUT's parser, few enough for a few seconds per operation.
EXAMPLES = 25


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("rest-openapi")
    http = f"127.0.0.1:{free_port()}"
    controller = ControllerProcess(f"sqlite://{tmp}/state.db", cluster="rest-openapi",
                                   runtime="none", log_dir=tmp,
                                   extra_args=["--metrics-listen", http]).start()
    try:
        with ControllerClient([controller.address], timeout=30) as client:
            client.deploy(dpb.DeploymentSpec(
                name="Echo", application="alone", import_path="echo_app:Echo",
                route_prefix="/echo", runtime=dpb.RuntimeOptions(working_dir=APPS),
                replica_config=dpb.ReplicaConfig(num_replicas=1,
                                                 retry_methods=["GET"])))
        yield f"http://{http}"
    finally:
        controller.stop()


@pytest.mark.parametrize("mode", list(GenerationMode), ids=lambda m: m.value)
def test_every_answer_meets_the_document(base_url: str, mode: GenerationMode) -> None:
    """Schemathesis's strategies driven by Hypothesis here (its pytest plugin
    reads a pytest attribute that pytest 9 no longer has)."""
    schema = schemathesis.openapi.from_url(f"{base_url}/api/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {(o.method.upper(), o.path) for o in operations} >= {
        ("GET", "/api/serve/applications/"), ("PUT", "/api/serve/applications/"),
        ("DELETE", "/api/serve/applications/"), ("GET", "/api/status")}
    for operation in operations:
        if mode is GenerationMode.NEGATIVE and "requestBody" not in operation.definition.raw:
            continue  # nothing of it to break
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case) -> None:
            case.call_and_validate(base_url=base_url,
                                   excluded_checks=[positive_data_acceptance])

        check()
