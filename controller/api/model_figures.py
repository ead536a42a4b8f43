"""Model serving figures for the dashboard, from replicas' llm_* and embedding_* metrics.

What a language-model deployment records per model (tag `model`) with
servefleet.metrics, and the dashboard reads: MODEL_METRICS, the one list.
From successive scrapes of each replica's /metrics (model_scrape.py) this
module keeps, per replica, the samples of the last WINDOW_S seconds and
derives per (application, deployment, model), over that window:

- time to first token p50 and p99, time per output token p50: Prometheus'
  `histogram_quantile` over the bucket increases summed across replicas
  (linear interpolation inside the bucket the rank falls in; the highest
  finite bound when it falls in +Inf);
- generated and prompt tokens per second: each replica's counter increase
  over its own span, summed;
- for an embedding model (servefleet/_private/embeddings/embedding_metrics.py,
  `"kind": "embedding"`): the mean batch size and padded tokens per batch,
  the padding share, the queue wait p50 and p99, inputs per second.

A counter or bucket that went down means the process restarted: its new
value is the increase (as Prometheus' rate() does). A series missing from
the older sample counts from zero (a model first served in the window).
Everything here is soft state: lost on failover, rebuilt by the next scrapes.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .prom_text import Series

TTFT = "llm_time_to_first_token_seconds"
TPOT = "llm_time_per_output_token_seconds"
GENERATED = "llm_generated_tokens_total"
PROMPT = "llm_prompt_tokens_total"
EMBED_WAIT = "embedding_queue_wait_seconds"
EMBED_BATCHES = "embedding_batches_total"
EMBED_INPUTS = "embedding_inputs_total"
EMBED_TOKENS = "embedding_input_tokens_total"
EMBED_PADDED = "embedding_padded_tokens_total"
HISTOGRAMS = (TTFT, TPOT, EMBED_WAIT)
COUNTERS = (GENERATED, PROMPT, EMBED_BATCHES, EMBED_INPUTS, EMBED_TOKENS, EMBED_PADDED)
# The sample names read from /metrics: everything else there is skipped.
MODEL_METRICS = frozenset([*(h + "_bucket" for h in HISTOGRAMS), *COUNTERS])

WINDOW_S = 10.0
# Samples kept per replica: the window at the scrape interval, with room.
MAX_SAMPLES = 32
# More models than this in one replica's answer: the answer is not used.
MAX_MODELS = 256


class TooManyModels(ValueError):
    pass


@dataclass
class ModelSample:
    """One model's figures in one scrape: cumulative buckets (upper bound ->
    count) per histogram, and counter values."""

    buckets: dict[str, dict[float, float]] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)


def by_model(samples: Mapping[Series, float]) -> dict[str, ModelSample]:
    """Parsed samples (prom_text.parse over MODEL_METRICS) grouped by the
    `model` label ("" when absent). The replica's own labels are ignored:
    figures belong to the replica that was scraped, not to what it claims."""
    out: dict[str, ModelSample] = {}
    for (name, labels), value in samples.items():
        tags = dict(labels)
        model = tags.get("model", "")
        if model not in out and len(out) >= MAX_MODELS:
            raise TooManyModels(f"more than {MAX_MODELS} models")
        sample = out.setdefault(model, ModelSample())
        if name.endswith("_bucket"):
            bound = _bound(tags.get("le"))
            if bound is not None:
                sample.buckets.setdefault(name.removesuffix("_bucket"), {})[bound] = value
        else:
            sample.counters[name] = value
    return out


def _bound(le: str | None) -> float | None:
    try:
        return float(le) if le is not None else None
    except ValueError:
        return None


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The q-quantile of cumulative `buckets` (upper bound -> count), as
    Prometheus computes it; None without observations or a +Inf bucket."""
    bounds = sorted(buckets)
    if not bounds or not math.isinf(bounds[-1]):
        return None
    counts: list[float] = []
    for bound in bounds:  # cumulative counts never go down (Prometheus fixes it too)
        counts.append(max(buckets[bound], counts[-1] if counts else 0.0))
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    for i, (bound, count) in enumerate(zip(bounds, counts, strict=True)):
        if count >= rank:
            if math.isinf(bound):
                return bounds[i - 1] if i > 0 else None
            if i == 0 and bound <= 0:
                return bound
            lower = bounds[i - 1] if i > 0 else 0.0
            below = counts[i - 1] if i > 0 else 0.0
            inside = count - below
            return bound if inside <= 0 else lower + (bound - lower) * (rank - below) / inside
    return None


def _increase(new: float, old: float | None) -> float:
    return new if old is None or new < old else new - old


def _bucket_increase(new: Mapping[float, float], old: Mapping[float, float]) -> dict[float, float]:
    if any(new.get(b, 0.0) < v for b, v in old.items()):  # a restart: all of new is new
        return dict(new)
    return {b: v - old.get(b, 0.0) for b, v in new.items()}


@dataclass
class _Window:
    """A deployment's model over the window, summed across replicas."""

    buckets: dict[str, dict[float, float]] = field(default_factory=dict)
    per_s: dict[str, float] = field(default_factory=dict)
    span_s: float = 0.0
    replicas: int = 0


class ModelFigures:
    """Per replica, the samples of the last `window_s`; per deployment, the
    figures (`of`). `record` a scrape, `forget` replicas that are gone."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: dict[str, deque[tuple[float, dict[str, ModelSample]]]] = {}
        self._owner: dict[str, tuple[str, str]] = {}
        self._figures: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def record(self, replica_id: str, application: str, deployment: str, now: float,
               models: dict[str, ModelSample]) -> None:
        """One scrape of one replica at `now` (a monotonic clock)."""
        kept = self._samples.setdefault(replica_id, deque(maxlen=MAX_SAMPLES))
        kept.append((now, models))
        self._owner[replica_id] = (application, deployment)

    def forget(self, keep: Iterable[str], now: float) -> None:
        """Drop replicas not in `keep`, and samples older than the window
        (the newest of a replica older than that too: its figures are stale)."""
        wanted = set(keep)
        for replica_id in list(self._samples):
            kept = self._samples[replica_id]
            while kept and kept[0][0] < now - self.window_s:
                kept.popleft()
            if replica_id not in wanted or not kept:
                del self._samples[replica_id]
                self._owner.pop(replica_id, None)

    def compute(self) -> None:
        """Figures from the kept samples; `of` answers them until the next call."""
        windows: dict[tuple[str, str, str], _Window] = {}
        for replica_id, kept in self._samples.items():
            if len(kept) < 2:
                continue
            (start, old), (end, new) = kept[0], kept[-1]
            span = end - start
            if span <= 0:
                continue
            application, deployment = self._owner[replica_id]
            for model, sample in new.items():
                before = old.get(model, ModelSample())
                window = windows.setdefault((application, deployment, model), _Window())
                window.replicas += 1
                window.span_s = max(window.span_s, span)
                for name, buckets in sample.buckets.items():
                    summed = window.buckets.setdefault(name, {})
                    for bound, n in _bucket_increase(buckets,
                                                     before.buckets.get(name, {})).items():
                        summed[bound] = summed.get(bound, 0.0) + n
                for name, value in sample.counters.items():
                    rate = _increase(value, before.counters.get(name)) / span
                    window.per_s[name] = window.per_s.get(name, 0.0) + rate
        figures: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for (application, deployment, model), window in sorted(windows.items()):
            figures.setdefault((application, deployment), []).append(_figures(model, window))
        self._figures = figures

    def of(self, application: str, deployment: str) -> list[dict[str, Any]]:
        """The deployment's figures per model (sorted by model); [] without any."""
        return self._figures.get((application, deployment), [])


def _ms(q: float, buckets: dict[float, float]) -> float | None:
    value = histogram_quantile(q, buckets)
    return None if value is None else round(value * 1000, 3)


def _embedding_figures(model: str, window: _Window) -> dict[str, Any]:
    rate = window.per_s

    def ratio(a: str, b: str) -> float | None:
        return round(rate[a] / rate[b], 3) if rate.get(b) and a in rate else None

    padded = ratio(EMBED_TOKENS, EMBED_PADDED)
    wait = window.buckets.get(EMBED_WAIT, {})
    return {"model": model, "kind": "embedding",
            "batch_size_mean": ratio(EMBED_INPUTS, EMBED_BATCHES),
            "batch_tokens_mean": ratio(EMBED_PADDED, EMBED_BATCHES),
            "padding_share": None if padded is None else round(1 - padded, 3),
            "queue_wait_p50_ms": _ms(0.5, wait), "queue_wait_p99_ms": _ms(0.99, wait),
            "inputs_per_s": round(rate.get(EMBED_INPUTS, 0.0), 3),
            "window_s": round(window.span_s, 1), "replicas": window.replicas}


def _figures(model: str, window: _Window) -> dict[str, Any]:
    if EMBED_BATCHES in window.per_s:
        return _embedding_figures(model, window)
    ttft = window.buckets.get(TTFT, {})
    tpot = window.buckets.get(TPOT, {})
    ms = _ms

    def per_s(name: str) -> float | None:
        value = window.per_s.get(name)
        return None if value is None else round(value, 3)

    return {"model": model,
            "ttft_p50_ms": ms(0.5, ttft), "ttft_p99_ms": ms(0.99, ttft),
            "tpot_p50_ms": ms(0.5, tpot),
            "first_tokens": round(max(ttft.values(), default=0.0)),
            "generated_tokens_per_s": per_s(GENERATED),
            "prompt_tokens_per_s": per_s(PROMPT),
            "window_s": round(window.span_s, 1), "replicas": window.replicas}
