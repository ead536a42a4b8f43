"""The servefleet command line.

May import: applications, configuration, llm, observability, security,
tracing, controller, proxy, public.

gRPC's C core logs its own errors to stderr (e.g. a failed bind), which would
double the CLI's one-line messages; it stays quiet unless GRPC_VERBOSITY is
set. This runs before grpc is first imported by the CLI.
"""

import os

os.environ.setdefault("GRPC_VERBOSITY", "NONE")
