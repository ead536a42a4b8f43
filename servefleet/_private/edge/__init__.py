"""The servers' side of HTTP, shared by the proxy and the replica.

- `http_protocol`: uvicorn's protocol with writes coalesced;
- `protocol`, `limits`: how much of a server one client may hold;
- `disconnect`: cancelling a request's work when its client leaves;
- `deadlines`: time limits on many tasks on one timer;
- `ws`: what the proxy's and the replica's WebSocket code share.

May import: nothing (only _private's top-level modules).
"""
