"""The proxy's HTTP edge: the edge protocol (servefleet/_private/edge/protocol.py)
with the proxy's limits, each named in refusals by the `servefleet proxy` flag
that sets it (proxy/limits.py). Bodies are the app's: it streams them to
replicas and answers 413 itself (app.py, dataplane/body.py).
"""

from __future__ import annotations

from servefleet._private.edge import protocol as edge_protocol

from .limits import EdgeLimits, flag_of


class HeadClock(edge_protocol.HeadClock):
    def __init__(self, limits: EdgeLimits) -> None:
        super().__init__(limits, server="proxy", setting=flag_of)
