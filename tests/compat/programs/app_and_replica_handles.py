"""get_app_handle from the driver; get_deployment_handle inside a replica."""
from servefleet import serve


@serve.deployment
class Backend:
    def __call__(self, x: int) -> int:
        return x * 3


@serve.deployment
class Frontend:
    def __init__(self, backend):
        self.backend = backend

    async def __call__(self, x: int) -> int:
        # A handle looked up by name inside a replica reaches this cluster.
        looked_up = serve.get_deployment_handle("Backend", app_name="tripler")
        return await looked_up.remote(x) + 1


serve.run(Frontend.bind(Backend.bind()), name="tripler", route_prefix=None)
handle = serve.get_app_handle("tripler")
assert handle.remote(4).result() == 13
serve.shutdown()
print("OK")
