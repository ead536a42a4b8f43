"""How a command's --help reads: a description filled to the terminal, and
an epilog of examples kept line for line.

Every command is added with `add_command`, which gives it a description (its
one-line help, unless it has a longer one) and its examples; reference.py
writes the CLI reference page from the same parser.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

EXAMPLES_HEADER = "examples:"


class Formatter(argparse.HelpFormatter):
    """argparse's formatter, except that a paragraph of the description or the
    epilog with an indented line (an example, a list) stays as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        filled = []
        for paragraph in re.split(r"\n[ \t]*\n", text.strip("\n")):
            lines = paragraph.splitlines()
            if any(line[:1].isspace() for line in lines):
                filled.append("\n".join(indent + line for line in lines))
            else:
                filled.append(super()._fill_text(paragraph, width, indent))
        return "\n\n".join(filled)


def examples(*lines: str) -> str:
    """An epilog of example lines: shell commands, `# ...` lines saying what
    the next ones do; an empty string separates groups."""
    return EXAMPLES_HEADER + "\n" + "\n".join(f"  {line}" if line else "" for line in lines)


def example_lines(epilog: str | None) -> list[str]:
    """The lines `examples` was given, back from a parser's epilog."""
    if not epilog or not epilog.startswith(EXAMPLES_HEADER + "\n"):
        return []
    return [line[2:] for line in epilog[len(EXAMPLES_HEADER) + 1:].splitlines()]


def add_command(commands: Any, name: str, *, help: str, example: list[str] | tuple[str, ...],
                description: str | None = None, **kwargs: Any) -> argparse.ArgumentParser:
    """`commands.add_parser(name)` with its help, a description (the help as a
    sentence unless given) and its examples."""
    if description is None:
        description = help[:1].upper() + help[1:] + "."
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help, description=description, epilog=examples(*example),
        formatter_class=Formatter, **kwargs)
    return parser
