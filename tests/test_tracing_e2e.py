"""One request, one trace, one request id: real controller, proxy and replica
processes exporting OpenTelemetry spans over OTLP to a receiver in the test
(the gRPC TraceService collectors speak), a three-deployment chain
(tests/apps/traced_app.py: Front -> Middle -> Last), JSON logs.

- the spans of one HTTP request form one tree: proxy -> replica Front ->
  handle call -> replica Middle -> handle call -> replica Last -> the user's
  own span; a client's traceparent is the root's parent;
- a request that waited for a replica has a queue span;
- the request's id is in the JSON log lines of all three replicas, and
  `servefleet logs --request-id` gathers them;
- the receiver gone: requests still succeed, the spans dropped are counted.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import subprocess
import sys
from pathlib import Path

import grpc
import httpx
import pytest

from servefleet._private.testing import (
    ControllerProcess,
    ProxyProcess,
    free_port,
    stop_cluster,
    wait_for,
)
from servefleet.client import ControllerClient
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import status_pb2

pytest.importorskip("opentelemetry.sdk")
from servefleet._private.tracing.otlp_sink import OtlpSink, ReceivedSpan

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")
GRPC_SERVICER = "grpc_classifier.classifier_pb2_grpc:add_ClassifierServicer_to_server"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tracing")
    sink = OtlpSink().start()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100",
           "OTEL_BSP_MAX_QUEUE_SIZE": "256", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "128",
           "OTEL_EXPORTER_OTLP_TIMEOUT": "2",
           "SERVEFLEET_LOG_FORMAT": "json"}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        controller = ControllerProcess(f"sqlite://{tmp}/state.db", log_dir=tmp,
                                       extra_args=["--allow-working-dir", "/"]).start()
        grpc_port = free_port()
        proxy = ProxyProcess([controller.address], log_dir=tmp, extra_args=[
            "--grpc-listen", f"127.0.0.1:{grpc_port}"]).start()
    client = ControllerClient([controller.address], timeout=30)
    try:
        runtime = dpb.RuntimeOptions(working_dir=APPS)
        client.deploy_applications([
            apb.ApplicationSpec(name="traced", import_path="traced_app:app",
                                route_prefix="/traced", runtime=runtime),
            apb.ApplicationSpec(name="batched", import_path="batch_app:Batcher",
                                route_prefix="/batched", runtime=runtime),
            apb.ApplicationSpec(name="clf", route_prefix="/clf", import_path="grpc_app:build",
                                args_json=json.dumps({"marks": str(tmp)}), runtime=runtime,
                                grpc_servicer_functions=[GRPC_SERVICER])])
        for name in ("traced", "batched", "clf"):
            wait_for(lambda name=name: (info := client.application_status(name)) is not None
                     and info.status == status_pb2.APPLICATION_STATUS_RUNNING, 90, name)
        url = proxy.url + "/traced"
        wait_for(lambda: httpx.get(url, timeout=5).status_code == 200, 30, "the route")
        proxy.grpc_target = f"127.0.0.1:{grpc_port}"
        yield sink, controller, proxy, client, url
    finally:
        stop_cluster(controller, client, [proxy])
        sink.stop()


def _trace(sink: OtlpSink, trace_id: str, done) -> list[ReceivedSpan]:
    return [s for s in sink.wait_for(
        lambda spans: done([s for s in spans if s.trace_id == trace_id]), 30)
        if s.trace_id == trace_id]


def _chain(spans: list[ReceivedSpan], leaf: ReceivedSpan) -> list[ReceivedSpan]:
    """The leaf and its ancestors, root last."""
    by_id = {s.span_id: s for s in spans}
    chain = [leaf]
    while chain[-1].parent_id in by_id:
        chain.append(by_id[chain[-1].parent_id])
    return chain


def test_one_request_through_three_deployments_is_one_trace_with_the_right_tree(
        traced) -> None:
    sink, _, _, _, url = traced
    reply = httpx.get(url, params={"word": "tree"}, timeout=30, headers={
        "traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01", "x-request-id": "req-tree-1"})
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"word": "TREE", "trace_id": TRACE_ID}  # the user's span's trace
    assert reply.headers["x-request-id"] == "req-tree-1"

    spans = _trace(sink, TRACE_ID, lambda spans: any(s.name == "user work" for s in spans)
                   and sum(s.kind == "SERVER" for s in spans) >= 4)
    chain = _chain(spans, next(s for s in spans if s.name == "user work"))
    # From the user's span up to the root, the hops in order (spans of
    # servefleet's own between them: user code, send to replica).
    principal = [(s.service, s.name) for s in chain
                 if s.kind == "SERVER" or s.name.startswith("call ") or s.name == "user work"]
    assert principal == [
        ("Last", "user work"), ("Last", "Last.__call__"),
        ("Middle", "call Last.__call__"), ("Middle", "Middle.__call__"),
        ("Front", "call Middle.__call__"), ("Front", "Front GET"),
        ("servefleet-proxy", "GET /traced")], principal
    root = chain[-1]
    assert root.parent_id == CLIENT_SPAN  # the client's span is the root's parent
    assert root.attributes["http.response.status_code"] == 200
    assert root.attributes["servefleet.deployment"] == "Front"
    assert root.attributes["servefleet.request_id"] == "req-tree-1"
    attempts = [s for s in spans if s.name == "send to replica"]
    assert len(attempts) == 3 and all(s.kind == "CLIENT" for s in attempts)
    assert all(s.attributes["servefleet.replica"] for s in attempts)
    replicas = {s.service: s for s in spans if s.kind == "SERVER" and s.service != root.service}
    assert {s.attributes["servefleet.request_id"] for s in replicas.values()} == {"req-tree-1"}
    assert replicas["Middle"].attributes["servefleet.application"] == "traced"
    # Middle is a plain def: its user code ran in a thread, as a span of the request.
    assert any(s.name == "user code" and s.service == "Middle" for s in spans)


def test_the_request_id_is_in_every_replicas_log_and_logs_gathers_them(traced) -> None:
    _, controller, _, client, url = traced
    assert httpx.get(url, params={"word": "logs"}, timeout=30,
                     headers={"x-request-id": "req-logs-7"}).status_code == 200

    def lines() -> dict[str, list[dict]]:
        found: dict[str, list[dict]] = {}
        for chunk in client.logs(request_id="req-logs-7"):
            found.setdefault(chunk.deployment, []).extend(json.loads(x) for x in chunk.lines)
        return found

    found = wait_for(lambda: (f := lines()) and len(f) == 3 and f, 20, "3 replicas' lines")
    for deployment, word in (("Front", "front"), ("Middle", "middle"), ("Last", "last")):
        entries = found[deployment]
        assert any(e["message"] == f"{word} got logs" for e in entries), entries
        assert all(e["request_id"] == "req-logs-7" for e in entries)
        assert all(re.fullmatch("[0-9a-f]{32}", e["trace_id"]) for e in entries
                   if e["message"].endswith("got logs"))
    cli = subprocess.run([sys.executable, "-m", "servefleet", "logs", "--controller",
                          controller.address, "--request-id", "req-logs-7"],
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert {line.split(" | ")[0].split("-")[0] for line in cli.stdout.splitlines()} == {
        "Front", "Middle", "Last"}, cli.stdout
    assert "req-logs-7" in cli.stdout and "req-tree-1" not in cli.stdout


def test_a_request_that_waited_for_a_replica_has_a_queue_span(traced) -> None:
    sink, _, _, _, url = traced
    ids = ["5" * 32, "6" * 32]  # Front takes one request at a time

    def ask(trace_id: str) -> int:
        return httpx.get(url, params={"sleep": "0.5"}, timeout=30, headers={
            "traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01"}).status_code

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        assert list(pool.map(ask, ids)) == [200, 200]
    queued = []
    for trace_id in ids:
        spans = _trace(sink, trace_id, lambda spans: any(s.name == "user work" for s in spans))
        queued += [s for s in spans if s.name == "queue" and s.service == "servefleet-proxy"]
    assert len(queued) == 1, queued
    assert (queued[0].end_ns - queued[0].start_ns) / 1e9 > 0.2


def test_a_grpc_call_through_the_ingress_is_one_trace(traced) -> None:
    sink, _, proxy, _, _ = traced
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    from grpc_classifier import classifier_pb2, classifier_pb2_grpc

    trace_id = "7" * 32
    with grpc.insecure_channel(proxy.grpc_target) as channel:
        stub = classifier_pb2_grpc.ClassifierStub(channel)
        wait_for(lambda: _answers(stub), 30, "the gRPC route")
        reply = stub.Predict(classifier_pb2.PredictRequest(text="hi"), timeout=10, metadata=(
            ("application", "clf"), ("traceparent", f"00-{trace_id}-{CLIENT_SPAN}-01")))
    request_id = reply.word.split()[0]
    spans = _trace(sink, trace_id, lambda spans: sum(s.kind == "SERVER" for s in spans) >= 2)
    server = [s for s in spans if s.kind == "SERVER"]
    by_id = {s.span_id: s for s in spans}
    replica = next(s for s in server if s.service == "Model")
    root = next(s for s in server if s.service == "servefleet-proxy")
    assert replica.name == root.name == "classifier.v1.Classifier/Predict"
    assert by_id[replica.parent_id].name == "send to replica"
    assert by_id[replica.parent_id].parent_id == root.span_id
    assert root.parent_id == CLIENT_SPAN
    assert replica.attributes["servefleet.request_id"] == request_id
    assert root.attributes["rpc.grpc.status_code"] == 0


def _answers(stub) -> bool:
    from grpc_classifier import classifier_pb2
    try:
        stub.Predict(classifier_pb2.PredictRequest(text="hi"), timeout=5,
                     metadata=(("application", "clf"),))
        return True
    except grpc.RpcError:
        return False


def test_batched_calls_keep_their_ids_and_each_has_a_batch_wait_span(traced) -> None:
    sink, _, proxy, _, _ = traced
    ids = [f"{i:x}" * 32 for i in range(8, 12)]

    def ask(trace_id: str) -> tuple[int, str, dict]:
        reply = httpx.get(proxy.url + "/batched", params={"text": trace_id[:4]}, timeout=30,
                          headers={"traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01",
                                   "x-request-id": f"batch-{trace_id[:4]}"})
        return reply.status_code, reply.headers["x-request-id"], reply.json()

    with concurrent.futures.ThreadPoolExecutor(len(ids)) as pool:
        answers = list(pool.map(ask, ids))
    assert [a[:2] for a in answers] == [(200, f"batch-{t[:4]}") for t in ids]
    assert max(a[2]["batch"] for a in answers) > 1  # some did share a batch
    for trace_id, (_, _, body) in zip(ids, answers, strict=True):
        spans = _trace(sink, trace_id, lambda spans: any(s.name == "@batch wait"
                                                         for s in spans))
        wait = next(s for s in spans if s.name == "@batch wait")
        assert wait.attributes["servefleet.batch.size"] == body["batch"]
        assert wait.service == "Batcher"


def test_deploys_and_replica_starts_are_traces_of_the_controller(traced) -> None:
    sink, _, _, _, _ = traced
    spans = sink.wait_for(lambda spans: any(s.name == "start replica" and
                                            s.attributes["servefleet.deployment"] == "Last"
                                            for s in spans))
    controller = [s for s in spans if s.service == "servefleet-controller"]
    deploys = [s for s in controller if s.name == "ControllerService/DeployApplications"]
    assert deploys and all(s.kind == "SERVER" and not s.parent_id for s in deploys)
    starts = [s for s in controller if s.name == "start replica"]
    assert {s.attributes["servefleet.application"] for s in starts} >= {"traced", "clf"}
    assert all(not s.parent_id for s in starts)  # a trace of its own


def test_requests_succeed_when_the_receiver_is_gone_and_drops_are_counted(traced) -> None:
    sink, _, proxy, _, url = traced
    sink.stop()
    with httpx.Client(timeout=30) as http:
        codes = [http.get(url, params={"word": str(i)}).status_code for i in range(300)]
    assert codes == [200] * 300

    def dropped() -> float:
        text = httpx.get(proxy.url + "/-/metrics", timeout=5).text
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith("servefleet_trace_spans_dropped_total"))

    wait_for(lambda: dropped() > 0, 30, "the proxy counting the spans it dropped")
