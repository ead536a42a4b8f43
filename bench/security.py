"""What security costs the control plane: Deploy latency with mutual TLS and a
token versus plain text, in one run.

    .venv/bin/python bench/security.py [--calls 300]

Two setups, each a real etcd and one controller (`--runtime none`: the
figure is the API and the store, not replica starts), measured one after
the other with the same client code:

- plain: etcd over http, the controller in plain text, no tokens;
- secure: etcd over https with client-certificate auth (etcds://), the
  controller with `--certs` and `--auth-tokens`, the client presenting the
  admin certificate and a deployer token.

Each Deploy changes the spec (a new version is written through the fenced
store), on one kept-alive channel as the SDK uses. Prints p50, p99 and
calls/s for both, and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from figures import Figure, emit

from servefleet._private.external_servers import EtcdServer
from servefleet._private.security import tokens
from servefleet._private.security.certs import init_certs
from servefleet._private.security.tls import PLAIN, Credentials, TlsFiles
from servefleet._private.testing import ControllerProcess
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d


def measure(client: ControllerClient, calls: int) -> dict[str, float]:
    client.status()
    latencies = []
    start = time.perf_counter()
    for i in range(calls):
        spec = d.DeploymentSpec(name=f"M{i % 10}", import_path="m:app",
                                replica_config=d.ReplicaConfig(user_config_json=f'{{"n":{i}}}'))
        began = time.perf_counter()
        client.deploy(spec)
        latencies.append(time.perf_counter() - began)
    elapsed = time.perf_counter() - start
    latencies.sort()
    return {"p50": statistics.median(latencies) * 1e3,
            "p99": latencies[int(len(latencies) * 0.99) - 1] * 1e3, "rate": calls / elapsed}


def run(calls: int, certs: Path | None, work: Path) -> dict[str, float]:
    work.mkdir(parents=True, exist_ok=True)
    etcd = EtcdServer(certs=certs).start()
    extra = []
    credentials = PLAIN
    if certs is not None:
        token = tokens.create(work / "tokens", "bench", "deployer")
        extra = ["--auth-tokens", str(work / "tokens")]
        credentials = Credentials(TlsFiles.from_dir(certs, "admin"), token)
    controller = ControllerProcess(etcd.url, cluster="bench", runtime="none", log_dir=work,
                                   extra_args=extra, certs=certs).start()
    try:
        with ControllerClient([controller.address], timeout=30,
                              credentials=credentials) as client:
            return measure(client, calls)
    finally:
        controller.stop()
        etcd.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="servefleet-security-"))
    init_certs(work / "certs")
    plain = run(args.calls, None, work / "plain")
    secure = run(args.calls, work / "certs", work / "secure")
    print(f"servefleet control plane: Deploy, {args.calls} calls each, one client, etcd "
          "on this host")
    print(f"  {'':<44}{'p50':>9}{'p99':>9}{'calls/s':>9}")
    for label, r in (("plain text, no tokens", plain),
                     ("mutual TLS (etcd too) + bearer token", secure)):
        print(f"  {label:<44}{r['p50']:>7.2f}ms{r['p99']:>7.2f}ms{r['rate']:>9.0f}")
    print(f"  secure / plain p50: {secure['p50'] / plain['p50']:.2f}")
    emit({"Deploy with mutual TLS + token: p50": Figure([secure["p50"]], "ms"),
          "Deploy in plain text: p50": Figure([plain["p50"]], "ms"),
          "secure / plain, p50": Figure([secure["p50"] / plain["p50"]], "x")})


if __name__ == "__main__":
    main()
