"""serve.ingress given a function that builds the FastAPI app."""
import requests
from fastapi import FastAPI

from servefleet import serve


def build_app() -> FastAPI:
    app = FastAPI()

    @app.get("/hello")
    def hello(name: str = "world"):
        return f"hello {name}"

    return app


@serve.deployment
@serve.ingress(build_app)
class Site:
    pass


serve.run(Site.bind())
assert requests.get("http://127.0.0.1:8000/hello", params={"name": "Bo"}).json() == "hello Bo"
serve.shutdown()
print("OK")
