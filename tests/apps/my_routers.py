"""A user's request router (tests/test_routing_e2e.py): always the replica
with the lowest id, and it counts its calls in a file when told to."""

import os

from servefleet.routing import RequestRouter


class Lowest(RequestRouter):
    def __init__(self, note: str = "") -> None:
        self.note = note

    def choose(self, replicas, request):
        if self.note:
            with open(self.note, "a") as f:
                f.write(f"{os.getpid()} {request.routing_key}\n")
        return min(replicas, key=lambda r: r.replica_id)
