"""Sentence embeddings served with ONNX Runtime (servefleet.llm's embeddings and rerank).

- model_files.py: a sentence-transformers BERT model directory, read and checked;
- bert_onnx.py: the ONNX graph of that model, built from its weights;
- onnx_cache.py: that graph built once per weights and kept on disk;
- encoder.py: `SentenceEncoder`, token ids in, unit vectors out, one run per batch;
- batched.py: the token-budget batcher in front of a model's embed;
- embedding_metrics.py: what each model run records (batch size, tokens, padding, wait);
- server.py: `EmbeddingServer`, the deployment that holds a model in each replica;
- config.py: `EmbeddingConfig`, a model for build_openai_app (llm/app_builder.py);
- protocol.py, routes.py: OpenAI's /v1/embeddings and the /v1/rerank shape,
  read, checked and answered, as routes of the OpenAI ingress.

May import: applications, batching, configuration, public, llm (its OpenAI request
types; llm imports this room's routes and config in turn, module by module
without a circle).
"""
