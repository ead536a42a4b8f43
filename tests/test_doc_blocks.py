"""The runnable blocks of README.md and docs/**/*.md, run as a reader runs
them: one page at a time, in a fresh directory, against a real embedded
cluster (`servefleet up`, real processes, loopback only), so a renamed flag,
a changed output or an example that no longer serves fails here.

A block runs when the line before its fence is a marker (docs/contributing.md
says how to write them):

- `<!-- run -->` before an `sh` block: each command runs with bash in the
  page's directory and must exit 0; a trailing comment `# → TEXT` is what the
  command prints (TEXT must be in its output).
- `<!-- run -->` before a `console` block: `$ COMMAND` lines, each followed
  by lines of what it prints: each must match an output line, in order
  (`...` inside a line matches anything; other output lines may come between).
- `<!-- run: file NAME -->` before any block: its text is written to NAME.

`servefleet up ...` starts in the background, as in a terminal of its own,
and the next command runs once it says it is ready; it is stopped with
Ctrl-C (SIGINT) when the page is done, and must exit 0. The cluster takes
free ports: the blocks' 127.0.0.1:8000 (HTTP), 127.0.0.1:7373 (the
controller) and 127.0.0.1:8265 (its HTTP face: dashboard, REST API) are
replaced with them before a command runs.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from servefleet._private.testing import free_port, wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
MARKED = re.compile(r"^<!-- run(?::\s*(?P<args>.*?))?\s*-->\n(?P<fence>`{3,})(?P<lang>[\w-]*)"
                    r"[^\n]*\n(?P<body>.*?)^(?P=fence)\s*$", re.M | re.S)
EXPECT = re.compile(r"\s#\s*→\s*(.*)$")
HEREDOC = re.compile(r"<<-?\s*'?\"?(\w+)'?\"?")


@dataclass
class Block:
    page: str
    line: int
    lang: str
    args: str
    body: str


def marked_blocks(path: Path) -> list[Block]:
    text = path.read_text()
    return [Block(str(path.relative_to(ROOT)), text.count("\n", 0, m.start()) + 2,
                  m.group("lang"), (m.group("args") or "").strip(), m.group("body"))
            for m in MARKED.finditer(text)]


def pages() -> list[Path]:
    return [p for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
            if marked_blocks(p)]


def sh_commands(body: str) -> list[tuple[str, str | None]]:
    """(command, expected output or None) for each command of an sh block:
    continuation lines and heredocs belong to their command."""
    lines, commands = body.splitlines(), []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [line]
        while parts[-1].endswith("\\") and i < len(lines):
            parts.append(lines[i])
            i += 1
        if heredoc := HEREDOC.search(parts[0]):
            while i < len(lines):
                parts.append(lines[i])
                i += 1
                if parts[-1].strip() == heredoc.group(1):
                    break
        expected = EXPECT.search(parts[-1])
        commands.append(("\n".join(parts), expected.group(1).strip() if expected else None))
    return commands


def console_commands(body: str) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for each `$ ` line of a console block."""
    commands: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        elif commands and line.strip():
            commands[-1][1].append(line)
        elif not commands and line.strip():
            raise AssertionError(f"output before any command: {line!r}")
    return commands


def matches_in_order(expected: list[str], output: str) -> str | None:
    """None if every expected line matches an output line, in order; else the first that
    does not."""
    actual = output.splitlines()
    at = 0
    for want in expected:
        pattern = re.compile(".*?".join(re.escape(p) for p in want.strip().split("...")))
        while at < len(actual) and not pattern.search(actual[at]):
            at += 1
        if at == len(actual):
            return want
        at += 1
    return None


class Cluster:
    """The page's `servefleet up` processes and the ports they use."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.http, self.listen = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        self.dashboard = f"127.0.0.1:{free_port()}"  # the controller's HTTP face (REST)
        self.ups: list[tuple[subprocess.Popen, list[str], threading.Thread]] = []
        bin_dir = str(Path(sys.executable).parent)
        self.env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                    "SERVEFLEET_CONTROLLER": self.listen}

    def fill(self, text: str) -> str:
        return text.replace("127.0.0.1:8000", self.http).replace(
            "127.0.0.1:7373", self.listen).replace("127.0.0.1:8265", self.dashboard)

    def run(self, command: str, where: str) -> str:
        command = self.fill(command)
        words = shlex.split(command, comments=True)
        if words[:2] == ["servefleet", "up"]:
            return self.up(words[2:], where)
        done = subprocess.run(["bash", "-c", command], cwd=self.workdir, env=self.env,
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, (f"{where}: `{command}` exited {done.returncode}\n"
                                      f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        return done.stdout + done.stderr

    def up(self, args: list[str], where: str) -> str:
        proc = subprocess.Popen(
            [sys.executable, "-m", "servefleet", "up", *args, "--state-dir",
             str(self.workdir / f".state-{len(self.ups)}"), "--http", self.http,
             "--listen", self.listen, "--dashboard", self.dashboard],
            cwd=self.workdir, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
        reader.start()
        self.ups.append((proc, lines, reader))
        wait_for(lambda: proc.poll() is not None or any("| ready" in x for x in lines), 120,
                 f"{where}: servefleet up to be ready")
        assert proc.poll() is None, f"{where}: servefleet up exited\n{''.join(lines)[-3000:]}"
        return "".join(lines)

    def stop(self) -> None:
        for proc, lines, reader in self.ups:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            try:
                code = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                raise
            finally:
                reader.join(timeout=10)
                if proc.stdout:
                    proc.stdout.close()
            assert code == 0, f"servefleet up exited {code}\n{''.join(lines)[-3000:]}"


def run_page(path: Path, workdir: Path) -> int:
    """Run every marked block of `path`; the number of commands run."""
    cluster, ran = Cluster(workdir), 0
    try:
        for block in marked_blocks(path):
            where = f"{block.page}:{block.line}"
            if block.args.startswith("file "):
                (workdir / block.args.split(None, 1)[1]).write_text(block.body)
            elif block.args:
                raise AssertionError(f"{where}: unknown marker `run: {block.args}`")
            elif block.lang == "sh":
                for command, expected in sh_commands(block.body):
                    output = cluster.run(command, where)
                    if expected is not None:
                        assert cluster.fill(expected) in output, (where, command, output)
                    ran += 1
            elif block.lang == "console":
                for command, expected_lines in console_commands(block.body):
                    output = cluster.run(command, where)
                    missing = matches_in_order([cluster.fill(x) for x in expected_lines], output)
                    assert missing is None, f"{where}: `{command}` printed no line " \
                                            f"like {missing!r}:\n{output[-3000:]}"
                    ran += 1
            else:
                raise AssertionError(f"{where}: a `{block.lang}` block can only be a file")
    finally:
        cluster.stop()
    return ran


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_runnable_blocks_of_a_page_run(page: Path, tmp_path) -> None:
    assert run_page(page, tmp_path) > 0


def test_the_pages_a_newcomer_reads_first_have_runnable_blocks() -> None:
    marked = {str(p.relative_to(ROOT)) for p in pages()}
    assert {"README.md", "docs/getting-started.md"} <= marked, marked


def test_the_parsers_read_blocks_as_the_contributing_page_says() -> None:
    body = ("cat > a.yaml <<'YAML'\nx: 1\nYAML\n# a comment line\n"
            "servefleet deploy a.yaml \\\n  --wait   # waits\ncurl 'http://h/'  # → {\"a\":1}\n")
    assert sh_commands(body) == [("cat > a.yaml <<'YAML'\nx: 1\nYAML", None),
                                 ("servefleet deploy a.yaml \\\n  --wait   # waits", None),
                                 ("curl 'http://h/'  # → {\"a\":1}", '{"a":1}')]
    assert console_commands("$ servefleet status\ncalc  RUNNING\n\n$ true\n") == [
        ("servefleet status", ["calc  RUNNING"]), ("true", [])]
    assert matches_in_order(["a ... c", "d"], "x\na b c\ny\nd\n") is None
    assert matches_in_order(["d", "a ... c"], "a b c\nd\n") == "a ... c"
    page = ROOT / "docs" / "contributing.md"
    assert "<!-- run -->" in page.read_text()
