"""Two language models behind one OpenAI endpoint, built in code.

The same model as examples/llm/config.yaml plus a second one. To serve it
(an embedded controller and proxy, HTTP on 127.0.0.1:8000, route /llm):

    python examples/llm/app.py

Then any OpenAI client, its `base_url` the route plus /v1 (the ingress
serves {route_prefix}/v1/...):

    from openai import OpenAI
    client = OpenAI(base_url="http://127.0.0.1:8000/llm/v1", api_key="unused")
    client.chat.completions.create(model="kjv-gospels", max_tokens=30,
                                   messages=[{"role": "user", "content": "Who is he?"}])

Each model is a deployment of its own (`LLMServer_kjv_trigram`,
`LLMServer_kjv_gospels`) holding servefleet's NGramEngine, a word trigram
model trained when a replica starts on the King James Bible (Debian's
bible-kjv); the request's `model` field picks one. docs/llm.md has the rest.
"""

from __future__ import annotations

import servefleet
from servefleet.llm import LLMConfig, build_openai_app

app = build_openai_app([
    # The whole text; two replicas, and a conversation's turns kept on one
    # of them (prefix affinity on the prompt, docs/routing.md).
    LLMConfig(model_id="kjv-trigram",
              deployment_config={"num_replicas": 2, "max_ongoing_requests": 64,
                                 "request_router": "prefix_affinity"}),
    # The four gospels only: a smaller model that speaks of other things.
    LLMConfig(model_id="kjv-gospels", engine_kwargs={"passages": "Mat1:1-John21:25"},
              deployment_config={"num_replicas": 1, "max_ongoing_requests": 64}),
])

if __name__ == "__main__":
    servefleet.run(app, name="llm", route_prefix="/llm", blocking=True)
