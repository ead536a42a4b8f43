"""What every process of a cluster holds, sampled on a timer (the soak):
resident memory, open file descriptors, threads, and the event loop's
unfinished tasks (servefleet_event_loop_tasks on the process's /metrics;
None for etcd, which has no event loop of ours)."""

from __future__ import annotations

import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import psutil

TASKS = re.compile(r"^servefleet_event_loop_tasks (\S+)$", re.MULTILINE)


@dataclass
class Sample:
    time: float
    rss_bytes: int
    fds: int
    threads: int
    tasks: float | None


def tasks_of(metrics_url: str) -> float | None:
    try:
        found = TASKS.search(httpx.get(metrics_url, timeout=5).text)
    except httpx.HTTPError:
        return None
    return float(found.group(1)) if found else None


class Sampler:
    """Every `every_s`, one Sample per process `processes()` names: a dict of
    name -> (pid, its metrics URL or "")."""

    def __init__(self, processes: Callable[[], dict[str, tuple[int, str]]],
                 every_s: float = 10.0) -> None:
        self.processes = processes
        self.every_s = every_s
        # name -> (pid, samples): a name whose pid changes starts a new series
        self.series: dict[str, list[Sample]] = defaultdict(list)
        self.pids: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Sampler:
        self._thread = threading.Thread(target=self._loop, name="soak-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _loop(self) -> None:
        while True:
            self.sample_once()
            if self._stop.wait(self.every_s):
                return

    def sample_once(self) -> None:
        now = time.time()
        for name, (pid, metrics_url) in self.processes().items():
            try:
                process = psutil.Process(pid)
                with process.oneshot():
                    sample = Sample(now, process.memory_info().rss, process.num_fds(),
                                    process.num_threads(),
                                    tasks_of(metrics_url) if metrics_url else None)
            except psutil.Error:
                continue
            key = name if self.pids.setdefault(name, pid) == pid else f"{name} (pid {pid})"
            self.series[key].append(sample)


@dataclass
class Growth:
    process: str
    first: Sample
    last: Sample

    def percent(self, field: str) -> float | None:
        before, after = getattr(self.first, field), getattr(self.last, field)
        if before is None or after is None or not before:
            return None
        return (after - before) / before * 100


def growth(series: dict[str, list[Sample]], warm_until: float,
           window: int = 3) -> list[Growth]:
    """Per process alive from the warm-up's end to the last sample: the mean
    of its first `window` samples after warm-up against its last `window`."""
    found = []
    last = max((samples[-1].time for samples in series.values() if samples), default=0.0)
    for name, samples in sorted(series.items()):
        after = [s for s in samples if s.time >= warm_until]
        if len(after) < 2 * window:
            continue
        period = after[1].time - after[0].time  # one sampling sweep
        if samples[0].time > warm_until or after[-1].time < last - 1.5 * period:
            continue  # born after the warm-up, or gone before the end
        found.append(Growth(name, _mean(after[:window]), _mean(after[-window:])))
    return found


def _mean(samples: list[Sample]) -> Sample:
    n = len(samples)
    tasks = [s.tasks for s in samples if s.tasks is not None]
    return Sample(samples[-1].time, sum(s.rss_bytes for s in samples) // n,
                  round(sum(s.fds for s in samples) / n),
                  round(sum(s.threads for s in samples) / n),
                  sum(tasks) / len(tasks) if tasks else None)
