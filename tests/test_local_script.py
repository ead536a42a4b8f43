"""`servefleet.run` from a script, as Ray Serve users write one: deployments
defined in `__main__`, run at module level, sent by value to the replicas
(which never run the script again); a second run replacing an application
whatever its ingress; `delete`; the HTTP port's clear error; and a
controller without --allow-code-by-value refusing code by value."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import grpc
import pytest

import servefleet._private.local.embedded
from servefleet._private.local.logs import ENV as LOG_TO_DRIVER
from servefleet._private.testing import ControllerProcess, free_port
from servefleet.client import ControllerClient, ControllerError
from servefleet.v1 import deployment_pb2 as dpb

pytestmark = [pytest.mark.slow, pytest.mark.serial]

MYLIB = '''
def shout(text):
    return text.upper() + "!"
'''

SCRIPT = '''
import asyncio, os, sys

import httpx
import numpy as np

import servefleet
from mylib import shout  # beside the script: the replicas import it too

with open("runs.log", "a") as f:  # once per run of the script, never in a replica
    f.write(f"{os.getpid()}\\n")


class Scale:
    """A custom object holding a bound deployment: it arrives as a handle."""
    def __init__(self, factor, helper):
        self.factor, self.helper = factor, helper


@servefleet.deployment
def helper():
    return "helped"


@servefleet.deployment
class Adder:
    def __init__(self, weights, scale):
        self.weights, self.scale = weights, scale

    async def add(self, x):
        return {"sum": float(self.weights.sum() * self.scale.factor + x),
                "helper": await self.scale.helper.remote(),
                "pid": os.getpid()}


@servefleet.deployment(route_prefix="/calc")
class Front:
    def __init__(self, adder):
        self.adder = adder

    async def __call__(self, request):
        x = float(request.query_params.get("x", "0"))
        return {**(await self.adder.add.remote(x)), "who": shout("front")}


port = int(sys.argv[1])
handle = servefleet.run(Front.bind(Adder.bind(np.arange(4.0), Scale(2, helper.bind()))),
                        http_port=port)
answer = httpx.get(f"http://127.0.0.1:{port}/calc", params={"x": "1"}, timeout=10).json()
assert answer["sum"] == 13.0 and answer["helper"] == "helped", answer
assert answer["who"] == "FRONT!" and answer["pid"] != os.getpid(), answer


class FakeRequest:
    query_params = {"x": "2"}


async def through_the_handle():
    return await handle.remote(FakeRequest())

print("handle", asyncio.run(through_the_handle())["sum"])
servefleet.shutdown()
print("OK")
'''

TWICE = '''
import sys

import httpx

import servefleet


@servefleet.deployment
class First:
    def __call__(self, request):
        return "first"


@servefleet.deployment
class Inner:
    def hello(self):
        return "inner"


@servefleet.deployment
class Second:
    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, request):
        return "second+" + await self.inner.hello.remote()


port = int(sys.argv[1])
url = f"http://127.0.0.1:{port}/"
servefleet.run(First.bind(), name="app", http_port=port)
assert httpx.get(url, timeout=10).text == "first"
servefleet.run(Second.bind(Inner.bind()), name="app")
assert httpx.get(url, timeout=10).text == "second+inner"
servefleet.run(First.bind(), name="app")  # back: Second and Inner go
assert httpx.get(url, timeout=10).text == "first"
from servefleet.client import ControllerClient
with ControllerClient(servefleet._private.local.embedded.controller_address()) as client:
    apps = {a.name: sorted(d.name for d in a.deployments) for a in client.status().applications}
assert apps == {"app": ["First"]}, apps
servefleet._private.local.embedded.delete("app")
servefleet._private.local.embedded.delete("app")  # gone already: nothing to do
assert httpx.get(url, timeout=10).status_code == 404
with ControllerClient(servefleet._private.local.embedded.controller_address()) as client:
    assert not client.status().applications
servefleet.shutdown()
print("OK")
'''


FAILING = '''
import sys

import servefleet


@servefleet.deployment
class Broken:
    def __init__(self):
        raise ValueError("no weights here")


try:
    servefleet.run(Broken.bind(), http_port=int(sys.argv[1]), timeout_s=100)
except RuntimeError as e:
    print("refused" if "Broken failed to deploy" in str(e) and "no weights here" in str(e)
          else f"unexpected: {e}")
finally:
    servefleet.shutdown()
'''


CHATTY = '''
import logging, os, sys

from servefleet import serve


@serve.deployment
class Chatty:
    def __init__(self):
        print("constructed", os.getpid())
        logging.getLogger("chatty").warning("logged in the constructor")

    def __call__(self, word):
        print("asked", word)  # no flush: the replica's stdout is line-buffered
        return word.upper()


print("driver", os.getpid(), file=sys.stderr)
serve.start(http_options={"port": int(sys.argv[1])})
handle = serve.run(Chatty.bind())
assert handle.remote("hello").result() == "HELLO"
if sys.argv[2] == "shutdown":
    serve.shutdown()
    print("shut down", file=sys.stderr)
print("OK")
'''
PREFIX = r"\(default/Chatty Chatty-[0-9a-f]{8} pid=(\d+)\) "


def _run_script(tmp_path: Path, source: str, stdin: bool = False, *args: str,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `source` as script.py in `tmp_path`, or (`stdin`) fed to `python -`,
    whose `__main__` has no file, like a notebook's."""
    (tmp_path / "mylib.py").write_text(MYLIB)
    (tmp_path / "script.py").write_text(textwrap.dedent(source))
    program = "-" if stdin else "script.py"
    return subprocess.run([sys.executable, program, str(free_port()), *args], cwd=tmp_path,
                          input=textwrap.dedent(source) if stdin else None,
                          capture_output=True, text=True, timeout=240,
                          env={**{k: v for k, v in os.environ.items() if k != LOG_TO_DRIVER},
                               **(env or {})})


@pytest.mark.parametrize("stdin", [False, True], ids=["script", "no-file"])
def test_a_script_runs_its_own_deployments_by_value(tmp_path, stdin: bool) -> None:
    ran = _run_script(tmp_path, SCRIPT, stdin)
    assert ran.returncode == 0, ran.stderr[-4000:]
    assert ran.stdout.split() == ["handle", "14.0", "OK"]
    # The replicas unpickled the classes: none of them ran the script again.
    assert len((tmp_path / "runs.log").read_text().split()) == 1


def test_run_replaces_an_application_whatever_its_ingress_and_delete_removes_it(
        tmp_path) -> None:
    ran = _run_script(tmp_path, TWICE)
    assert ran.returncode == 0, ran.stderr[-4000:]
    assert ran.stdout.split() == ["OK"]


def test_a_deployment_that_fails_fails_run_with_its_error(tmp_path) -> None:
    ran = _run_script(tmp_path, FAILING)
    assert ran.returncode == 0, ran.stderr[-4000:]
    assert ran.stdout.split() == ["refused"]


@pytest.mark.parametrize("end", ["exit", "shutdown"])
def test_replicas_print_and_log_lines_reach_the_scripts_stderr_once(tmp_path, end) -> None:
    """As Ray's driver shows `(ServeReplica:app:Model pid=N) ...`: the
    constructor's print and log line, and a request's print made just before
    the script ends (at exit, or serve.shutdown() then more of the script)."""
    ran = _run_script(tmp_path, CHATTY, False, end)
    assert ran.returncode == 0, ran.stderr[-4000:]
    assert ran.stdout.split() == ["OK"]  # the script's own output stays its own
    lines = ran.stderr.splitlines()
    driver = next(line.split()[1] for line in lines if line.startswith("driver "))
    constructed = [m for line in lines if (m := re.fullmatch(PREFIX + r"constructed (\d+)",
                                                             line))]
    assert len(constructed) == 1, ran.stderr[-4000:]
    pid, printed_pid = constructed[0].groups()
    assert pid == printed_pid != driver  # the replica's own process, named
    ours = [line for line in lines if re.match(PREFIX, line)]
    assert len([x for x in ours if re.fullmatch(PREFIX + "asked hello", x)]) == 1, ours
    assert len([x for x in ours if x.endswith("WARNING chatty: logged in the constructor")]) == 1
    assert len(set(ours)) == len(ours), ours  # no line twice
    if end == "shutdown":  # the last of it came before shutdown() returned, then nothing
        assert max(lines.index(x) for x in ours) < lines.index("shut down"), lines


def test_log_to_driver_off_leaves_replicas_output_out_of_the_script(tmp_path) -> None:
    ran = _run_script(tmp_path, CHATTY, False, "exit", env={LOG_TO_DRIVER: "0"})
    assert ran.returncode == 0, ran.stderr[-4000:]
    assert ran.stdout.split() == ["OK"]
    assert "constructed" not in ran.stderr and "asked" not in ran.stderr, ran.stderr[-4000:]


def test_a_bad_log_to_driver_value_is_named_before_anything_starts(monkeypatch) -> None:
    monkeypatch.setenv(LOG_TO_DRIVER, "sometimes")
    with pytest.raises(ValueError, match=f"{LOG_TO_DRIVER}='sometimes': 1 .* or 0"):
        servefleet._private.local.embedded.start(http_port=0)
    assert servefleet._private.local.embedded._cluster is None


def test_a_taken_http_port_is_named_before_anything_starts() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"port {port} is in use"):
            servefleet._private.local.embedded.start(http_port=port)
    assert servefleet._private.local.embedded._cluster is None


def _by_value_spec() -> dpb.DeploymentSpec:
    return dpb.DeploymentSpec(name="model", import_path="__main__:Model",
                              by_value=dpb.CodeByValue(target=b"not unpickled here"))


@pytest.mark.parametrize("flag", [False, True])
def test_a_controller_runs_code_by_value_only_with_the_flag(tmp_path, flag: bool) -> None:
    controller = ControllerProcess(f"sqlite://{tmp_path}/state.db", runtime="none",
                                   log_dir=tmp_path,
                                   extra_args=["--allow-code-by-value"] if flag else [])
    controller.start()
    try:
        with ControllerClient(controller.address, timeout=30) as client:
            if flag:
                client.deploy(_by_value_spec())
                assert [d.spec.by_value.target for d in client.list()] == \
                    [b"not unpickled here"]
                return
            with pytest.raises(ControllerError) as refused:
                client.deploy(_by_value_spec())
            assert refused.value.code == grpc.StatusCode.PERMISSION_DENIED
            assert "--allow-code-by-value" in refused.value.details
            assert client.list() == []  # nothing was written
    finally:
        controller.stop()
