"""ReplicaEcho over real files standing in for the process runtime's: what
reaches the driver, once, and when (the script test in test_local_script.py
runs it with real replicas)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from servefleet._private.local.logs import ReplicaEcho, enabled
from servefleet._private.testing import wait_for


class Driver:
    """The driver's stderr and the runtime directory's files."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.names: dict[str, str] = {}
        self.shown: list[str] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        with self._lock:
            self.shown += text.splitlines()

    def lines(self) -> list[str]:
        with self._lock:
            return list(self.shown)

    def outputs(self) -> dict[str, Path]:
        return {p.stem: p for p in self.dir.glob("*.log")}

    def echo(self) -> ReplicaEcho:
        return ReplicaEcho(str(self.dir), write=self.write, outputs=self.outputs,
                           names=lambda: dict(self.names))

    def replica(self, replica_id: str, text: str = "") -> Path:
        path = self.dir / f"{replica_id}.log"
        with open(path, "a") as f:
            f.write(text)
        return path


@pytest.fixture
def driver(tmp_path: Path) -> Driver:
    return Driver(tmp_path)


def test_lines_are_shown_prefixed_as_they_complete_and_once(driver: Driver) -> None:
    driver.names["M-1"] = "(app/M M-1 pid=7)"
    path = driver.replica("M-1", "first\nhalf a ")
    echo = driver.echo()
    try:
        wait_for(lambda: driver.lines() == ["(app/M M-1 pid=7) first"], 10, "the first line")
        driver.replica("M-1", "line\n\nlast\n")
        wait_for(lambda: len(driver.lines()) == 4, 10, "the rest")
    finally:
        echo.stop()
        echo.stop()  # idempotent
    assert driver.lines() == ["(app/M M-1 pid=7) first", "(app/M M-1 pid=7) half a line",
                              "(app/M M-1 pid=7) ", "(app/M M-1 pid=7) last"]
    assert path.exists()  # only read


def test_a_replica_waits_for_its_name_and_stop_shows_it_under_its_id(driver: Driver) -> None:
    driver.replica("N-1", "early\n")
    echo = driver.echo()
    try:
        driver.replica("Q-1", "unnamed\n")
        driver.names["N-1"] = "(app/N N-1 pid=8)"
        wait_for(lambda: driver.lines() == ["(app/N N-1 pid=8) early"], 10, "the named one")
        driver.replica("Q-1", "unfinished")
    finally:
        echo.stop()
    assert driver.lines()[1:] == ["(Q-1) unnamed", "(Q-1) unfinished"]


def test_what_a_replica_wrote_before_its_file_was_removed_is_shown(driver: Driver) -> None:
    driver.names.update({"A-1": "(a)", "B-1": "(b)"})
    a = driver.replica("A-1", "one\n")
    echo = driver.echo()
    try:
        wait_for(lambda: driver.lines() == ["(a) one"], 10, "A's first line")
        with open(a, "a") as f:  # the replica's last words, then the controller's cleanup
            f.write("last words\nno end")
        a.unlink()
        wait_for(lambda: "(a) no end" in driver.lines(), 10, "A's last lines")
        driver.replica("B-1", "b's\n")
    finally:
        echo.stop()  # B's line, whether or not a poll came first
    assert driver.lines() == ["(a) one", "(a) last words", "(a) no end", "(b) b's"]


@pytest.mark.parametrize(("value", "on"), [(None, True), ("", True), ("1", True),
                                           ("true", True), ("0", False), ("False", False),
                                           ("off", False)])
def test_log_to_driver_values(value: str | None, on: bool) -> None:
    assert enabled({} if value is None else {"SERVEFLEET_LOG_TO_DRIVER": value}) is on


def test_a_bad_log_to_driver_value_names_the_variable() -> None:
    with pytest.raises(ValueError, match=r"SERVEFLEET_LOG_TO_DRIVER='2': 1 .* or 0"):
        enabled({"SERVEFLEET_LOG_TO_DRIVER": "2"})
