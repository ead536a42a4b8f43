"""What a model's serving replica records, by model (servefleet.metrics).

On the replica's /metrics, with application, deployment and replica labels
added; the dashboard reads exactly these (controller/api/model_figures.py):

- llm_time_to_first_token_seconds (histogram): request start at the replica
  to the first token;
- llm_time_per_output_token_seconds (histogram): each later token's gap;
- llm_generated_tokens_total, llm_prompt_tokens_total (counters).
"""

from __future__ import annotations

from servefleet import metrics

_FIRST = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
_PER_TOKEN = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
              0.05, 0.1, 0.25, 1]

TIME_TO_FIRST_TOKEN = metrics.Histogram(
    "llm_time_to_first_token_seconds", "time to a request's first token",
    boundaries=_FIRST, tag_keys=("model",))
TIME_PER_OUTPUT_TOKEN = metrics.Histogram(
    "llm_time_per_output_token_seconds", "time between a request's tokens after the first",
    boundaries=_PER_TOKEN, tag_keys=("model",))
GENERATED_TOKENS = metrics.Counter("llm_generated_tokens", "tokens generated",
                                   tag_keys=("model",))
PROMPT_TOKENS = metrics.Counter("llm_prompt_tokens", "prompt tokens read", tag_keys=("model",))
