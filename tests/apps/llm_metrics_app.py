"""A stand-in for a language-model deployment: each request records the
llm_* metrics servefleet.llm's engines record (the dashboard reads them),
with made-up but fixed figures, per model (?model=, default "tiny")."""

from __future__ import annotations

from servefleet import metrics

BOUNDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0]
FIRST_TOKEN = metrics.Histogram("llm_time_to_first_token_seconds", "time to first token",
                                boundaries=BOUNDS, tag_keys=("model",))
PER_TOKEN = metrics.Histogram("llm_time_per_output_token_seconds", "time per output token",
                              boundaries=BOUNDS, tag_keys=("model",))
GENERATED = metrics.Counter("llm_generated_tokens_total", "tokens generated",
                            tag_keys=("model",))
PROMPT = metrics.Counter("llm_prompt_tokens_total", "prompt tokens", tag_keys=("model",))

# What one request "generates": 8 tokens after a 30 ms first token, 7 ms apart.
TOKENS, PROMPT_TOKENS, FIRST_S, PER_TOKEN_S = 8, 3, 0.03, 0.007


def generate(request) -> str:
    tags = {"model": request.query_params.get("model", "tiny")}
    PROMPT.inc(PROMPT_TOKENS, tags=tags)
    FIRST_TOKEN.observe(FIRST_S, tags=tags)
    for _ in range(TOKENS - 1):
        PER_TOKEN.observe(PER_TOKEN_S, tags=tags)
    GENERATED.inc(TOKENS, tags=tags)
    return "ok"
