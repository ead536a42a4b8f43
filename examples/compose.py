"""Two deployments composed with a handle: a front that asks a counter.

`Front.bind(WordCounter.bind(...))` makes the counter a deployment of its own
(here with 2 replicas); in Front's replicas it arrives as a DeploymentHandle.

    curl 'http://127.0.0.1:8000/compose?text=the+cat+and+the+hat'
"""

from __future__ import annotations

from servefleet import deployment


@deployment(num_replicas=2)
class WordCounter:
    def __init__(self, ignore: list[str]) -> None:
        self.ignore = set(ignore)

    def count(self, text: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for word in text.lower().split():
            if word not in self.ignore:
                counts[word] = counts.get(word, 0) + 1
        return counts

    async def __call__(self, text: str) -> int:
        return len(text.split())


@deployment
class Front:
    def __init__(self, counter) -> None:
        self.counter = counter  # a DeploymentHandle

    async def __call__(self, request) -> dict:
        text = request.query_params.get("text", "")
        words = self.counter.remote(text)          # its __call__
        counts = self.counter.count.remote(text)   # a named method; both run at once
        return {"words": await words, "counts": await counts}


app = Front.bind(WordCounter.bind(ignore=["the", "a", "and"]))
