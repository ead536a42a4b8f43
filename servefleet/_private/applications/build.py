"""The build step: import an application's code and report its deployment graph.

    python -m servefleet._private.applications.build IMPORT_PATH --output FILE
        [--working-dir D] [--args-file F] [--grpc-servicer-function PATH ...]

The controller runs this in the application's runtime (its working
directory and environment), once per change of the application, and reads
FILE: `{"ok": true, "graph": {...}}` (api.graph_of) or `{"ok": false,
"error": "...", "traceback": "..."}`. The result goes to a file, not stdout,
because user code may print while it is imported.

IMPORT_PATH may name a bound application, a deployment (bound with no
arguments), or a builder function: called with the args object, it returns
a bound application (Ray Serve's application builders). Args for anything
but a builder are an error. With gRPC servicer functions, the graph also
names the services they register (`grpc_services`). Every import path is
resolved by servefleet/_private/applications/user_code.py, which refuses a walk out of the user's
code (`model:asyncio.base_events.subprocess.getoutput`).
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import traceback
from typing import Any

from servefleet._private.applications.api import Application, Deployment, graph_of
from servefleet._private.applications.grpc_servicers import services_of
from servefleet._private.applications.user_code import import_user_object
from servefleet._private.batching.batch import batch_sizes


def resolve(obj: Any, args: dict[str, Any]) -> Application:
    if isinstance(obj, Application | Deployment):
        if args:
            raise TypeError("args are given, but the import path names an application, "
                            "not a builder function")
        return obj if isinstance(obj, Application) else obj.bind()
    if inspect.isfunction(obj):
        built = obj(args) if inspect.signature(obj).parameters else obj()
        if isinstance(built, Application | Deployment):
            return resolve(built, {})
        raise TypeError(f"the builder {obj.__name__} returned {type(built).__name__}, "
                        "not a bound deployment")
    raise TypeError(f"the import path names {type(obj).__name__} {obj!r}: expected a bound "
                    "application (Deployment.bind(...)), a deployment or a builder function")


def build(import_path: str, working_dir: str, args: dict[str, Any],
          grpc_servicer_functions: list[str] | None = None) -> dict[str, Any]:
    try:
        app = resolve(import_user_object(import_path, working_dir), args)
        graph = graph_of(app)
        for node in graph["deployments"]:
            try:
                target = import_user_object(node["import_path"], working_dir)
            except Exception:
                continue  # not importable by its path: the replica will say so
            sizes = batch_sizes(getattr(target, "func_or_class", target))
            if sizes:  # the controller warns when max_ongoing_requests is below them
                node["batch_sizes"] = sizes
        if grpc_servicer_functions:
            # The services the ingress will serve, by name, for the proxies' routing.
            services = services_of(grpc_servicer_functions, working_dir)
            graph["grpc_services"] = services.names
            graph["grpc_streaming_methods"] = services.streaming
            graph["grpc_client_streaming_methods"] = services.client_streaming
        return {"ok": True, "graph": graph}
    except BaseException as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="servefleet-build")
    parser.add_argument("import_path")
    parser.add_argument("--output", required=True)
    parser.add_argument("--working-dir", default="")
    parser.add_argument("--args-file", default="", help="JSON object for a builder function")
    parser.add_argument("--grpc-servicer-function", action="append", default=[],
                        help="import path of a generated add_XServicer_to_server function")
    ns = parser.parse_args(argv)
    args = {}
    if ns.args_file:
        with open(ns.args_file) as f:
            args = json.load(f)
    result = build(ns.import_path, ns.working_dir, args, ns.grpc_servicer_function)
    with open(ns.output, "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
