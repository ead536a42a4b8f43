"""Three variants of one deployment, for traffic splitting and shadowing tests."""

from __future__ import annotations

import os

from servefleet import deployment


@deployment(max_ongoing_requests=50)
class Labeled:
    def __init__(self, label: str, marks_dir: str = "", others: list | None = None) -> None:
        self.label = label
        self.marks_dir = marks_dir

    async def __call__(self, request) -> dict:
        if self.marks_dir:  # one file per request seen, named by its id
            with open(os.path.join(self.marks_dir, request.headers["x-request-id"]), "w"):
                pass
        return {"label": self.label}


def build(args: dict):
    canary = Labeled.options(name="Canary").bind("canary")
    shadow = Labeled.options(name="Shadow").bind("shadow", marks_dir=args["marks_dir"])
    return Labeled.options(name="Primary").bind("primary", others=[canary, shadow])
