"""Steady HTTP load for tests/test_k8s_e2e.py, run inside a node's network
namespace (the only place that reaches the proxies' NodePort):

    python tests/k8s_load.py URL EXPECT CLIENTS

CLIENTS threads send GET URL back to back, each request a new connection, until
SIGTERM; then one JSON line per request goes to stdout: [sent, answered, ok,
detail], times from time.time() (the test compares them with when it killed
a node), ok when the answer is 200 and holds EXPECT."""

from __future__ import annotations

import http.client
import json
import signal
import sys
import threading
import time
import urllib.parse


def _one(url: urllib.parse.SplitResult, expect: str) -> tuple[bool, str]:
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=15)
    try:
        connection.request("GET", f"{url.path}?{url.query}")
        response = connection.getresponse()
        body = response.read().decode(errors="replace")
        return response.status == 200 and expect in body, f"{response.status} {body[:200]}"
    except OSError as e:
        return False, f"{type(e).__name__}: {e}"
    finally:
        connection.close()


def main(argv: list[str]) -> None:
    url, expect, clients = urllib.parse.urlsplit(argv[0]), argv[1], int(argv[2])
    stop = threading.Event()
    records: list[list] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def client() -> None:
        while not stop.is_set():
            sent = time.time()
            ok, detail = _one(url, expect)
            records.append([sent, time.time(), ok, "" if ok else detail])

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    print("started", flush=True)
    stop.wait()
    for thread in threads:
        thread.join(20)
    for record in records:
        print(json.dumps(record))


if __name__ == "__main__":
    main(sys.argv[1:])
