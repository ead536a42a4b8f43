"""`servefleet --help` and every `servefleet COMMAND --help`: each command and
each argument has a one-line help, each command shows examples, and the
examples are real: their flags parse and the files they name exist."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from servefleet._private.cli import helptext
from servefleet._private.cli.main import build_parser
from servefleet._private.cli.reference import documented, subcommands, walk

ROOT = Path(__file__).resolve().parent.parent
PARSERS = {p.prog: p for p in walk(build_parser())}


def test_the_walk_finds_every_command() -> None:
    # Guards the tests below against walking nothing.
    assert {"servefleet", "servefleet up", "servefleet deploy", "servefleet config schema",
            "servefleet certs init", "servefleet token revoke",
            "servefleet xds-bootstrap"} <= set(PARSERS)
    assert len(PARSERS) >= 20
    flags = {s for p in PARSERS.values() for a in documented(p) for s in a.option_strings}
    assert {"--tls-key", "--replica-key", "--max-connections", "--log-level"} <= flags


@pytest.mark.parametrize("prog", sorted(PARSERS))
def test_every_command_and_argument_has_a_help(prog: str) -> None:
    parser = PARSERS[prog]
    for name, _, help_text in subcommands(parser):
        assert help_text.strip(), f"{prog} {name}: no help"
    for action in documented(parser):
        name = "/".join(action.option_strings) or str(action.metavar or action.dest)
        assert action.help and action.help != argparse.SUPPRESS, f"{prog} {name}: no help"
        assert "\n" not in action.help, f"{prog} {name}: help of more than one line"


@pytest.mark.parametrize("prog", sorted(PARSERS))
def test_every_command_help_shows_an_example(prog: str) -> None:
    text = PARSERS[prog].format_help()
    assert "\nexamples:\n" in text, f"`{prog} --help` shows no example"
    examples = text.split("\nexamples:\n", 1)[1]
    # At least one runs this very command (the top level's: any).
    assert re.search(rf"^  (\S+=\S+ )?{re.escape(prog)}( |$)", examples, re.M), examples


def _commands() -> list[tuple[str, str]]:
    """(prog, example line) of every example that runs `servefleet`."""
    found = []
    for prog, parser in PARSERS.items():
        for line in helptext.example_lines(parser.epilog):
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                words.pop(0)  # VAR=value servefleet ...
            if words and words[0] == "servefleet":
                found.append((prog, line))
    return found


@pytest.mark.parametrize(("prog", "line"), _commands())
def test_every_example_parses(prog: str, line: str, capsys) -> None:
    words = shlex.split(line, comments=True)
    while words[0] != "servefleet":
        words.pop(0)
    for stop in (">", "|", "&&", ";"):
        if stop in words:
            words = words[:words.index(stop)]
    try:
        args = build_parser().parse_args(words[1:])
    except SystemExit as e:
        # `servefleet deploy --help` is an example too; anything else is a bad flag.
        assert e.code == 0 and "--help" in words, (prog, line, capsys.readouterr().err)
        return
    assert callable(args.run)


def test_the_files_examples_name_exist() -> None:
    named = {word for parser in PARSERS.values()
             for line in helptext.example_lines(parser.epilog)
             for word in re.findall(r"(?:examples|docs)/[\w./-]+", line)}
    assert "examples/config.yaml" in named
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"examples name files that are not in the repository: {missing}"


def test_examples_keep_their_lines_and_descriptions_are_filled(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")  # argparse reads it each time it formats
    controller = PARSERS["servefleet controller"]
    out = controller.format_help()
    long_example = next(line for line in helptext.example_lines(controller.epilog)
                        if len(line) > 60)
    assert f"\n  {long_example}\n" in out
    description = out.split("\n\n")[1]
    assert description.startswith("Run one controller")
    assert all(len(line) <= 60 for line in description.splitlines())


def test_deploy_help_from_the_command_line() -> None:
    done = subprocess.run([sys.executable, "-m", "servefleet", "deploy", "--help"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: servefleet deploy")
    assert "\nexamples:\n  servefleet deploy examples/config.yaml --dry-run\n" in done.stdout
