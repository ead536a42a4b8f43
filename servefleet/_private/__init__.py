"""servefleet's internals: the SDK's machinery, the CLI, the data plane.

Nothing here is promised to users: names may change in any release. What
users import lives in `servefleet`, `servefleet.serve`, `servefleet.metrics`
and `servefleet.client` (and the generated API, `servefleet.v1`), each with
`__all__`. The services' code is in `servefleet.controller`,
`servefleet.proxy` and `servefleet.replica` (the repository's top-level
folders): programs to run, not libraries to import.

Rooms, one concern each; every room's __init__ says what it owns and, on its
"May import:" line, which other rooms it may import (tests/test_layout.py
holds them to it):

- configuration: the config file, deployment options, Ray's names for them;
- applications: user code, `@deployment` and application graphs, builds;
- batching: `@batch` and `@multiplexed`;
- handles: deployment handles and what their calls return;
- dataplane: reaching a replica, for proxies and handles alike;
- edge: the servers' side of HTTP (proxy and replica);
- local: `servefleet.run` and the local runs it starts;
- observability, tracing: logs, metrics, spans;
- security: TLS, certificates, tokens, roles;
- llm, embeddings: the language and embedding models servefleet ships
  behind OpenAI's API; cli: the `servefleet` command.

The modules at this level are shared by the rooms and every room may import
them: names that cross a process boundary (`wire`, `envelope`, `messages`,
`replica_command`), process plumbing (`lifecycle`, `state_dir`), the Watch
client (`watch_client`), gRPC helpers (`grpc_guard`, `xds_bootstrap`,
`proto_docs`), what handles, batching, ingresses, replicas and the Ray layer
share (`handle_errors`, `handle_loop`, `replica_context`, and Ray's
`ray_handle_options`, `ray_reconfigure`, `ray_actors`, `ray_run_notes`), and
the test harness (`testing`). A few lean on a room below them (`envelope`
on observability and tracing, `lifecycle` on edge, `watch_client` and
`testing` on security, the `ray_*` ones on configuration); the layout test
keeps the whole graph free of circles. Internal code never imports `servefleet.serve`, the
Ray-compatibility layer: it is built on these rooms.
"""
