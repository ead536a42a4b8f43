"""Starts `bentoml serve embeddings_bento:Embedder` on a free port (run by the
Python given as --bentoml-python, from bench/), prints "READY <port>" once
it embeds a sentence, and stops it on SIGTERM."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # until sigwait takes it
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bentoml = str(Path(sys.executable).parent / "bentoml")
    proc = subprocess.Popen([bentoml, "serve", "embeddings_bento:Embedder", "--port", str(port),
                             "--host", "127.0.0.1"], cwd=HERE, env=os.environ,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/embed", method="POST",
                    data=json.dumps({"texts": ["warm up"]}).encode(),
                    headers={"content-type": "application/json"})
                urllib.request.urlopen(request, timeout=30).read()
                break
            except OSError:
                time.sleep(0.5)
        else:
            raise SystemExit("bentoml serve did not answer in 180 s")
        print(f"READY {port}", flush=True)
        signal.sigwait({signal.SIGTERM})
    finally:
        # bentoml's workers run in sessions of their own: each is stopped by pid.
        family = [proc.pid, *descendants(proc.pid)]
        for pid in family:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(alive(pid) for pid in family[1:]):
            time.sleep(0.2)
        for pid in family:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(10)


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


if __name__ == "__main__":
    main()
