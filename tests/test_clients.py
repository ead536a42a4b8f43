"""The clients in other languages against a real cluster: two controllers on
etcd, the process runtime and a proxy. Each client's own test suite runs the
same scenario (deploy, wait RUNNING, call through the proxy, the leader
SIGKILLed, delete); this starts the cluster and hands it the addresses."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from servefleet._private.security import tokens
from servefleet._private.security.certs import init_certs
from servefleet._private.testing import ControllerProcess, ProxyProcess
from servefleet.client import ControllerClient

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _show(out: subprocess.CompletedProcess) -> None:
    """The start of each stream (where a failure is named) and its end."""
    for text in (out.stdout, out.stderr):
        print(text if len(text) <= 6000 else f"{text[:3000]}\n[...]\n{text[-3000:]}")


@pytest.fixture
def cluster_env(etcd_fleet, tmp_path):
    etcd_fleet.start(2, runtime="process", lease_ttl=2.0)
    etcd_fleet.leader()
    proxy = ProxyProcess(etcd_fleet.addresses(), log_dir=tmp_path).start()
    env = {**os.environ,
           "SERVEFLEET_CONTROLLER": ",".join(etcd_fleet.addresses()),
           "SERVEFLEET_TEST_PROXY": proxy.url,
           "SERVEFLEET_TEST_APPS": str(ROOT / "tests" / "apps"),
           "SERVEFLEET_TEST_PIDS": json.dumps({p.address: p.proc.pid
                                               for p in etcd_fleet.started})}
    yield env
    proxy.stop()
    with contextlib.suppress(Exception), ControllerClient(etcd_fleet.addresses(),
                                                          timeout=15) as client:
        client.shutdown()


def test_the_node_client(cluster_env, tls_cluster_env) -> None:
    """`npm test` of the package clients/node (scripts/setup ran `npm ci`
    there, whose prepare step generated its types): the type check (tsc),
    the unit tests, then the cluster tests against the plain cluster and the
    TLS one."""
    package = ROOT / "clients" / "node"
    assert shutil.which("npm"), "npm is missing: run scripts/setup"
    built = (package / "node_modules" / ".package-lock.json", package / "types" / "controller.d.ts")
    assert all(p.is_file() for p in built), "run scripts/setup (npm ci in clients/node)"
    out = subprocess.run(["npm", "test"], cwd=package, env={**cluster_env, **tls_cluster_env},
                         capture_output=True, text=True, timeout=300)
    _show(out)
    assert out.returncode == 0
    # The cluster tests ran and passed (a missing variable would skip them: "# SKIP").
    for name in ("the docs' program through a failover", "TLS and tokens"):
        assert re.search(rf"^ok \d+ - {re.escape(name)}$", out.stdout, re.M), name
    assert re.search(r"^# fail 0$", out.stdout, re.M)


@pytest.fixture
def tls_cluster_env(etcd, cluster, tmp_path):
    """Two controllers on etcd with mutual TLS and tokens (no runtime: the
    Go client's TLS test deploys, watches and fails over, serving nothing)."""
    certs = tmp_path / "certs"
    init_certs(certs)
    token_file = tmp_path / "tokens"
    issued = {role: tokens.create(token_file, f"go-{role}", role)
              for role in ("deployer", "reader")}
    controllers = [ControllerProcess(etcd.url, cluster=f"{cluster}-tls", lease_ttl=2.0,
                                     runtime="none", log_dir=tmp_path, certs=certs,
                                     extra_args=["--auth-tokens", str(token_file)])
                   for _ in range(2)]
    try:
        for controller in controllers:
            controller.start(wait=False)
        for controller in controllers:
            controller.wait_serving_health(timeout=30)
        yield {"SERVEFLEET_TEST_TLS_CONTROLLER": ",".join(c.address for c in controllers),
               "SERVEFLEET_TEST_TLS_PIDS": json.dumps({c.address: c.proc.pid
                                                       for c in controllers}),
               "SERVEFLEET_TEST_CERTS": str(certs),
               "SERVEFLEET_TEST_DEPLOYER_TOKEN": issued["deployer"],
               "SERVEFLEET_TEST_READER_TOKEN": issued["reader"]}
    finally:
        for controller in controllers:
            controller.stop()


GO_CLUSTER_TESTS = ("TestDeployWatchCallFailOverDelete", "TestTLSAndToken")


def test_the_go_client(cluster_env, tls_cluster_env) -> None:
    """`go test ./...` of the module (go.mod at the root), its cluster tests
    against the plain cluster and the TLS one; modules and build cache are
    Go's defaults (~/go/pkg/mod, ~/.cache/go-build), kept between runs."""
    assert shutil.which("go"), "go is missing: see the README (Go 1.26)"
    out = subprocess.run(["go", "test", "-count=1", "-v", "./..."], cwd=ROOT,
                         env={**cluster_env, **tls_cluster_env}, capture_output=True,
                         text=True, timeout=600)
    _show(out)
    assert out.returncode == 0
    for name in GO_CLUSTER_TESTS:  # a skip would pass unseen
        assert f"--- PASS: {name} " in out.stdout, name


def _docs_go_program() -> str:
    """The complete program of docs/guides/go.md (its Go block that is a main package)."""
    page = (ROOT / "docs" / "guides" / "go.md").read_text()
    programs = [b for b in re.findall(r"^```go\n(.*?)^```$", page, re.M | re.S)
                if "\npackage main\n" in b]
    assert len(programs) == 1, "docs/guides/go.md should hold one complete program"
    return programs[0]


def _lines_until(lines: queue.Queue, proc: subprocess.Popen, seen: list[str],
                 pattern: str) -> re.Match:
    """Read the program's output until a line matches `pattern`."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            assert proc.poll() is None, "".join(seen)
            continue
        seen.append(line)
        if found := re.search(pattern, line):
            return found
    raise AssertionError(f"no line like {pattern!r} in:\n{''.join(seen)}")


def test_a_go_program_outside_the_repository(cluster_env, tmp_path) -> None:
    """A Go developer's module of its own (in tmp_path) that requires the
    client with a `replace` to this checkout, as the Go page says, builds the
    page's program and runs it: deploy, status, Watch; the leader SIGKILLed
    under the Watch stream, which the program opens again on the new leader;
    Ctrl-C deletes the application."""
    module = tmp_path / "fleet"
    module.mkdir()
    (module / "main.go").write_text(_docs_go_program())
    for command in (["go", "mod", "init", "example.com/fleet"],
                    ["go", "mod", "edit", "-require=github.com/servefleet/servefleet@v0.0.0",
                     f"-replace=github.com/servefleet/servefleet={ROOT}"],
                    ["go", "mod", "tidy"], ["go", "vet", "."],
                    ["go", "build", "-o", "fleet", "."]):
        out = subprocess.run(command, cwd=module, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, f"{command}: {out.stdout}{out.stderr}"
    pids = json.loads(cluster_env["SERVEFLEET_TEST_PIDS"])
    proc = subprocess.Popen(
        [str(module / "fleet"), "-name", "fleet", "-import", "graph_app:hello",
         "-dir", cluster_env["SERVEFLEET_TEST_APPS"], "-route", "/fleet"],
        env=cluster_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in proc.stdout or ():
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        _lines_until(lines, proc, seen, r"^  fleet: APPLICATION_STATUS_RUNNING$")
        first = _lines_until(lines, proc, seen, r"^watching routes on (\S+)$").group(1)
        _lines_until(lines, proc, seen, r"^  route /fleet -> fleet/")
        os.kill(pids[first], signal.SIGKILL)
        _lines_until(lines, proc, seen, r"^watch stream ended \(Unavailable\)")
        second = _lines_until(lines, proc, seen, r"^watching routes on (\S+)$").group(1)
        assert second != first and second in pids
        _lines_until(lines, proc, seen, r"^  route /fleet -> fleet/")
        proc.send_signal(signal.SIGINT)
        _lines_until(lines, proc, seen, r"^deleted fleet$")
        assert proc.wait(30) == 0, "".join(seen)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        reader.join(10)
        if proc.stdout:
            proc.stdout.close()
        print("".join(seen))


def test_the_java_client(cluster_env, tls_cluster_env) -> None:
    """`mvn verify` of clients/java (pom.xml): the unit tests, then ClusterIT
    against the plain cluster and the TLS one. Maven Central's artifacts are
    downloaded into ~/.m2 on the first run and read from there after."""
    assert shutil.which("mvn"), "Maven is missing: run scripts/setup"
    # A shell runs a background command with SIGINT ignored, and a JVM started
    # so installs no handler for it: the docs program's Ctrl-C test then waits
    # in vain (a CI run launched with `cmd &` failed so). Default it again.
    out = subprocess.run(["mvn", "-B", "-ntp", "verify"], cwd=ROOT / "clients" / "java",
                         env={**cluster_env, **tls_cluster_env}, capture_output=True,
                         text=True, timeout=900,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _show(out)
    assert out.returncode == 0
    # Both cluster tests ran (a missing variable would skip them).
    assert re.search(r"Tests run: 2, Failures: 0, Errors: 0, Skipped: 0, .* in "
                     r"io\.servefleet\.client\.ClusterIT$", out.stdout, re.M), "ClusterIT"


def test_the_java_page_shows_the_program_the_cluster_test_runs() -> None:
    """docs/guides/java.md's complete program is clients/java's Fleet.java,
    which ClusterIT runs through a failover, character for character."""
    page = (ROOT / "docs" / "guides" / "java.md").read_text()
    program = (ROOT / "clients" / "java" / "src" / "test" / "java" / "Fleet.java").read_text()
    assert program in re.findall(r"^```java\n(.*?)^```$", page, re.M | re.S)


def test_the_node_page_shows_the_program_the_cluster_test_runs() -> None:
    """docs/guides/node.md's complete program is clients/node's
    examples/fleet.js, which the package's cluster test runs through a
    failover, character for character."""
    page = (ROOT / "docs" / "guides" / "node.md").read_text()
    program = (ROOT / "clients" / "node" / "examples" / "fleet.js").read_text()
    assert program in re.findall(r"^```js\n(.*?)^```$", page, re.M | re.S)
