"""Client Status Discovery Service: what each connected xDS client was sent.

`FetchClientStatus` answers, per client connected to this controller's ADS
(ads.py keeps them), every resource it subscribed to with the version last
sent, whether it was ACKed or NACKed (with the client's message), and the
resource itself unless `exclude_resource_contents` is set (an Envoy's
routes with the value of its hop pass redacted: hop_header.py). `node_matchers`
are not supported: every client is listed. A standby lists none (clients
reach the leader through its relay).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from envoy.admin.v3 import config_dump_shared_pb2 as dump
from envoy.service.status.v3 import csds_pb2, csds_pb2_grpc

from .ads import AggregatedDiscovery


class ClientStatus(csds_pb2_grpc.ClientStatusDiscoveryServiceServicer):
    def __init__(self, ads: AggregatedDiscovery,
                 check: Callable[[Any], Awaitable[None]] | None = None) -> None:
        self._ads = ads
        self._check = check  # who may read it: the rule of Watch and of xDS itself

    async def FetchClientStatus(self, request: csds_pb2.ClientStatusRequest,
                                context: Any) -> csds_pb2.ClientStatusResponse:
        if self._check is not None:
            await self._check(context)
        out = csds_pb2.ClientStatusResponse()
        for client in list(self._ads.clients.values()):
            config = out.config.add()
            config.node.id = client.node_id
            for type_url, sub in sorted(client.subscriptions.items()):
                for name, packed in sorted(sub.sent.items()):
                    status = (dump.NACKED if sub.nack else dump.ACKED
                              if sub.acked_version == sub.sent_version else dump.REQUESTED)
                    entry = config.generic_xds_configs.add(
                        type_url=type_url, name=name, version_info=sub.sent_version,
                        client_status=status)
                    if sub.nack:
                        entry.error_state.details = sub.nack
                    if not request.exclude_resource_contents:
                        entry.xds_config.CopyFrom(packed)
        return out
