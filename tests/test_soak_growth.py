"""The soak's growth figures (bench/nemesis/sampler.py, bench/soak.py): a
process that grows past the goal is named, one that does not passes, a
process replaced mid-run is a series of its own, warm-up is not counted."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import soak
from nemesis.sampler import Sample, Sampler, growth


def series(rss: list[int], tasks: float | None = 10.0, start: float = 0.0) -> list[Sample]:
    return [Sample(start + 10 * i, r, 20, 8, tasks) for i, r in enumerate(rss)]


def test_growth_is_measured_after_the_warm_up_and_past_the_goal_is_named() -> None:
    flat = series([500] * 3 + [100] * 10)           # shrank in warm-up, then flat
    leaking = series([100] * 6 + [120] * 7)          # +20% after warm-up
    found = growth({"proxy:p1": flat, "replica:x": leaking}, warm_until=30)
    by_name = {g.process: g for g in found}
    assert by_name["proxy:p1"].percent("rss_bytes") == 0
    assert round(by_name["replica:x"].percent("rss_bytes") or 0) == 20
    text, over = soak.table(found)
    assert over == ["replica:x: RSS grew 20.0%"]
    assert "| replica:x |" in text


def test_a_process_seen_too_briefly_after_warm_up_is_left_out() -> None:
    assert growth({"replica:short": series([100] * 8)}, warm_until=30) == []


def test_only_processes_alive_from_warm_up_to_the_end_are_compared() -> None:
    """A replica born after the warm-up, or gone before the end (a rollout
    replaced it), is not compared: its first and last samples are not the
    run's."""
    whole = series([100] * 13)                             # 0..120 s
    born_late = series([100] * 8, start=50)                # 50..120 s
    gone_early = series([100] * 10)                        # 0..90 s
    found = growth({"proxy:p1": whole, "replica:late": born_late,
                    "replica:early": gone_early}, warm_until=30)
    assert [g.process for g in found] == ["proxy:p1"]


def test_a_name_whose_pid_changes_starts_a_new_series() -> None:
    pids = {"proxy:p1": (os.getpid(), "")}
    sampler = Sampler(lambda: pids, every_s=1)
    sampler.sample_once()
    pids["proxy:p1"] = (os.getppid(), "")  # restarted: another process under the name
    sampler.sample_once()
    assert sorted(sampler.series) == ["proxy:p1", f"proxy:p1 (pid {os.getppid()})"]
