"""`servefleet up`: started and stopped by a test, leaving no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from servefleet.controller.runtime.process import scan
from servefleet.testing import free_port, wait_for

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")


def test_up_serves_a_config_and_ctrl_c_stops_everything(tmp_path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(f"""
applications:
  - name: calc
    route_prefix: /calc
    import_path: graph_app:app
    runtime: {{working_dir: {APPS}}}
    deployments:
      - {{name: Adder, num_replicas: 1, graceful_shutdown_wait_loop_s: 0.1}}
      - {{name: Front, graceful_shutdown_wait_loop_s: 0.1}}
""")
    http, listen = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    state = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-m", "servefleet", "up", str(config),
                             "--state-dir", str(state), "--http", http, "--listen", listen],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("ready. Try" in line for line in lines), 90, "up to be ready")
        assert any(f"curl http://{http}/calc" in line for line in lines)
        assert httpx.get(f"http://{http}/calc", params={"x": 2}).json()["call"] == 12
        children = _children(proc.pid)
        replicas = _replicas(state)
        assert len(children) == 2 and len(replicas) == 2  # controller, proxy; Front, Adder
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(120)
        reader.join(5)
        proc.stdout.close()
    output = "".join(lines)
    assert code == 0, output[-3000:]
    assert not [pid for pid in children if _alive(pid)], "controller or proxy left running"
    assert not _replicas(state), "replicas left running"
    assert "Traceback" not in output


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
