"""A chaos run's verdicts as a table, and the history's figures beside it."""

from __future__ import annotations

import calendar
import time
from collections import Counter
from collections.abc import Iterable

from nemesis import checks
from nemesis.history import Action, History

# The lines of a leader's log that say it changed something (after the
# fact), and the one that opens its term: a term's span runs from its
# election, so a deposed leader acting after a successor was elected is seen
# even before the successor's first action.
ACTION_PREFIXES = ("leading with term", "started replica", "stopped replica",
                   "reconfigured replica")


def actions_from_logs(lines: Iterable[tuple[str, dict]]) -> list[Action]:
    """Leader actions from (controller name, JSON log line) pairs."""
    found = []
    for controller, entry in lines:
        message = entry.get("message", "")
        if entry.get("term") and message.startswith(ACTION_PREFIXES):
            found.append(Action(_epoch(entry["time"]), controller, int(entry["term"]),
                                message[:160]))
    return found


def _epoch(stamp: str) -> float:
    """'2026-12-05T10:31:02.114Z' -> seconds since the epoch."""
    whole, _, millis = stamp.rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + int(millis or 0) / 1e3


def verdicts(history: History, converge_bound_s: float) -> list[checks.Verdict]:
    assert history.final is not None
    return [checks.writes_kept(history.ops, history.final.state),
            checks.one_leader(history.actions),
            checks.terms_in_store(history.writes),
            checks.starts_within_terms(history.starts, history.actions),
            checks.failures_excused(history.requests, history.faults),
            checks.converged(history.final, converge_bound_s)]


def table(history: History, found: list[checks.Verdict], skipped: list[str]) -> str:
    rows = ["| invariant | checked | violations | |", "|---|---:|---:|---|"]
    for verdict in found:
        rows.append(f"| {verdict.name} | {verdict.checked} | {len(verdict.violations)} | "
                    f"{'ok' if verdict.ok else 'BROKEN'} |")
    lines = [f"seed {history.seed}, schedule {history.schedule_digest}", "", *rows, ""]
    for verdict in found:
        for violation in verdict.violations[:20]:
            lines.append(f"- BROKEN {verdict.name}: {violation}")
        if len(verdict.violations) > 20:
            lines.append(f"- ... and {len(verdict.violations) - 20} more")
    kinds = Counter(r.kind for r in history.requests)
    failed = Counter(r.kind for r in history.requests if not r.ok)
    lines.append("requests: " + ", ".join(f"{k} {n} ({failed[k]} failed)"
                                          for k, n in sorted(kinds.items())))
    if history.options.get("websocket_reconnects"):
        lines.append(f"WebSockets closed with 1001 (going away) and opened again: "
                     f"{history.options['websocket_reconnects']}")
    lines.append("operations: " + ", ".join(f"{k} {n}" for k, n in
                                            checks.outcomes(history.ops).items()))
    faults = Counter(f"{f.kind} {f.target.partition(':')[0]}" for f in history.faults)
    lines.append("faults: " + ", ".join(f"{k} x{n}" for k, n in sorted(faults.items())))
    terms = sorted({a.term for a in history.actions})
    lines.append(f"leader terms that acted: {len(terms)}")
    if history.final is not None and history.final.converged_at is not None:
        lines.append(f"converged {history.final.converged_at - history.final.nemesis_end:.1f} s "
                     "after the nemesis stopped")
    lines.extend(f"skipped: {s}" for s in skipped)
    return "\n".join(lines)
