"""The dashboard's model figures without processes: the bounded reader of
/metrics text, quantiles and rates over the window, and a scrape round
against fake and hostile replicas on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from servefleet.controller.api.model_figures import (
    GENERATED,
    MAX_MODELS,
    PROMPT,
    TPOT,
    TTFT,
    ModelFigures,
    TooManyModels,
    by_model,
    histogram_quantile,
)
from servefleet.controller.api.model_scrape import (
    ModelScraper,
    ScrapeError,
    Target,
    fetch_metrics,
    read_models,
)
from servefleet.controller.api.prom_text import BadExposition, Series, parse

BOUNDS = ("0.01", "0.1", "1.0", "+Inf")


def exposition(models: dict[str, tuple[list[int], list[int], float, float]],
               replica: str = "r1") -> str:
    """A replica's /metrics as prometheus_client writes it: per model, TTFT
    and TPOT cumulative bucket counts (for BOUNDS), generated and prompt tokens."""
    lines = ["# HELP python_info x", 'python_info{version="3.11"} 1.0',
             "# TYPE llm_generated_tokens_total counter"]
    for model, (ttft, tpot, generated, prompt) in models.items():
        tags = f'application="app",deployment="Chat",model="{model}",replica="{replica}"'
        for family, counts in ((TTFT, ttft), (TPOT, tpot)):
            for bound, n in zip(BOUNDS, counts, strict=True):
                lines.append(f'{family}_bucket{{{tags},le="{bound}"}} {float(n)}')
            lines.append(f"{family}_count{{{tags}}} {float(counts[-1])}")
            lines.append(f"{family}_sum{{{tags}}} 1.5")
        lines.append(f"{GENERATED}{{{tags}}} {generated}")
        lines.append(f"{PROMPT}{{{tags}}} {prompt}")
    return "\n".join(lines) + "\n"


# -- the reader -------------------------------------------------------------------


def test_the_reader_takes_only_the_wanted_samples_with_their_labels() -> None:
    text = exposition({"small": ([1, 2, 3, 3], [0, 4, 4, 4], 10.0, 4.0)})
    found = parse(text, {GENERATED, TTFT + "_bucket"})
    assert found[(GENERATED, (("application", "app"), ("deployment", "Chat"),
                              ("model", "small"), ("replica", "r1")))] == 10.0
    assert len(found) == 5  # one counter, four buckets; no _count, _sum or python_info


def test_label_values_are_unescaped_and_timestamps_allowed() -> None:
    text = 'llm_prompt_tokens_total{model="a \\"b\\" \\\\ c\\nd"} 7 1700000000000\n'
    assert parse(text, {PROMPT}) == {(PROMPT, (("model", 'a "b" \\ c\nd'),)): 7.0}
    assert parse("llm_prompt_tokens_total 3\n", {PROMPT}) == {(PROMPT, ()): 3.0}


@pytest.mark.parametrize("line", [
    'llm_prompt_tokens_total{model="a} 1',
    'llm_prompt_tokens_total{model=a} 1',
    'llm_prompt_tokens_total{model="a"} one',
    'llm_prompt_tokens_total{model="a"}',
    'llm_prompt_tokens_total{model="a"} NaN',
    'llm_prompt_tokens_total{model="\\x"} 1',
    'llm_prompt_tokens_total{model="a",model="b"} 1',
    'llm_prompt_tokens_total{model="' + "x" * 300 + '"} 1',
    "llm_prompt_tokens_total{" + ",".join(f'k{i}="v"' for i in range(20)) + "} 1",
])
def test_a_malformed_wanted_line_is_refused(line: str) -> None:
    with pytest.raises(BadExposition):
        parse(line + "\n", {PROMPT})


def test_unwanted_lines_are_not_even_parsed_and_series_are_bounded() -> None:
    assert parse("garbage {{{ here\nllm_prompt_tokens_totally 1 2 3\n", {PROMPT}) == {}
    many = "".join(f'llm_prompt_tokens_total{{model="m{i}"}} 1\n' for i in range(11))
    with pytest.raises(BadExposition, match="more than 10"):
        parse(many, {PROMPT}, max_series=10)
    with pytest.raises(BadExposition, match="repeats"):
        parse("llm_prompt_tokens_total 1\nllm_prompt_tokens_total 2\n", {PROMPT})


def test_models_are_grouped_from_the_text_and_bounded() -> None:
    models = read_models(exposition({"a": ([1, 1, 1, 1], [0, 0, 0, 0], 5.0, 1.0),
                                     "b": ([0, 0, 2, 2], [0, 0, 0, 0], 8.0, 2.0)}))
    assert sorted(models) == ["a", "b"]
    assert models["b"].buckets[TTFT] == {0.01: 0, 0.1: 0, 1.0: 2, float("inf"): 2}
    assert models["b"].counters == {GENERATED: 8.0, PROMPT: 2.0}
    too_many: dict[Series, float] = {(PROMPT, (("model", f"m{i}"),)): 1.0
                                     for i in range(MAX_MODELS + 1)}
    with pytest.raises(TooManyModels):
        by_model(too_many)


# -- quantiles and rates ----------------------------------------------------------


def test_histogram_quantile_interpolates_as_prometheus_does() -> None:
    inf = float("inf")
    buckets = {0.1: 0.0, 0.2: 10.0, 0.4: 20.0, inf: 20.0}
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.2)
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.15)
    assert histogram_quantile(0.75, buckets) == pytest.approx(0.3)
    assert histogram_quantile(0.5, {1.0: 4.0, inf: 4.0}) == pytest.approx(0.5)  # from 0
    assert histogram_quantile(0.99, {1.0: 1.0, inf: 10.0}) == 1.0  # in +Inf: highest bound
    assert histogram_quantile(0.5, {1.0: 0.0, inf: 0.0}) is None
    assert histogram_quantile(0.5, {1.0: 3.0}) is None  # no +Inf bucket


def test_rates_and_quantiles_over_the_window_summed_across_replicas() -> None:
    figures = ModelFigures(window_s=10.0)
    start = read_models(exposition({"m": ([0, 0, 0, 0], [0, 0, 0, 0], 100.0, 50.0)}))
    figures.record("r1", "app", "Chat", 0.0, start)
    figures.record("r2", "app", "Chat", 0.0, start)
    figures.compute()
    assert figures.of("app", "Chat") == []  # one sample: no rate yet
    # r1: 10 first tokens, all in (0.01, 0.1]; 200 tokens in 2 s. r2: 10 more
    # in (0.1, 1.0]; 100 tokens in 4 s.
    figures.record("r1", "app", "Chat", 2.0, read_models(
        exposition({"m": ([0, 10, 10, 10], [10, 10, 10, 10], 300.0, 70.0)})))
    figures.record("r2", "app", "Chat", 4.0, read_models(
        exposition({"m": ([0, 0, 10, 10], [10, 10, 10, 10], 200.0, 90.0)})))
    figures.compute()
    (model,) = figures.of("app", "Chat")
    assert model["model"] == "m" and model["replicas"] == 2 and model["first_tokens"] == 20
    assert model["generated_tokens_per_s"] == pytest.approx(200 / 2 + 100 / 4)
    assert model["prompt_tokens_per_s"] == pytest.approx(20 / 2 + 40 / 4)
    assert model["ttft_p50_ms"] == pytest.approx(100.0)  # rank 10 of 20: the top of (0.01, 0.1]
    assert model["ttft_p99_ms"] == pytest.approx(100 + 900 * 9.8 / 10)
    assert model["tpot_p50_ms"] == pytest.approx(5.0)
    assert figures.of("app", "Other") == []


def test_a_restart_counts_from_zero_and_a_new_model_from_nothing() -> None:
    figures = ModelFigures()
    figures.record("r1", "app", "Chat", 0.0, read_models(
        exposition({"a": ([5, 5, 5, 5], [5, 5, 5, 5], 1000.0, 10.0)})))
    figures.record("r1", "app", "Chat", 5.0, read_models(
        exposition({"a": ([2, 2, 2, 2], [0, 0, 0, 0], 50.0, 5.0),
                    "b": ([0, 0, 1, 1], [0, 0, 0, 0], 25.0, 0.0)})))
    figures.compute()
    a, b = figures.of("app", "Chat")
    assert a["generated_tokens_per_s"] == pytest.approx(10.0) and a["first_tokens"] == 2
    assert a["tpot_p50_ms"] is None  # no token in the window
    assert (b["model"], b["generated_tokens_per_s"], b["first_tokens"]) == ("b", 5.0, 1)


def test_old_samples_and_gone_replicas_are_forgotten() -> None:
    figures = ModelFigures(window_s=10.0)
    sample = read_models(exposition({"m": ([1, 1, 1, 1], [1, 1, 1, 1], 1.0, 1.0)}))
    for t in (0.0, 6.0, 12.0):
        figures.record("r1", "app", "Chat", t, sample)
        figures.record("r2", "app", "Chat", t, sample)
    figures.forget(["r1"], now=12.0)
    figures.compute()
    (model,) = figures.of("app", "Chat")
    assert (model["replicas"], model["window_s"]) == (1, 6.0)  # from 6.0 to 12.0, r1 only
    figures.forget(["r1"], now=30.0)  # nobody polled for a while: all stale
    figures.compute()
    assert figures.of("app", "Chat") == []


# -- scraping ---------------------------------------------------------------------


async def _serve(answer: bytes, delay: float = 0.0,
                 stop: asyncio.Event | None = None) -> tuple[asyncio.Server, str]:
    """A fake replica on loopback that answers `answer` after `delay` (or `stop`)."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            if delay:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for((stop or asyncio.Event()).wait(), delay)
            writer.write(answer)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


def _http(body: bytes, status: bytes = b"200 OK") -> bytes:
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: text/plain\r\ncontent-length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


@pytest.mark.asyncio
async def test_fetch_reads_a_body_and_refuses_slow_big_or_bad_answers() -> None:
    text = exposition({"m": ([1, 1, 1, 1], [1, 1, 1, 1], 1.0, 1.0)}).encode()
    cases = {"ok": _http(text), "big": _http(b"x" * 5000), "bad": _http(b"", b"500 Oops"),
             "chunked": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
             "short": _http(text)[:-10], "noise": b"\x00\xff" * 100}
    servers = {name: await _serve(answer) for name, answer in cases.items()}
    stop = asyncio.Event()
    slow, slow_address = await _serve(_http(text), delay=5, stop=stop)
    try:
        assert await fetch_metrics(servers["ok"][1]) == text.decode()
        for name, match in (("big", "larger than 1000"), ("bad", "500 Oops"),
                            ("chunked", "transfer encoding"), ("short", "short"),
                            ("noise", "not an HTTP answer")):
            with pytest.raises(ScrapeError, match=match):
                await fetch_metrics(servers[name][1], max_bytes=1000)
        with pytest.raises(ScrapeError, match=r"no whole answer in 0\.2 s"):
            await fetch_metrics(slow_address, timeout_s=0.2)
    finally:
        for server, _ in [*servers.values(), (slow, "")]:
            server.close()
        stop.set()  # the slow one answers, to nobody, and closes
        await asyncio.sleep(0.05)


@pytest.mark.asyncio
async def test_a_round_uses_good_answers_and_logs_bad_ones_once(caplog) -> None:
    answers = {"good": exposition({"m": ([0, 0, 0, 0], [0, 0, 0, 0], 0.0, 0.0)}),
               "malformed": 'llm_generated_tokens_total{model="m} 1\n'}
    clock = [0.0]

    async def fetch(address: str) -> str:
        if address == "unreachable":
            raise ScrapeError("cannot read it: refused")
        return answers[address]

    scraper = ModelScraper(fetch, clock=lambda: clock[0])
    targets = [Target(name, "app", name.title(), name)
               for name in ("good", "malformed", "unreachable")]
    with caplog.at_level(logging.DEBUG, logger="servefleet.controller.api.model_scrape"):
        await scraper.scrape(targets)
        answers["good"] = exposition({"m": ([0, 4, 4, 4], [4, 4, 4, 4], 40.0, 8.0)})
        clock[0] = 2.0
        await scraper.scrape(targets)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # one per failing replica, not one per round
    assert any("malformed" in w and "line 1" in w for w in warnings)
    (model,) = scraper.figures.of("app", "Good")
    assert model["generated_tokens_per_s"] == pytest.approx(20.0)
    assert scraper.figures.of("app", "Malformed") == []


@pytest.mark.asyncio
async def test_poll_starts_at_most_one_round_per_interval_and_never_waits() -> None:
    started: list[str] = []
    release = asyncio.Event()

    async def fetch(address: str) -> str:
        started.append(address)
        await release.wait()
        return ""

    clock = [0.0]
    scraper = ModelScraper(fetch, clock=lambda: clock[0], interval_s=2.0)
    targets = [Target("r1", "app", "Chat", "r1")]
    scraper.poll(targets)
    await asyncio.sleep(0)
    clock[0] = 1.0
    scraper.poll(targets)  # the first round still runs: no second one
    await asyncio.sleep(0)
    assert started == ["r1"]
    release.set()
    await asyncio.sleep(0.05)
    clock[0] = 1.5
    scraper.poll(targets)  # 1.5 s after the last start: not due
    await asyncio.sleep(0)
    assert started == ["r1"]
    clock[0] = 2.5
    scraper.poll(targets)
    await asyncio.sleep(0.05)
    assert started == ["r1", "r1"]


def test_poll_without_an_event_loop_does_nothing() -> None:
    ModelScraper().poll([Target("r1", "app", "Chat", "127.0.0.1:1")])
