"""A text classifier served over gRPC (and HTTP) by one deployment.

The methods named like the RPCs of classifier.proto serve them: `Predict`
returns one reply, `PredictStream` yields one per word. The same class also
answers HTTP (`__call__`), so one deployment serves both. Deployed by
examples/config.yaml as the application `classifier`; call it through a
proxy started with --grpc-listen (docs/grpc.md):

    python examples/grpc_classifier/client.py --target 127.0.0.1:9000 "what a great day"
"""

from __future__ import annotations

import asyncio
import os
import re

from grpc_classifier.classifier_pb2 import PredictReply, PredictRequest

from servefleet import deployment

POSITIVE = {"good", "great", "love", "excellent", "happy", "nice", "fast", "wonderful"}
NEGATIVE = {"bad", "awful", "hate", "terrible", "sad", "slow", "broken", "poor"}
WORD = re.compile(r"[a-z']+")
# The generated function that registers the service: the application's
# grpc_servicer_functions.
SERVICER = "grpc_classifier.classifier_pb2_grpc:add_ClassifierServicer_to_server"


@deployment(num_replicas=2)
class Classifier:
    def __init__(self, threshold: int = 1) -> None:
        self.threshold = threshold
        self.replica = os.environ.get("HOSTNAME", "") or str(os.getpid())

    def _score(self, word_list: list[str]) -> tuple[str, int]:
        score = sum(w in POSITIVE for w in word_list) - sum(w in NEGATIVE for w in word_list)
        label = ("positive" if score >= self.threshold
                 else "negative" if score <= -self.threshold else "neutral")
        return label, score

    async def Predict(self, request: PredictRequest) -> PredictReply:
        label, score = self._score(WORD.findall(request.text.lower()))
        return PredictReply(label=label, score=score, replica=self.replica)

    async def PredictStream(self, request: PredictRequest):
        for word in WORD.findall(request.text.lower()):
            label, score = self._score([word])
            yield PredictReply(label=label, score=score, replica=self.replica, word=word)
            await asyncio.sleep(0)

    async def __call__(self, request) -> dict:
        """HTTP: GET ?text=..."""
        label, score = self._score(WORD.findall(request.query_params.get("text", "").lower()))
        return {"label": label, "score": score}


app = Classifier.bind()
