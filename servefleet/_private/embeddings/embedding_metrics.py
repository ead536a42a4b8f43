"""What an embedding model's replica records per model run, by model (servefleet.metrics).

On the replica's /metrics, with application, deployment and replica labels
added; the dashboard reads the counters and the queue wait
(controller/api/model_figures.py) and shows, per model, the mean batch size,
padded tokens per batch, padding share, queue wait p50 and p99 and inputs
per second:

- embedding_batches_total: model runs (a batch, or one request's inputs
  when the deployment does not batch);
- embedding_inputs_total: sequences embedded;
- embedding_input_tokens_total: their tokens;
- embedding_padded_tokens_total: what the runs computed: per run, its
  sequences x its longest (the padding share is 1 - input / padded);
- embedding_queue_wait_seconds (histogram): a sequence's wait for its batch;
- embedding_batch_size, embedding_batch_tokens (histograms): sequences and
  padded tokens per run;
- embedding_run_seconds (histogram): a run of the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from servefleet import metrics

_WAIT = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
         1, 2.5]
_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
_TOKENS = [16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
_RUN = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]

BATCHES = metrics.Counter("embedding_batches", "model runs", tag_keys=("model",))
INPUTS = metrics.Counter("embedding_inputs", "sequences embedded", tag_keys=("model",))
INPUT_TOKENS = metrics.Counter("embedding_input_tokens", "tokens of the sequences embedded",
                               tag_keys=("model",))
PADDED_TOKENS = metrics.Counter("embedding_padded_tokens",
                                "tokens computed: per run, sequences x the longest",
                                tag_keys=("model",))
QUEUE_WAIT = metrics.Histogram("embedding_queue_wait_seconds",
                               "a sequence's wait for its batch", boundaries=_WAIT,
                               tag_keys=("model",))
BATCH_SIZE = metrics.Histogram("embedding_batch_size", "sequences per model run",
                               boundaries=_SIZES, tag_keys=("model",))
BATCH_TOKENS = metrics.Histogram("embedding_batch_tokens", "padded tokens per model run",
                                 boundaries=_TOKENS, tag_keys=("model",))
RUN_SECONDS = metrics.Histogram("embedding_run_seconds", "a run of the model",
                                boundaries=_RUN, tag_keys=("model",))


def record_run(tags: Mapping[str, str], lengths: Sequence[int], seconds: float) -> None:
    """One model run over sequences of `lengths` tokens, taking `seconds`."""
    if not lengths:
        return
    padded = len(lengths) * max(lengths)
    BATCHES.inc(tags=tags)
    INPUTS.inc(len(lengths), tags=tags)
    INPUT_TOKENS.inc(sum(lengths), tags=tags)
    PADDED_TOKENS.inc(padded, tags=tags)
    BATCH_SIZE.observe(len(lengths), tags=tags)
    BATCH_TOKENS.observe(padded, tags=tags)
    RUN_SECONDS.observe(seconds, tags=tags)
