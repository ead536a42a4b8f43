"""A bounded reader of the Prometheus text format, for the few families the
controller wants from a replica's /metrics (model_figures.py).

The text comes from a replica, which is untrusted: it may be huge, malformed
or hostile. So this reader

- looks only at samples whose name is in `names` (a prefix test per line;
  every other line is skipped unparsed);
- parses those by hand (no regular expressions that could backtrack), with
  limits on series, labels per series and label value length;
- raises BadExposition, naming the first problem, for anything it cannot
  read: the caller drops the whole answer (a half-read answer would give
  wrong rates) and logs once.

Prometheus' own format rules kept here: `# ...` lines are comments or
metadata; a sample is `name{label="value",...} value [timestamp]`; label
values escape `\\`, `\"` and `\n`; values may be `+Inf`, `-Inf`, `NaN`.
"""

from __future__ import annotations

import math
from collections.abc import Collection

# A series is its sample name and its sorted labels.
Labels = tuple[tuple[str, str], ...]
Series = tuple[str, Labels]

MAX_SERIES = 8192
MAX_LABELS = 16
MAX_LABEL_VALUE = 256


class BadExposition(ValueError):
    """The answer cannot be read (or is past a limit); the message says why."""


def parse(text: str, names: Collection[str], max_series: int = MAX_SERIES) -> dict[Series, float]:
    """The samples of `text` named in `names`, by series. BadExposition on a
    malformed wanted line, a repeated series, a NaN or past the limits."""
    prefixes = tuple(names)
    found: dict[Series, float] = {}
    for number, line in enumerate(text.split("\n"), 1):
        if not line.startswith(prefixes):
            continue
        end = _name_end(line)
        name = line[:end]
        if name not in names:  # a longer name with a wanted prefix
            continue
        try:
            labels, value = _sample(name, line, end)
        except BadExposition as e:
            raise BadExposition(f"line {number}: {e}") from None
        series = (name, labels)
        if series in found:
            raise BadExposition(f"line {number}: {name} repeats a series")
        if len(found) >= max_series:
            raise BadExposition(f"more than {max_series} wanted series")
        found[series] = value
    return found


def _name_end(line: str) -> int:
    end = 0
    while end < len(line) and (line[end].isalnum() or line[end] in "_:"):
        end += 1
    return end


def _sample(name: str, line: str, end: int) -> tuple[Labels, float]:
    """The labels and value of a sample line whose name ends at `end`."""
    labels: Labels = ()
    if end < len(line) and line[end] == "{":
        labels, end = _labels(line, end + 1)
    rest = line[end:].split()
    if not rest or len(rest) > 2:
        raise BadExposition(f"{name}: expected a value (and a timestamp)")
    try:
        value = float(rest[0])
    except ValueError:
        raise BadExposition(f"{name}: {rest[0][:40]!r} is not a number") from None
    if math.isnan(value):
        raise BadExposition(f"{name}: NaN")
    return labels, value


def _labels(line: str, at: int) -> tuple[Labels, int]:
    """The labels from just after `{` to `}`, and the index after `}`."""
    labels: dict[str, str] = {}
    while True:
        while at < len(line) and line[at] in " ,":
            at += 1
        if at < len(line) and line[at] == "}":
            return tuple(sorted(labels.items())), at + 1
        start = at
        while at < len(line) and (line[at].isalnum() or line[at] == "_"):
            at += 1
        key = line[start:at]
        if not key or line[at:at + 2] != '="':
            raise BadExposition("a label is not key=\"value\"")
        value, at = _quoted(line, at + 2)
        if key in labels:
            raise BadExposition(f"label {key} given twice")
        labels[key] = value
        if len(labels) > MAX_LABELS:
            raise BadExposition(f"more than {MAX_LABELS} labels")


def _quoted(line: str, at: int) -> tuple[str, int]:
    """The label value starting at `at` (after the opening quote), unescaped,
    and the index after its closing quote."""
    out: list[str] = []
    while at < len(line):
        char = line[at]
        if char == '"':
            return "".join(out), at + 1
        if char == "\\":
            at += 1
            escaped = line[at:at + 1]
            if escaped not in ('\\', '"', "n"):
                raise BadExposition("a bad escape in a label value")
            char = "\n" if escaped == "n" else escaped
        out.append(char)
        if len(out) > MAX_LABEL_VALUE:
            raise BadExposition(f"a label value longer than {MAX_LABEL_VALUE}")
        at += 1
    raise BadExposition("a label value without its closing quote")
