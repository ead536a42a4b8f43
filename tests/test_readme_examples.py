"""The README's first example and the guide's local run, run as a new user
runs them: `calc.py` served with `servefleet up calc.yaml` answers what the
README says; a `user_config` edit in calc.yaml reconfigures the running
replicas (which tests/test_doc_blocks.py, running the same blocks, does not
check); the "Local runs" script of docs/guides/deploy.md runs as a script
(real processes)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from servefleet._private.testing import free_port, wait_for
from servefleet.client import ControllerClient

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def section(title: str, page: str = "README.md") -> str:
    text = (ROOT / page).read_text()
    start = text.index(f"\n{title}\n") + len(title) + 2
    following = re.compile(r"^#{2,3} ", re.M).search(text, start)
    return text[start:following.start() if following else len(text)]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def servefleet(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servefleet", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_serve_your_own_model_as_the_readme_says(tmp_path) -> None:
    text = section("## Serve your own model")
    (code,) = blocks(text, "python")
    (shell,) = blocks(text, "sh")
    (tmp_path / "calc.py").write_text(code)
    config = re.search(r"<<'YAML'\n(.*?)YAML\n", shell, re.S).group(1)
    (tmp_path / "calc.yaml").write_text(config)
    curl = re.search(r"curl '(http://127\.0\.0\.1:8000/[^']*)'\s+# → (.*)", shell)
    assert "servefleet up calc.yaml" in shell

    http, listen = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    up = subprocess.Popen([sys.executable, "-m", "servefleet", "up", "calc.yaml",
                           "--state-dir", str(tmp_path / "state"), "--http", http,
                           "--listen", listen, "--dashboard", "off"], cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=_read_lines, args=(up, lines), daemon=True)
    reader.start()
    try:
        url = curl.group(1).replace("127.0.0.1:8000", http)
        # Ready as up says it (not only serving): a deploy before that keeps
        # up waiting for the application, and Ctrl-C then fails it.
        wait_for(lambda: up.poll() is not None or any("ready. Try:" in line for line in lines),
                 120, "up to say it is ready")
        assert up.poll() is None, "".join(lines)[-3000:]
        assert httpx.get(url).text == curl.group(2)  # {"label":"front","sum":11,"same":11}
        with ControllerClient(listen, timeout=10) as client:
            before = sorted(r.record.replica_id for r in client.replicas("calc"))
            (tmp_path / "calc.yaml").write_text(config.replace("label: front", "label: edited"))
            done = servefleet("deploy", "calc.yaml", "--wait", "--controller", listen,
                              cwd=tmp_path)
            assert done.returncode == 0, done.stderr
            wait_for(lambda: httpx.get(url).json()["label"] == "edited", 30, "the new label")
            assert sorted(r.record.replica_id for r in client.replicas("calc")) == before
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=120)
        reader.join(10)
        assert up.stdout is not None
        up.stdout.close()
    assert up.returncode == 0, "".join(lines)[-3000:]


def _read_lines(process: subprocess.Popen, into: list[str]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        into.append(line)


@pytest.mark.serial  # serve.run's default HTTP port, 8000, as the docs' script uses it
def test_the_local_run_script_runs_as_a_script(tmp_path) -> None:
    (tmp_path / "calc.py").write_text(blocks(section("## Serve your own model"), "python")[0])
    (script,) = blocks(section("## Local runs: `servefleet.run`", "docs/guides/deploy.md"),
                       "python")
    (tmp_path / "run_adder.py").write_text(script)
    ran = subprocess.run([sys.executable, "run_adder.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=180)
    assert ran.returncode == 0, ran.stderr[-3000:]
    first, second, url = ran.stdout.split()[:3]
    assert (first, second) == ("15", "11") and url.startswith("http://127.0.0.1:")
