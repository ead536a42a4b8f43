"""Deployment handles: calling another deployment's methods from Python.

- `handle`: `DeploymentHandle`, `get_deployment_handle`;
- `handle_router`: how a call reaches a replica (the proxy's data plane,
  framed as a handle call) and what comes back;
- `responses`: `DeploymentResponse` and `DeploymentResponseGenerator`;
- `values`: Python values on the handle hop.

Their errors (`handle_errors`) and event loop (`handle_loop`) are top-level
modules of _private: batching, ingresses and servefleet.serve use them too.

May import: applications, dataplane, observability, security.
"""
