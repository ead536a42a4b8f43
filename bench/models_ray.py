"""bench/models.py's Unbatched and Batched digits deployments on Ray Serve:
the same classes (bench/models_app.py, with Ray's @serve.batch), one replica
each. Run by the Python given as --ray-python; prints "READY <port>" once
both answer, then serves until SIGTERM."""

from __future__ import annotations

import json
import signal
import socket
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    import ray  # type: ignore[import-not-found]
    from ray import serve  # type: ignore[import-not-found]

    sys.path.insert(0, str(HERE))
    import models_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray.init(include_dashboard=False, num_cpus=2, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(HERE)}})
    stop = False

    def leave(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, leave)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        for name in ("Unbatched", "Batched"):
            target = serve.deployment(getattr(models_app, name), name=name, num_replicas=1,
                                      max_ongoing_requests=64)
            serve.run(target.bind(), name=name, route_prefix=f"/{name}")
        for name in ("Unbatched", "Batched"):
            request = urllib.request.Request(f"http://127.0.0.1:{port}/{name}",
                                             data=json.dumps({"image": [0] * 64}).encode(),
                                             method="POST")
            urllib.request.urlopen(request, timeout=60).read()
        print(f"READY {port}", flush=True)
        while not stop:
            time.sleep(0.2)
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
