"""Load and systems for bench/embeddings.py: the sentences, wrk POSTing them,
and the servefleet cluster under test.

Sentences: made from a fixed word list, SENTENCES of them, their lengths in
the model's word pieces ([CLS] and [SEP] included) spread evenly over 8-128;
one per request, each connection going through all of them in turn (wrk's
Lua `request`), so every system gets the same mix.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from wrk_run import UNITS

from servefleet._private.configuration.config_file import load_config
from servefleet._private.testing import ControllerProcess, ProxyProcess
from servefleet.client import ControllerClient

MODEL = "all-MiniLM-L6-v2"
SENTENCES = 240
SHORTEST, LONGEST = 8, 128
INGRESS = 128  # the OpenAI ingress's max_ongoing_requests
WORDS = ("the of and a to in is was he for it with as his on be at by had are but from or "
         "have an they which one you were her all she there would their we him been has when "
         "who will more no if out so said what up its about into than them can only other new "
         "some could time these two may then do first any my now such like our over man me even "
         "most made after also did many before must through back years where much your way well "
         "down should because each just those people how too little state good very make world "
         "still own see men work long get here between both life being under never day same "
         "another know while last might us great old year off come since against go came right "
         "used take three river market engine garden mountain telescope harbour orchestra "
         "electricity photograph membrane carbonate withdrawal").split()


def sentences(tokenize: Any, count: int = SENTENCES, seed: int = 5) -> list[str]:
    """`count` texts whose word-piece counts (by `tokenize`, a list of texts
    to their id lists) go evenly from SHORTEST to LONGEST, in a shuffled order."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        target = SHORTEST + (LONGEST - SHORTEST) * i // max(1, count - 1)
        words: list[str] = []
        while True:
            candidate = [*words, rng.choice(WORDS)]
            if len(tokenize([" ".join(candidate)])[0]) > target:
                break
            words = candidate
        out.append(" ".join(words).capitalize() + ".")
    rng.shuffle(out)
    return out


def body(text: str) -> str:
    return json.dumps({"model": MODEL, "input": text, "encoding_format": "base64"})


def wrk_post(url: str, bodies: list[str], connections: int, duration: float) -> dict[str, float]:
    """wrk POSTing the bodies in turn: requests/s, p50 and p99 (ms), non-2xx
    answers and socket errors (timeouts at 30 s)."""
    table = ",\n".join(json.dumps(b) for b in bodies)
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(f"local bodies = {{\n{table}\n}}\nlocal i = 0\n"
                     'local headers = {["Content-Type"] = "application/json"}\n'
                     "request = function()\n  i = i % #bodies + 1\n"
                     '  return wrk.format("POST", nil, headers, bodies[i])\nend\n'
                     # The first failed answer, for the record.
                     "local told = false\nresponse = function(status, headers, body)\n"
                     "  if status ~= 200 and not told then told = true\n"
                     '    print("FAILED " .. status .. " " .. string.sub(body, 1, 300)) end\nend\n')
    try:
        out = subprocess.run(["wrk", "-t", "1", "-c", str(connections), "-d", f"{duration:g}s",
                              "--timeout", "30s", "--latency", "-s", script.name, url],
                             capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(script.name)
    found = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))}  # type: ignore[union-attr]
    for pct in ("50", "99"):
        m = re.search(rf"^\s+{pct}(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        assert m is not None, out
        found[f"p{pct}"] = float(m.group(1)) * UNITS[m.group(2)]
    failed = re.search(r"^FAILED .*$", out, re.M)
    if failed:
        print(f"{url}, {connections} connections: {failed.group(0)}", file=sys.stderr)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    found["non2xx"] = float(errors.group(1)) if errors else 0.0
    sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
                        out)
    found["errors"] = float(sum(int(g) for g in sockets.groups())) if sockets else 0.0
    return found


def ready(url: str, content: str, timeout_s: float = 180) -> None:
    """Once POSTing `content` to `url` is answered 200."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            answer = httpx.post(url, content=content, timeout=60,
                                headers={"content-type": "application/json"})
            if answer.status_code == 200:
                return
            last = answer.text[:300]
        time.sleep(0.3)
    raise SystemExit(f"{url} did not answer within {timeout_s:g} s: {last}")


class EmbeddingsCluster:
    """A controller (sqlite, process runtime), a proxy, and the OpenAI app with
    one embedding model per entry of `variants` (route prefix -> its
    EmbeddingConfig fields), deployed from a config file as a user deploys it."""

    def __init__(self, variants: dict[str, dict[str, Any]]) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="servefleet-embeddings-"))
        # The ingress takes as many requests as the model's deployment (its
        # default, 5, would have the proxy queue them before it).
        apps = [{"name": prefix.strip("/"), "route_prefix": prefix,
                 "import_path": "servefleet.llm:build_openai_app",
                 "args": {"embedding_configs": [{"model_id": MODEL, **config}]},
                 "deployments": [{"name": "OpenAIIngress", "max_ongoing_requests": INGRESS}]}
                for prefix, config in variants.items()]
        (self.work / "embeddings.yaml").write_text(yaml.safe_dump({"applications": apps}))

    def __enter__(self) -> EmbeddingsCluster:
        self.controller = ControllerProcess(f"sqlite://{self.work}/state.db",
                                            log_dir=self.work).start()
        while not self.controller.is_leader():
            time.sleep(0.05)
        self.client = ControllerClient(self.controller.address, timeout=30)
        self.client.deploy_applications(
            load_config(str(self.work / "embeddings.yaml")).applications)
        self.proxy = ProxyProcess([self.controller.address], log_dir=self.work).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.proxy.stop()
        with contextlib.suppress(Exception):
            self.client.shutdown()
        self.client.close()
        self.controller.stop()
