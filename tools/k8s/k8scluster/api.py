"""Just enough of the API server's REST API for scripts/k8s to wait on it:
GET with the admin's certificate, through the relay on this machine's
loopback."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from .layout import PKI, RUN

ADDRESS = RUN / "apiserver-address"  # host:port of the relay


def server() -> str:
    return f"https://{ADDRESS.read_text().strip()}"


def _context() -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
    context.load_cert_chain(str(PKI / "admin.crt"), str(PKI / "admin.key"))
    return context


def get(path: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(server() + path, context=_context(),
                                    timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait(what: str, check: Callable[[], str | None], timeout: float) -> None:
    """Poll `check` (None: done; else what is still missing) until done."""
    deadline = time.monotonic() + timeout
    missing = "not checked yet"
    while time.monotonic() < deadline:
        try:
            result = check()
        except (OSError, ValueError) as e:
            result = f"{type(e).__name__}: {e}"
        if result is None:
            return
        missing = result
        time.sleep(0.5)
    raise RuntimeError(f"{what}: not within {timeout:.0f} s ({missing})")


def ready() -> str | None:
    status, body = get("/readyz")
    return None if status == 200 else f"/readyz {status}: {body[-300:]}"


def nodes_not_ready(names: list[str]) -> str | None:
    status, body = get("/api/v1/nodes")
    if status != 200:
        return f"GET nodes: {status}"
    states = {}
    for item in json.loads(body)["items"]:
        conditions = {c["type"]: c for c in item["status"].get("conditions", [])}
        ready = conditions.get("Ready", {})
        states[item["metadata"]["name"]] = (ready.get("status") == "True",
                                            ready.get("message", "no Ready condition"))
    missing = [f"{n}: {states[n][1] if n in states else 'not registered'}"
               for n in names if not states.get(n, (False,))[0]]
    return "; ".join(missing) or None
