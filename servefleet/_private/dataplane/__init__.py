"""One way to reach a replica, shared by proxies and deployment handles.

- `balancer`: a pool per deployment, power of two choices over in-flight
  counts, the FIFO queue and `max_queued_requests` backpressure;
- `upstream`: HTTP/1.1 over pooled keep-alive connections to replicas, its
  failures told apart as never delivered or maybe acted on;
- `replica_sets`: the pools of every deployment, kept by Watch snapshots;
- `forward`: send a request to a replica, retrying one never delivered on
  another.

The proxy (HTTP ingress) and handles (Python calls) differ only in how they
frame a request and read its answer. Nothing here imports the proxy.

May import: applications, security, tracing.
"""
