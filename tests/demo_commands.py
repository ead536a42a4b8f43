"""How tests/test_up.py runs the commands the demo prints and the README
shows: curls as the shell would send them, the README's Python block, the
dashboard's figures of the embedding model."""

from __future__ import annotations

import itertools
import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import httpx

from servefleet._private.testing import wait_for

ROOT = Path(__file__).resolve().parent.parent


def _curl_stream(line: str) -> list[str]:
    """The server-sent events' data of `curl -N 'URL' -H 'K: V' -d 'BODY'`."""
    words = shlex.split(line.split("#")[0])
    body = words[words.index("-d") + 1]
    with httpx.stream("POST", words[2], content=body, timeout=60,
                      headers={"content-type": "application/json"}) as answer:
        assert answer.status_code == 200, answer.read()
        return [line.removeprefix("data: ") for line in answer.iter_lines()
                if line.startswith("data: ")]


def _embedding_figures_on_the_dashboard(up: Any, embed: str) -> None:
    """The dashboard's figures of the demo's embedding model, from its replica's
    metrics: they appear once scraped, and count what `embed` (a curl) sends."""
    args = [str(arg) for arg in up.proc.args]  # type: ignore[union-attr]
    status = f"http://{args[args.index('--dashboard') + 1]}/api/status"

    def figures() -> dict | None:
        for app in httpx.get(status, timeout=10).json()["applications"]:
            for dep in app["deployments"]:
                if dep["name"].startswith("EmbeddingServer") and dep.get("models"):
                    return dep["models"][0]
        return None

    first = wait_for(figures, 30, "the embedding model's figures")
    assert first["kind"] == "embedding" and first["model"] == "all-MiniLM-L6-v2", first

    def counted() -> dict | None:  # the scrapes run while the page is polled
        _run_json(embed)
        found = figures()
        return found if found and found["inputs_per_s"] > 0 else None

    seen = wait_for(counted, 30, "the curl's inputs in the figures")
    assert seen["batch_size_mean"] >= 1 and 0 <= seen["padding_share"] < 1, seen
    assert seen["queue_wait_p50_ms"] is not None


def _run_json(line: str) -> dict:
    """What a command line prints, run by bash from the repository root, as JSON."""
    done = subprocess.run(line, shell=True, executable="/bin/bash", cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _readme_python() -> str:
    """The README quick start's Python block (the openai client's call)."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("```python\n# The same model through the openai client")
    return readme[start + len("```python\n"):readme.index("```\n", start + 9)]


def _curl_post(line: str) -> httpx.Response:
    """What `curl --data-binary @FILE [-H 'K: V']... 'URL'` sends, from the repository root."""
    words = shlex.split(line.split("#")[0])
    body: bytes | None = None
    headers: dict[str, str] = {}
    for flag, value in itertools.pairwise(words):
        if flag == "--data-binary":
            body = (ROOT / value.removeprefix("@")).read_bytes()
        elif flag == "-H":
            name, _, text = value.partition(":")
            headers[name.strip()] = text.strip()
    assert body is not None, line
    return httpx.post(words[-1], content=body, headers=headers, timeout=30)
