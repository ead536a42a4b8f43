"""Where a digits request's time goes in its replica, with @batch, at 64
connections: py-spy samples the Batched replica of bench/models.py while wrk
drives the proxy, and the samples are sorted by what they were doing.

    .venv/bin/python bench/models_profile.py [--seconds 10]   (needs wrk and py-spy)

Prints each share of the replica's busy samples: the model (ONNX Runtime's
`run`), @batch's queue, JSON (reading the request, writing the answer), HTTP
(uvicorn, starlette, servefleet's replica app) and the rest. With a model
that takes tens of microseconds a request, batching can only save what the
model costs; this says how much that is.
"""

from __future__ import annotations

import argparse
import collections
import tempfile
from pathlib import Path

from models import ready, wrk_post
from sampled import py_spy, record, serving

from servefleet.v1 import deployment_pb2 as d

HERE = Path(__file__).resolve().parent
# The first of these that a sample's stack holds names it (innermost first).
KINDS = (("the model (InferenceSession.run)", ("onnxruntime",)),
         ("@batch's queue and split", ("batch_queue.py", "batching.py")),
         ("JSON in and out", ("json/", "image (models_app.py", "answer (models_app.py",
                              "jsonable", "answers.py")),
         ("HTTP: uvicorn, starlette, the replica app", ("uvicorn", "starlette", "httptools",
                                                       "replica/http.py")))


def kind(stack: str) -> str:
    frames = stack.split(";")[::-1]  # innermost first
    for frame in frames:
        for name, marks in KINDS:
            if any(mark in frame for mark in marks):
                return name
    return "the rest (event loop, asyncio, logging)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    spy = py_spy()
    spec = d.DeploymentSpec(
        name="Batched", import_path="models_app:Batched", route_prefix="/Batched",
        runtime=d.RuntimeOptions(working_dir=str(HERE)),
        replica_config=d.ReplicaConfig(num_replicas=1, max_ongoing_requests=64))
    work = tempfile.mkdtemp(prefix="servefleet-models-profile-")
    raw = Path(work) / "replica.txt"
    with serving(spec, work, str(HERE), ready) as (proxy, pid):
        wrk_post(f"{proxy.url}/Batched", 64, 2)  # warm up
        recorder = record(spy, pid, args.seconds, "raw", raw)
        result = wrk_post(f"{proxy.url}/Batched", 64, args.seconds)
        recorder.wait(60)
    shares: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if stack and samples.isdigit():
            shares[kind(stack)] += int(samples)
    total = sum(shares.values()) or 1
    print(f"Batched replica at 64 connections: {result['rps']:.0f} requests/s while sampled; "
          f"{total} busy samples (idle left out)")
    for name, count in shares.most_common():
        print(f"  {count / total:6.1%}  {name}")


if __name__ == "__main__":
    main()
