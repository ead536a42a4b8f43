"""A second cluster for bench/data_plane.py --tls-hop: a controller with the
cluster's certificates and `--replica-tls on`, the same no-op deployments,
and a proxy with its certificate, so the proxy -> replica hop is TLS
(servefleet/_private/security/hop_tls.py); its row stands beside the plain
hop's ("proxy") in the same run. The client -> proxy side stays plain HTTP:
what differs is the hop alone.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from servefleet._private.security.certs import init_certs
from servefleet._private.testing import ControllerProcess, ProxyProcess
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d

TLS_HOP = "tls hop"


@contextlib.contextmanager
def tls_hop_proxy(work: str, handlers: list[str], apps: str) -> Iterator[ProxyProcess]:
    """The proxy of a cluster whose replicas serve TLS (stopped after)."""
    certs = f"{work}/hop-certs"
    init_certs(certs)
    # A cluster name of its own: a process runtime adopts (or stops) the
    # replicas of its cluster name it did not start.
    controller = ControllerProcess(f"sqlite://{work}/hop.db", log_dir=work, certs=certs,
                                   cluster="tlshop",
                                   extra_args=["--replica-tls", "on",
                                               "--allow-working-dir", apps]).start()
    proxy = None
    try:
        while not controller.is_leader():
            time.sleep(0.05)
        with ControllerClient(controller.address, credentials=controller.credentials) as c:
            for h in handlers:
                c.deploy(d.DeploymentSpec(
                    name=f"Noop{h}", route_prefix=f"/{h}",
                    import_path="echo_app:async_noop" if h == "async" else "echo_app:noop",
                    runtime=d.RuntimeOptions(working_dir=apps),
                    replica_config=d.ReplicaConfig(num_replicas=1, max_ongoing_requests=100)))
        proxy = ProxyProcess([controller.address], log_dir=work,
                             extra_args=["--certs", certs]).start()
        yield proxy
    finally:
        if proxy is not None:
            proxy.stop()
        with contextlib.suppress(Exception), ControllerClient(
                controller.address, timeout=10, credentials=controller.credentials) as c:
            c.shutdown()
        controller.stop()
