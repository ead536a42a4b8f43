"""The process runtime's log reading (the cursor GetLogs' follow advances):
a line longer than one read does not stop the follow."""

from __future__ import annotations

from servefleet.controller.runtime.process import ProcessRuntime


def test_a_line_longer_than_one_read_does_not_stall_the_follow(tmp_path) -> None:
    runtime = ProcessRuntime(tmp_path, "c")
    _, path = runtime._paths("r1")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"x" * (3 << 20) + b"\nafter\n")
    cursor, read = "0", ""
    for _ in range(10):
        text, cursor = runtime.read_logs("r1", cursor, 100)
        read += text
        if read.endswith("after\n"):
            break
    assert read == "x" * (3 << 20) + "\nafter\n"
    assert runtime.read_logs("r1", cursor, 100) == ("", cursor)


def test_a_partial_last_line_waits_for_its_end(tmp_path) -> None:
    runtime = ProcessRuntime(tmp_path, "c")
    _, path = runtime._paths("r1")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"one\ntw")
    text, cursor = runtime.read_logs("r1", "0", 100)
    assert (text, cursor) == ("one\n", "4")
    with path.open("ab") as f:
        f.write(b"o\n")
    assert runtime.read_logs("r1", cursor, 100) == ("two\n", "8")
