"""An application that answers with the request headers it was given."""

from __future__ import annotations

from servefleet import deployment


@deployment
def show(request) -> dict:
    return dict(request.headers)


app = show.bind()


@deployment
def peer(request) -> dict:
    """Who sent the request and how, as the replica's server worked it out."""
    return {"client": request.client.host, "scheme": request.url.scheme}


peer_app = peer.bind()
