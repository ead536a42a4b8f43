"""An application that answers with the request headers it was given."""

from __future__ import annotations

from servefleet import deployment


@deployment
def show(request) -> dict:
    return dict(request.headers)


app = show.bind()
