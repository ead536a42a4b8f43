"""Custom autoscaling policies run in a process of their own, never in the controller.

A policy (`autoscaling_config.policy: "module:function"`) is user code, so
the controller does not import it: each deployment with one gets a child
process (servefleet/_private/applications/policy_runner.py), started as any user code is
(runtime/sandbox.py: no credentials in its environment, an unprivileged
user, a session of its own), in the deployment's working dir and with its
`runtime.env`. The controller sends it the AutoscalingContext of each
evaluation over a socket and reads back a replica count.

Per deployment rather than one per cluster: policies of different working
dirs cannot shadow each other's modules, and one that crashes or hangs
takes down only its own deployment's policy. A runner costs about 20 MB
(bench/policy_process.py measures it beside an in-process call).

A call answers within CALL_TIMEOUT_S or the process is killed: a hung policy
costs one timeout, not a stuck reconcile pass (calls are awaited off the
pass, on the loop's work tasks). What goes wrong is a `PolicyFailed` with
the reason: the policy raised (the process lives on and the next call tries
again), hung, or its process exited or could not start. The autoscaler then
falls back to the built-in policy and reports the failure in the status;
a dead process is started again after RESTART_BACKOFF.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import Mapping

from servefleet._private.applications.policy_runner import context_data
from servefleet._private.messages import error_summary

from ..runtime.sandbox import Sandbox, user_env
from .autoscale import AutoscalingContext, PolicyFailed

LOAD_TIMEOUT_S = 60.0  # importing the policy's module (it may import numpy)
CALL_TIMEOUT_S = 2.0
MAX_ANSWER = 1 << 16


class PolicyProcess:
    """One deployment's custom policy in its runner process."""

    def __init__(self, policy: str, working_dir: str, env: Mapping[str, str],
                 sandbox: Sandbox | None = None) -> None:
        self.policy = policy
        self._working_dir = working_dir
        self._env = dict(env)
        self._sandbox = sandbox or Sandbox()
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def start(self) -> None:
        """Start the runner and wait until the policy is imported; PolicyFailed
        (the process is gone then) when it cannot be."""
        ours, theirs = socket.socketpair()
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self._sandbox.wrap([
                    sys.executable, "-m", "servefleet._private.applications.policy_runner",
                    "--policy", self.policy,
                    "--fd", str(theirs.fileno()), "--working-dir", self._working_dir]),
                pass_fds=[theirs.fileno()], cwd=self._working_dir or None,
                env=user_env(self._env), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True)
        except OSError as e:
            ours.close()
            raise PolicyFailed(f"custom policy {self.policy}: its process cannot start: "
                               f"{e.strerror or e}") from None
        finally:
            theirs.close()
        self._reader, self._writer = await asyncio.open_connection(sock=ours)
        reply = await self._exchange(None, LOAD_TIMEOUT_S, "to load")
        if not reply.get("ready"):
            await self.close()
            raise PolicyFailed(f"custom policy {self.policy} cannot be loaded: "
                               f"{error_summary(str(reply.get('error', reply)))}")

    async def decide(self, context: AutoscalingContext) -> float:
        """The policy's count for `context`; PolicyFailed with the reason."""
        async with self._lock:  # one call at a time on the one socket
            reply = await self._exchange({"context": context_data(context)}, CALL_TIMEOUT_S,
                                         "to answer")
        if "answer" in reply:
            return float(reply["answer"])
        raise PolicyFailed(f"custom policy {self.policy}: {reply.get('error', reply)}")

    async def _exchange(self, message: dict | None, timeout_s: float, what: str) -> dict:
        if self._reader is None or self._writer is None:
            raise PolicyFailed(f"custom policy {self.policy}: its process is not running")
        try:
            async with asyncio.timeout(timeout_s):
                if message is not None:
                    self._writer.write(json.dumps(message).encode() + b"\n")
                    await self._writer.drain()
                line = await self._reader.readline()
        except TimeoutError:
            await self.close()
            raise PolicyFailed(f"custom policy {self.policy} took longer than {timeout_s:g} s "
                               f"{what}; its process was stopped") from None
        except (ConnectionError, ValueError):
            line = b""
        if not line or len(line) > MAX_ANSWER:
            code = await self._exit_code()
            await self.close()
            raise PolicyFailed(f"custom policy {self.policy}: its process exited"
                               + (f" with code {code}" if code is not None else ""))
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            await self.close()
            raise PolicyFailed(f"custom policy {self.policy}: its process answered garbage")
        return reply

    async def _exit_code(self) -> int | None:
        if self._proc is None:
            return None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                return await self._proc.wait()
        return None

    async def close(self) -> None:
        """Stop the runner (idempotent)."""
        if self._writer is not None:
            self._writer.close()
            self._reader = self._writer = None
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
