"""Import paths in Ray Serve's dotted form, written as servefleet writes them.

servefleet names user code as `module:attribute` (the colon says where the
module ends, so nothing is guessed). Ray Serve also takes a path without a
colon, `pkg.mod.attribute`, whose last dot splits module from attribute
(its `import_attr`); config files and `grpc_servicer_functions` written for
Ray use that form, e.g. `user_pb2_grpc.add_UserServicer_to_server`.
`colon_form` rewrites such a path once, where it enters servefleet, so that
every later check (the controller's format rule, the deploy policy that
splits at the colon) sees one form.
"""

from __future__ import annotations


def colon_form(path: str) -> str:
    """`path` with a colon between module and attribute: unchanged when it
    has one, else split at its last dot. A path with neither is returned as
    it is, for the caller's format check to refuse by name."""
    if ":" in path or "." not in path.strip("."):
        return path
    module, _, attribute = path.rpartition(".")
    return f"{module}:{attribute}"
