"""Serving language models behind OpenAI's HTTP API.

    from servefleet.llm import LLMConfig, build_openai_app

    app = build_openai_app([LLMConfig(model_id="kjv-trigram")])
    servefleet.run(app, route_prefix="/llm")
    # openai.OpenAI(base_url="http://127.0.0.1:8000/llm/v1", api_key="-")

- `LLMConfig`, `build_openai_app`: models, each its own deployment, behind
  one ingress serving /v1/chat/completions, /v1/completions and /v1/models,
  streamed or not (docs/llm.md);
- `EmbeddingConfig`: an embedding model behind the same ingress, serving
  /v1/embeddings and /v1/rerank (docs/embeddings.md); `EmbeddingServer`,
  its deployment; `SentenceEncoder`, the model that ships
  (all-MiniLM-L6-v2 on ONNX Runtime; the embeddings extra);
- `LLMServer`: the deployment that holds a model's engine;
- `Engine`, `SamplingParams`, `Piece`, `ChatMessage`: the interface an
  engine implements (an adapter for another engine is a page of code);
- `NGramEngine`: a small model that really generates (a word trigram model
  of the King James Bible from Debian's bible-kjv package; needs numpy,
  from the examples extra).
"""

from __future__ import annotations

from typing import Any

from servefleet._private.embeddings.config import EmbeddingConfig
from servefleet._private.embeddings.server import EmbeddingServer
from servefleet._private.llm.app_builder import LLMConfig, build_openai_app
from servefleet._private.llm.engine import ChatMessage, Engine, Piece, SamplingParams
from servefleet._private.llm.server import LLMServer

__all__ = ["ChatMessage", "EmbeddingConfig", "EmbeddingServer", "Engine", "LLMConfig",
           "LLMServer", "NGramEngine", "Piece", "SamplingParams", "SentenceEncoder",
           "build_openai_app"]


def __getattr__(name: str) -> Any:
    if name == "NGramEngine":  # numpy: imported when asked for
        from servefleet._private.llm.ngram import NGramEngine

        return NGramEngine
    if name == "SentenceEncoder":  # numpy, onnxruntime, tokenizers: imported when asked for
        from servefleet._private.embeddings.encoder import SentenceEncoder

        return SentenceEncoder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
