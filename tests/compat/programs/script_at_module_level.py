"""Deployments defined in the script itself, and serve.run at module level."""
import requests
from starlette.requests import Request

from servefleet import serve


@serve.deployment(num_replicas=2)
class Greeter:
    def __init__(self, greeting: str):
        self.greeting = greeting

    def __call__(self, request: Request) -> str:
        return f"{self.greeting}, {request.query_params['name']}!"


@serve.deployment
def ping() -> str:
    return "pong"


serve.run(Greeter.bind("Hello"), name="greeter", route_prefix="/greet")
serve.run(ping.bind(), name="ping", route_prefix="/ping")

assert requests.get("http://127.0.0.1:8000/greet?name=Ada").text == "Hello, Ada!"
assert requests.get("http://127.0.0.1:8000/ping").text == "pong"
serve.shutdown()
print("OK")
