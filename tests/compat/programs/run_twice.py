"""serve.run twice under one name, with a different ingress each time."""
import requests

from servefleet import serve


@serve.deployment
class First:
    def __call__(self) -> str:
        return "first"


@serve.deployment
class Second:
    def __call__(self) -> str:
        return "second"


serve.run(First.bind(), name="app")
assert requests.get("http://127.0.0.1:8000/").text == "first"
serve.run(Second.bind(), name="app")
assert requests.get("http://127.0.0.1:8000/").text == "second"
assert list(serve.status().applications) == ["app"]
serve.shutdown()
print("OK")
