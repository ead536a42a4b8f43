"""`servefleet up`: started and stopped by a test, leaving no process behind;
a second `up` on taken ports or the same state dir refuses to start and leaves
the first alone; two with their own ports and state dirs run side by side."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from demo_commands import (
    _curl_post,
    _curl_stream,
    _embedding_figures_on_the_dashboard,
    _readme_python,
    _run_json,
)

from servefleet._private.cli.up import Cluster, _start
from servefleet._private.testing import free_port, wait_for
from servefleet.client import ControllerClient
from servefleet.controller.runtime.process import scan

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")
ROOT = Path(__file__).resolve().parent.parent
CALC = f"""
applications:
  - name: calc
    route_prefix: /calc
    import_path: graph_app:app
    runtime: {{working_dir: {APPS}}}
    deployments:
      - {{name: Adder, num_replicas: 1, graceful_shutdown_wait_loop_s: 0.1}}
      - {{name: Front, graceful_shutdown_wait_loop_s: 0.1}}
"""


class Up:
    """One `servefleet up` child process and the lines it printed."""

    def __init__(self, config: Path | str | None, state: Path, http: str, listen: str,
                 *extra: str) -> None:
        self.http, self.listen, self.state = http, listen, state
        if "--dashboard" not in extra:
            extra = (*extra, "--dashboard", f"127.0.0.1:{free_port()}")
        argv = [sys.executable, "-m", "servefleet", "up", *([str(config)] if config else []),
                "--state-dir", str(state), "--http", http, "--listen", listen, *extra]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines: list[str] = []
        output = self.proc.stdout
        assert output is not None
        self._reader = threading.Thread(target=lambda: self.lines.extend(output),
                                        daemon=True)
        self._reader.start()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_ready(self) -> None:
        wait_for(lambda: "ready" in self.output or self.proc.poll() is not None, 90,
                 "up to be ready")
        assert self.proc.poll() is None, self.output[-3000:]

    def wait_exit(self, timeout: float = 30) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        code = self.wait_exit(120)
        self.proc.stdout.close()
        return code


def test_up_serves_a_config_and_ctrl_c_stops_everything(tmp_path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(CALC)
    http, listen = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    state = tmp_path / "state"
    dashboard = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen([sys.executable, "-m", "servefleet", "up", str(config),
                             "--state-dir", str(state), "--http", http, "--listen", listen,
                             "--dashboard", dashboard, "--proxy-workers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    stdout = proc.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(stdout), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("ready. Try" in line for line in lines), 90, "up to be ready")
        assert any(f"curl http://{http}/calc" in line for line in lines)
        assert httpx.get(f"http://{http}/calc", params={"x": 2}).json()["call"] == 12
        assert any(f"dashboard http://{dashboard}/-/dashboard" in line for line in lines)
        assert httpx.get(f"http://{dashboard}/api/status").json()["applications"][0][
            "name"] == "calc"
        children = _children(proc.pid)
        replicas = _replicas(state)
        assert len(children) == 2 and len(replicas) == 2  # controller, proxy; Front, Adder
        (proxy,) = [p for p in children
                    if b"proxy" in Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")]
        workers = _children(proxy)
        assert len(workers) == 2  # --proxy-workers 2
        children += workers
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(120)
        reader.join(5)
        stdout.close()
    output = "".join(lines)
    assert code == 0, output[-3000:]
    assert not [pid for pid in children if _alive(pid)], "controller or proxy left running"
    assert not _replicas(state), "replicas left running"
    assert "Traceback" not in output


def test_up_with_the_haproxy_engine_serves_and_stops_it(tmp_path) -> None:
    import psutil

    config = tmp_path / "serve.yaml"
    config.write_text(CALC)
    up = Up(config, tmp_path / "state", f"127.0.0.1:{free_port()}",
            f"127.0.0.1:{free_port()}", "--proxy-engine", "haproxy")
    try:
        up.wait_ready()
        assert httpx.get(f"http://{up.http}/calc", params={"x": 2}).json()["call"] == 12
        haproxies = [p for p in psutil.Process(up.proc.pid).children(recursive=True)
                     if p.name() == "haproxy"]
        assert haproxies, "no HAProxy under up's proxy"
    finally:
        assert up.stop() == 0, up.output[-3000:]
    _, alive = psutil.wait_procs(haproxies, timeout=10)
    assert alive == [], "HAProxy left running"

def test_the_demo_suggests_the_readmes_commands_and_they_answer(tmp_path) -> None:
    """What scripts/demo runs, on other ports: the commands it prints once ready
    are the README's, and each answers with what the README says it shows."""
    demo = (ROOT / "scripts" / "demo").read_text()
    assert "up examples/config.yaml --try-file examples/try.txt" in demo
    readme = (ROOT / "README.md").read_text()
    tries = [line for line in (ROOT / "examples" / "try.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert len(tries) == 12
    for line in tries:
        assert line.replace("{http}", "127.0.0.1:8000").replace("{grpc}", "127.0.0.1:9000") \
            in readme
    grpc = f"127.0.0.1:{free_port()}"
    up = Up(ROOT / "examples" / "config.yaml", tmp_path / "state", f"127.0.0.1:{free_port()}",
            f"127.0.0.1:{free_port()}", "--try-file", str(ROOT / "examples" / "try.txt"),
            "--grpc", grpc)
    try:
        up.wait_ready()
        wait_for(lambda: "Ctrl-C stops everything" in up.output, 30, "the last line to try")
        printed = [line.split("|", 1)[1].strip() for line in up.lines
                   if line.startswith("up") and ("curl" in line or "client.py" in line)]
        assert printed == [line.replace("{http}", up.http).replace("{grpc}", grpc)
                           for line in tries]
        # First, the embedding model, by curl itself: the document that
        # answers the query ranks first, and two sentences' vectors.
        ranked, embedded = (_run_json(line) for line in printed[:2])
        assert [r["index"] for r in ranked["results"]] == [1, 0, 2], ranked
        assert ranked["results"][0]["document"]["text"].startswith("Forgot your password?")
        assert [len(d["embedding"]) for d in embedded["data"]] == [384, 384], embedded.keys()
        assert embedded["usage"]["prompt_tokens"] > 10
        # The README's openai-client call, against this demo.
        client = _readme_python().replace("127.0.0.1:8000", up.http)
        by_client = subprocess.run([sys.executable, "-c", client], capture_output=True,
                                   text=True, timeout=60)
        assert by_client.returncode == 0, by_client.stderr
        cosines = [float(x) for x in by_client.stdout.strip(" []\n").split()]
        assert cosines[0] == pytest.approx(1.0, abs=1e-4) and cosines[1] > 0.5 > cosines[2]
        _embedding_figures_on_the_dashboard(up, printed[1])
        printed = printed[2:]
        # The digits: a PNG of the repository posted as curl posts it.
        digits = [_curl_post(line) for line in printed[:3]]
        assert [a.status_code for a in digits] == [200] * 3, [a.text for a in digits]
        assert [a.json()["digit"] for a in digits] == [3, 7, 5]
        assert digits[2].json()["tenant"] == "tenant-b"
        printed = printed[3:]
        answers = [httpx.get(line.split("'")[1], timeout=30) for line in printed[:5]]
        assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
        sentiment, item, composed, streamed, classified = (a.text for a in answers)
        assert '"label":"positive"' in sentiment
        assert item == '{"item_id":3,"q":"x"}'
        assert composed == '{"words":5,"counts":{"cat":1,"hat":1}}'
        assert streamed.splitlines() == [f"token {i}" for i in range(5)]
        assert classified == '{"label":"negative","score":-2}'
        command = printed[5].split("#")[0].replace(".venv/bin/python", sys.executable)
        by_grpc = subprocess.run(command, shell=True, cwd=ROOT, capture_output=True,
                                 text=True, timeout=60)
        assert by_grpc.returncode == 0, by_grpc.stderr
        assert "positive" in by_grpc.stdout
        tokens = _curl_stream(printed[6])  # the language model, streamed as OpenAI streams
        assert tokens[-1] == "[DONE]" and len(tokens) > 2, tokens
        assert json.loads(tokens[0])["object"] == "chat.completion.chunk"
    finally:
        assert up.stop() == 0, up.output[-3000:]


def test_up_runs_an_import_path_as_rays_serve_run_does(tmp_path) -> None:
    """`servefleet up module:app` (`serve run module:app`) with a module
    written as Ray's documentation writes one: a bare `import starlette`
    annotating `starlette.requests.Request`, and a @serve.batch method
    returning a numpy array, both run for real in replicas."""
    up = Up("ray_doc_app:app", tmp_path / "state", f"127.0.0.1:{free_port()}",
            f"127.0.0.1:{free_port()}", "--working-dir", APPS)
    try:
        up.wait_ready()
        wait_for(lambda: "Ctrl-C stops everything" in up.output, 30, "the line to try")
        assert f"up        |   curl http://{up.http}/\n" in up.output
        assert "default: RUNNING" in up.output  # Ray's name for it
        with ThreadPoolExecutor(8) as pool:  # together: batches of several
            answers = list(pool.map(lambda x: httpx.get(f"http://{up.http}/",
                                                        params={"x": x}, timeout=30), range(8)))
        assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers]
        assert [a.json()["doubled"] for a in answers] == [2 * x for x in range(8)]
    finally:
        assert up.stop() == 0, up.output[-3000:]


def test_a_failed_build_is_printed_whole_before_up_stops(tmp_path) -> None:
    """`up` stops everything once a deploy failed: the traceback is printed
    then, not a pointer to `servefleet status`, which is gone by then."""
    (tmp_path / "broken.py").write_text(
        'def load():\n    raise RuntimeError("weights missing")\n\n\nload()\n')
    state = tmp_path / "state"
    up = Up("broken:app", state, f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}",
            "--working-dir", str(tmp_path))
    code = up.wait_exit(120)
    up.proc.stdout.close()
    assert code == 1, up.output[-3000:]
    printed = [line.split("|", 1)[1] for line in up.lines if line.startswith("up  ")]
    assert "   Traceback (most recent call last):\n" in printed, up.output[-3000:]
    assert '       raise RuntimeError("weights missing")\n' in printed  # the user's line
    assert "servefleet status" not in up.output
    assert not _replicas(state)


def test_a_second_up_leaves_the_first_alone(tmp_path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(CALC)
    tries = tmp_path / "try.txt"
    tries.write_text("# a comment\ncurl 'http://{http}/calc?x=1'\n")
    first = Up(config, tmp_path / "a", f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}",
               "--try-file", str(tries))
    try:
        first.wait_ready()
        assert f"curl 'http://{first.http}/calc?x=1'" in first.output
        assert "a comment" not in first.output

        def serves() -> None:
            assert httpx.get(f"http://{first.http}/calc", params={"x": 2}).json()["call"] == 12

        serves()
        # The controller's port, the proxy's port, the state dir: each taken by the first.
        clashes = [(first.listen, f"127.0.0.1:{free_port()}", tmp_path / "b", "--listen"),
                   (f"127.0.0.1:{free_port()}", first.http, tmp_path / "c", "--http"),
                   (f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}", first.state,
                    "--state-dir")]
        for listen, http, state, flag in clashes:
            second = Up(config, state, http, listen)
            assert second.wait_exit() == 2, second.output
            second.proc.stdout.close()
            assert len(second.lines) == 1 and flag in second.output, second.output
            assert "Traceback" not in second.output
        # Every taken address is named at once, not one per try.
        second = Up(config, tmp_path / "f", first.http, first.listen)
        assert second.wait_exit() == 2, second.output
        second.proc.stdout.close()
        assert len(second.lines) == 1, second.output
        assert f"{first.listen}: choose another with --listen" in second.output
        assert f"{first.http}: choose another with --http" in second.output
        serves()
        with ControllerClient(first.listen, timeout=5) as client:
            assert [a.name for a in client.status().applications] == ["calc"]

        # A cluster whose controller cannot listen (the port was taken after the
        # check) must not mistake the first's controller for its own.
        cluster = Cluster(f"sqlite://{tmp_path / 'd.db'}", first.listen,
                          f"127.0.0.1:{free_port()}", str(tmp_path / "d-runtime"))
        try:
            args = type("Args", (), {"wait_timeout": 30, "try_file": None})()
            from servefleet._private.configuration.config_file import load_config
            assert not _start(cluster, load_config(str(config)), args, threading.Event())
        finally:
            cluster.stop()
        serves()

        # With ports and a state dir of its own, a second up runs beside the first.
        beside = Up(config, tmp_path / "e", f"127.0.0.1:{free_port()}",
                    f"127.0.0.1:{free_port()}")
        try:
            beside.wait_ready()
            assert httpx.get(f"http://{beside.http}/calc", params={"x": 1}).json()["call"] == 11
            serves()
        finally:
            assert beside.stop() == 0, beside.output[-3000:]
        serves()
    finally:
        assert first.stop() == 0, first.output[-3000:]


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _replicas(state: Path) -> list[str]:
    prefix = str(state / "runtime") + os.sep
    return [replica.replica_id for replica, settings in scan("default")
            if settings.startswith(prefix)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")


def test_a_secure_local_cluster_is_two_commands(tmp_path) -> None:
    """`servefleet certs init DIR` then `servefleet up CONFIG --certs DIR`: the
    controller, proxy and replicas on mutual TLS; a plain-text client is refused."""
    from servefleet._private.security.tls import PLAIN, Credentials, TlsFiles
    from servefleet.client import ControllerUnreachable

    certs = tmp_path / "certs"
    subprocess.run([sys.executable, "-m", "servefleet", "certs", "init", str(certs)],
                   check=True, capture_output=True)
    config = tmp_path / "serve.yaml"
    config.write_text(CALC)
    up = Up(config, tmp_path / "state", f"127.0.0.1:{free_port()}",
            f"127.0.0.1:{free_port()}", "--certs", str(certs))
    try:
        up.wait_ready()
        assert "mutual TLS on every gRPC hop" in up.output
        assert httpx.get(f"http://{up.http}/calc", params={"x": 2}).json()["call"] == 12
        admin = Credentials(TlsFiles.from_dir(certs, "admin"))
        with ControllerClient(up.listen, timeout=10, credentials=admin) as client:
            assert client.status().leader == up.listen
        with pytest.raises(ControllerUnreachable):
            with ControllerClient(up.listen, timeout=1.5, credentials=PLAIN) as plain:
                plain.status()
    finally:
        code = up.stop()
    assert code == 0, up.output[-3000:]
