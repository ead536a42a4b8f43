"""User code and the application graphs made of it.

- `api`: `@deployment`, `.options()`, `.bind()` and the graph they build
  (`graph_of`, the one walk of a bound application);
- `build`: the build step, run by the controller in a child process: import
  an application and report its graph;
- `by_value`: code and init args by value, for `servefleet.run` from a script;
- `user_code`: finding user code by its import path;
- `ingress`, `ingress_routes`, `asgi_lifespan`: `ingress(app)`, a FastAPI
  app around a deployment class, and its lifespan;
- `grpc_servicers`: what a generated `add_XServicer_to_server` registers;
- `policy_runner`: a custom autoscaling policy, run outside the controller.

May import: batching, configuration, controller, replica.
"""
