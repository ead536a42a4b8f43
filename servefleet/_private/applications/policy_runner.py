"""A custom autoscaling policy, run outside the controller.

    python -m servefleet._private.applications.policy_runner --policy module:function --fd N
        [--working-dir D]

The controller starts one of these per deployment with a custom policy
(controller/reconcile/policy_process.py), as an unprivileged process
without its credentials, and talks to it over the socket it passed as file
descriptor N, one JSON object a line:

    runner -> controller   {"ready": true}   or   {"error": "...", "traceback": "..."}
    controller -> runner   {"context": {...AutoscalingContext fields...}}
    runner -> controller   {"answer": 3.0}   or   {"error": "RuntimeError: ..."}

Whatever the policy prints goes to this process's stdout and stderr, never
onto the socket. The policy is imported once; an exception it raises is its
answer to that call, and the next call tries again. The process ends when
the controller closes the socket.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import sys
import traceback
from typing import Any

from google.protobuf import json_format

from servefleet.controller.reconcile.autoscale import AutoscalingContext
from servefleet.v1 import deployment_pb2

# A line longer than this from the controller is a bug there, not a request.
MAX_LINE = 1 << 20


def context_of(data: dict[str, Any]) -> AutoscalingContext:
    config = json_format.ParseDict(data["config"], deployment_pb2.AutoscalingConfig())
    return AutoscalingContext(
        application=str(data["application"]), deployment=str(data["deployment"]),
        current_replicas=int(data["current_replicas"]),
        target_replicas=int(data["target_replicas"]), load=float(data["load"]),
        config=config, seconds_since_last_change=float(data["seconds_since_last_change"]))


def context_data(context: AutoscalingContext) -> dict[str, Any]:
    """The JSON form of `context`, as the controller sends it."""
    return {"application": context.application, "deployment": context.deployment,
            "current_replicas": context.current_replicas,
            "target_replicas": context.target_replicas, "load": context.load,
            "config": json_format.MessageToDict(context.config),
            "seconds_since_last_change": context.seconds_since_last_change}


def answer(policy: Any, line: bytes) -> dict[str, Any]:
    """One call: the policy's count for the context in `line`, or its error."""
    try:
        context = context_of(json.loads(line)["context"])
        value = float(policy(context))
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"returned {value!r}; expected a replica count >= 0")
    except Exception as e:  # the user's code: whatever it raises is its answer
        return {"error": f"{type(e).__name__}: {e}"[:2000]}
    return {"answer": value}


def serve(policy_path: str, working_dir: str, channel: socket.socket) -> None:
    out = channel.makefile("wb")
    reader = channel.makefile("rb")

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message).encode() + b"\n")
        out.flush()

    try:
        from servefleet._private.applications.user_code import (
            import_user_object,  # not in the controller's process
        )

        policy = import_user_object(policy_path, working_dir)
        if not callable(policy):
            raise TypeError(f"{policy_path} is a {type(policy).__name__}, not a function")
    except BaseException as e:  # an import may raise SystemExit, too
        send({"error": f"{type(e).__name__}: {e}"[:2000],
              "traceback": traceback.format_exc()[-8000:]})
        return
    send({"ready": True})
    while line := reader.readline(MAX_LINE):
        send(answer(policy, line))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="servefleet._private.applications.policy_runner")
    parser.add_argument("--policy", required=True)
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--working-dir", default="")
    args = parser.parse_args(argv)
    channel = socket.socket(fileno=args.fd)
    if args.working_dir:
        sys.path.insert(0, args.working_dir)
    try:
        serve(args.policy, args.working_dir, channel)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the controller went away: so do we
    finally:
        channel.close()


if __name__ == "__main__":
    main()
