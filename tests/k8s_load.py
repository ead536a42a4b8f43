"""Steady HTTP load for tests/test_k8s_e2e.py, run inside a node's network
namespace (the only place that reaches the proxies' NodePort):

    python tests/k8s_load.py URL EXPECT CLIENTS

CLIENTS threads send GET URL back to back, each on a connection it keeps, until
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


class Client:
    """One kept-alive connection, as HTTP clients keep them: a new connection
    per request, at thousands a second through a NodePort, ran into the
    node's connection tracking (a refused connection now and then with
    every proxy up). A request on a kept connection that the server had
    closed, failing before any answer, is sent again once on a new one,
    as clients do for a GET; any other failure counts."""

    def __init__(self, url: urllib.parse.SplitResult) -> None:
        self.url = url
        self.connection: http.client.HTTPConnection | None = None

    def get(self, expect: str) -> tuple[bool, str]:
        for _ in range(2):
            kept = self.connection is not None
            if self.connection is None:
                self.connection = http.client.HTTPConnection(self.url.hostname or "",
                                                             self.url.port, timeout=15)
            try:
                self.connection.request("GET", f"{self.url.path}?{self.url.query}")
                response = self.connection.getresponse()
                body = response.read().decode(errors="replace")
                if response.will_close:
                    self._close()
                return response.status == 200 and expect in body, f"{response.status} {body[:200]}"
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self._close()
                if not kept:
                    return False, f"{type(e).__name__}: {e}"
            except OSError as e:
                self._close()
                return False, f"{type(e).__name__}: {e}"
        return False, "closed twice"

    def _close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


def main(argv: list[str]) -> None:
    url, expect, clients = urllib.parse.urlsplit(argv[0]), argv[1], int(argv[2])
    stop = threading.Event()
    records: list[list] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def client() -> None:
        http_client = Client(url)
        while not stop.is_set():
            sent = time.time()
            ok, detail = http_client.get(expect)
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
