"""Running an application's build step (servefleet/_private/applications/build.py)
as a child process.

The build imports user code, which may hang, crash or print; so it runs in
a process of its own, in the application's working directory and with its
environment, like the replicas that will run the code. The process gets its
own session so that cancelling a build (a newer deploy of the application
arrived, or the term ended) kills everything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

from servefleet.v1 import application_pb2

from ..runtime.sandbox import Sandbox, user_env

BUILD_TIMEOUT_S = 120.0
OUTPUT_TAIL_CHARS = 2000


@dataclass
class BuildResult:
    graph: dict[str, Any] | None
    # The import error and its traceback, or why the build process failed.
    error: str = ""


async def run_build(spec: application_pb2.ApplicationSpec,
                    timeout_s: float = BUILD_TIMEOUT_S,
                    sandbox: Sandbox | None = None) -> BuildResult:
    """Build `spec`; cancellation kills the build process. It runs as user code
    does (runtime/sandbox.py): without the controller's credentials in its
    environment, as `sandbox`'s user."""
    sandbox = sandbox or Sandbox()
    working_dir = spec.runtime.working_dir
    with tempfile.TemporaryDirectory(prefix="servefleet-build-") as tmp:
        output = os.path.join(tmp, "graph.json")
        args_file = os.path.join(tmp, "args.json")  # args may not fit in an argument
        with open(args_file, "w") as f:
            f.write(spec.args_json or "{}")
        if sandbox.uid is not None:  # the build reads its args and writes its graph here
            for path in (tmp, args_file):
                os.chown(path, sandbox.uid, sandbox.gid or sandbox.uid)
        try:
            proc = await asyncio.create_subprocess_exec(
                *sandbox.wrap([
                    sys.executable, "-m", "servefleet._private.applications.build",
                    spec.import_path, "--output", output, "--working-dir", working_dir,
                    "--args-file", args_file,
                    *(a for f in spec.grpc_servicer_functions
                      for a in ("--grpc-servicer-function", f))]),
                cwd=working_dir or None, env=user_env(spec.runtime.env),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        except OSError as e:  # e.g. the working directory does not exist here
            return BuildResult(None, f"cannot start the build of {spec.import_path}: "
                                     f"{e.strerror or e}: {e.filename or working_dir}")
        try:
            printed, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
        except (TimeoutError, asyncio.CancelledError) as e:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            if isinstance(e, asyncio.CancelledError):
                raise
            return BuildResult(None, f"the build of {spec.import_path} did not finish "
                                     f"within {timeout_s:g} s")
        try:
            with open(output) as f:
                result = json.load(f)
        except (OSError, ValueError):
            tail = printed.decode(errors="replace")[-OUTPUT_TAIL_CHARS:].strip()
            return BuildResult(None, f"the build process exited with code {proc.returncode}"
                                     + (f"; last output:\n{tail}" if tail else ""))
    if result.get("ok"):
        return BuildResult(result["graph"])
    return BuildResult(None, f"{result.get('error', 'build failed')}\n"
                             f"{result.get('traceback', '').strip()}")
