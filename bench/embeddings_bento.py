"""bench/embeddings.py's model on BentoML: the same model code
(bench/embeddings_model.py), one worker, BentoML's own adaptive batching
(@bentoml.api(batchable=True), at most 32 sentences). Its API's shape is
BentoML's: POST /embed {"texts": [one sentence]} -> [one base64 vector].

    bentoml serve embeddings_bento:Embedder --port P   (from bench/, with the
    EMBEDDINGS_ONNX and EMBEDDINGS_TOKENIZER of bench/embeddings.py)
"""

from __future__ import annotations

import base64

import bentoml  # type: ignore[import-not-found]
from embeddings_model import Encoder


@bentoml.service(workers=1, traffic={"max_concurrency": 128, "timeout": 60})
class Embedder:
    def __init__(self) -> None:
        self.encoder = Encoder()

    @bentoml.api(batchable=True, max_batch_size=32, max_latency_ms=60000)
    def embed(self, texts: list[str]) -> list[str]:
        vectors = self.encoder.embed(self.encoder.tokenize(texts))
        return [base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") for v in vectors]
