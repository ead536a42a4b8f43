"""Second clusters for bench/data_plane.py, each beside the plain hop's row
("proxy") in the same run, with the same no-op deployments and a proxy of
their own; the client -> proxy side stays plain HTTP: what differs is the
proxy -> replica hop alone.

- --tls-hop: the cluster's certificates and `--replica-tls on`, so the hop
  is TLS (servefleet/_private/security/hop_tls.py);
- --hop-pass: tokens and no certificates, so every request carries the
  proxy's hop pass and each replica checks it (security/hop.py).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from servefleet._private.security import tokens
from servefleet._private.security.certs import init_certs
from servefleet._private.security.tls import Credentials
from servefleet._private.testing import ControllerProcess, ProxyProcess
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d

TLS_HOP = "tls hop"
HOP_PASS = "hop pass"


@contextlib.contextmanager
def tls_hop_proxy(work: str, handlers: list[str], apps: str) -> Iterator[ProxyProcess]:
    """The proxy of a cluster whose replicas serve TLS (stopped after)."""
    certs = f"{work}/hop-certs"
    init_certs(certs)
    controller = ControllerProcess(f"sqlite://{work}/hop.db", log_dir=work, certs=certs,
                                   cluster="tlshop",
                                   extra_args=["--replica-tls", "on",
                                               "--allow-working-dir", apps])
    with _side_cluster(controller, controller.credentials, handlers, apps,
                       ["--certs", certs]) as proxy:
        yield proxy


@contextlib.contextmanager
def hop_pass_proxy(work: str, handlers: list[str], apps: str) -> Iterator[ProxyProcess]:
    """The proxy of a cluster with tokens and no certificates: its replicas
    serve only requests with a hop pass (stopped after)."""
    token_file = Path(work) / "hop-tokens"
    admin = tokens.create(token_file, "bench-admin", "admin")
    proxy_token = tokens.create(token_file, "bench-proxy", "proxy")
    controller = ControllerProcess(f"sqlite://{work}/pass.db", log_dir=work, cluster="hoppass",
                                   extra_args=["--auth-tokens", str(token_file),
                                               "--allow-working-dir", apps])
    os.environ["SERVEFLEET_TOKEN"] = proxy_token  # the proxy's, inherited
    try:
        with _side_cluster(controller, Credentials(token=admin), handlers, apps, []) as proxy:
            yield proxy
    finally:
        os.environ.pop("SERVEFLEET_TOKEN", None)


@contextlib.contextmanager
def _side_cluster(controller: ControllerProcess, credentials: Credentials, handlers: list[str],
                  apps: str, proxy_args: list[str]) -> Iterator[ProxyProcess]:
    """Start `controller` (a cluster name of its own: a process runtime adopts,
    or stops, the replicas of its cluster name it did not start), deploy the
    no-ops, start a proxy; stop it all after."""
    controller.start()
    proxy = None
    try:
        while not controller.is_leader():
            time.sleep(0.05)
        with ControllerClient(controller.address, credentials=credentials) as c:
            for h in handlers:
                c.deploy(d.DeploymentSpec(
                    name=f"Noop{h}", route_prefix=f"/{h}",
                    import_path="echo_app:async_noop" if h == "async" else "echo_app:noop",
                    runtime=d.RuntimeOptions(working_dir=apps),
                    replica_config=d.ReplicaConfig(num_replicas=1, max_ongoing_requests=100)))
        proxy = ProxyProcess([controller.address], log_dir=controller.log_path.parent,
                             extra_args=proxy_args).start()
        yield proxy
    finally:
        if proxy is not None:
            proxy.stop()
        with contextlib.suppress(Exception), ControllerClient(
                controller.address, timeout=10, credentials=credentials) as c:
            c.shutdown()
        controller.stop()
