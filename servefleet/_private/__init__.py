"""servefleet's internals: the SDK's machinery, the CLI, the data plane.

Nothing here is promised to users: names may change in any release. What
users import lives in `servefleet`, `servefleet.serve`, `servefleet.metrics`
and `servefleet.client` (and the generated API, `servefleet.v1`), each with
`__all__`. The services' code is in `servefleet.controller`,
`servefleet.proxy` and `servefleet.replica` (the repository's top-level
folders): programs to run, not libraries to import.
"""
