"""The command line's reference page (docs/reference/cli.md) is current, is
written from the parser (every command, every argument, the examples), and
does not depend on the terminal it is written in."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from servefleet._private.cli import helptext, reference
from servefleet._private.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent


def test_the_cli_page_is_current() -> None:
    committed = (ROOT / reference.PAGE_PATH).read_text()
    assert committed == reference.page(), (
        f"{reference.PAGE_PATH} is stale: run `.venv/bin/python -m "
        f"servefleet._private.cli.reference {reference.PAGE_PATH}` and commit the result")


def _sections(text: str) -> dict[str, str]:
    """Each command's section of the page, by its heading (`servefleet up`)."""
    parts = re.split(r"^#{2,3} (servefleet[\w -]*)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _rows(body: str) -> dict[str, str]:
    """Each argument's (`--tail`, `-f`, `DEPLOYMENT`) description in a section."""
    rows = {}
    for line in body.splitlines():
        if line.startswith("| `"):
            invocation, _, rest = line[3:].partition("` | ")
            for name in invocation.split(", "):
                rows[name.split(" ")[0]] = rest.split(" | ", 1)[1].removesuffix(" |")
    return rows


def test_the_page_has_every_command_argument_and_example() -> None:
    sections = _sections(reference.page())
    parsers = reference.walk(build_parser())
    assert len(parsers) >= 20 and set(sections) == {p.prog for p in parsers}
    for parser in parsers:
        body = sections[parser.prog]
        assert "```text\nusage: " + parser.prog in body, parser.prog
        rows = _rows(body)
        for action in reference.documented(parser):
            for name in action.option_strings or [str(action.metavar)]:
                assert rows.get(name), (parser.prog, name, "no row, or no description")
        for line in helptext.example_lines(parser.epilog):
            assert f"\n{line}\n" in body, (parser.prog, line)


def test_a_default_and_a_filled_in_help_reach_their_row() -> None:
    body = _sections(reference.page())["servefleet controller"]
    row = next(line for line in body.splitlines() if line.startswith("| `--runtime-dir DIR`"))
    assert row == ("| `--runtime-dir DIR` | `~/.servefleet/runtime` | process runtime: replica "
                   "settings and logs (default ~/.servefleet/runtime) |")


def test_the_page_does_not_depend_on_the_terminal_width(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    narrow = reference.page()
    monkeypatch.setenv("COLUMNS", "300")
    assert reference.page() == narrow


def test_the_generator_writes_the_page_or_prints_it(tmp_path, capsys) -> None:
    out = tmp_path / "cli.md"
    subprocess.run([sys.executable, "-m", "servefleet._private.cli.reference", str(out)],
                   check=True, timeout=60, cwd=ROOT)
    assert out.read_text() == reference.page()
    assert reference.main([]) == 0
    assert capsys.readouterr().out == reference.page()
    assert reference.main(["a.md", "b.md"]) == 2
    assert "usage:" in capsys.readouterr().err
    assert reference.main([str(tmp_path / "no" / "such" / "dir.md")]) == 1
    assert "No such file or directory" in capsys.readouterr().err
