"""A small sentiment model in pure Python: word lists, no downloads.

`user_config` tunes it without a restart: {"threshold": 1, "extra_positive": ["rad"]}.
Deployed by examples/config.yaml as the application `sentiment`:

    curl 'http://127.0.0.1:8000/sentiment?text=what+a+great+day'
"""

from __future__ import annotations

import re

from servefleet import deployment

POSITIVE = {"good", "great", "love", "excellent", "happy", "nice", "fast", "wonderful"}
NEGATIVE = {"bad", "awful", "hate", "terrible", "sad", "slow", "broken", "poor"}
WORD = re.compile(r"[a-z']+")


@deployment(num_replicas=2, user_config={"threshold": 1})
class SentimentModel:
    def __init__(self, name: str = "sentiment") -> None:
        self.name = name
        self.threshold = 1
        self.positive = set(POSITIVE)
        self.negative = set(NEGATIVE)

    def reconfigure(self, config: dict) -> None:
        self.threshold = int(config.get("threshold", 1))
        self.positive = POSITIVE | set(config.get("extra_positive", []))
        self.negative = NEGATIVE | set(config.get("extra_negative", []))

    async def __call__(self, request) -> dict:
        """HTTP: GET ?text=... or POST the text as the body."""
        text = request.query_params.get("text") or (await request.body()).decode()
        return self.predict(text)

    def predict(self, text: str) -> dict:
        words = WORD.findall(text.lower())
        score = sum(w in self.positive for w in words) - sum(w in self.negative for w in words)
        label = ("positive" if score >= self.threshold
                 else "negative" if score <= -self.threshold else "neutral")
        return {"model": self.name, "label": label, "score": score}


app = SentimentModel.bind("sentiment-v1")
