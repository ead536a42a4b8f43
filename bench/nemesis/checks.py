"""The invariants a chaos run must keep, each a pure function of its history.

Each check returns a Verdict: what it looked at and every violation, named
so that a reader can find it in the run's history. What each one holds the
cluster to (docs/chaos.md):

1. writes_kept: every acknowledged Deploy or Delete is in the final state,
   in order. Per deployment the operations are issued one after another,
   so the final mark must be the last acknowledged one's, or that of an
   operation whose outcome the client never learned (it may take effect at
   any time after it was sent, as Jepsen's checkers allow). A deployment in
   the store that no operation could have written is a violation too.
2. one_leader: never two controllers acting as leader at once. Every action
   carries its term (the fencing revision it leads with); the span from a
   term's first action to its last must not overlap another term's, and a
   term belongs to one controller. terms_in_store checks the same from the
   store's side: every leader write also puts its term and address in one
   key, in the same transaction, so the store's history of that key lists
   every revision a leader wrote; along the revisions terms never go back
   (a deposed leader's write after its successor's would), and a term is
   one controller's. starts_within_terms checks it from the runtime's side:
   no replica process started (by the kernel's record) after a newer term
   than the one that registered it began acting.
3. failures_excused: a request fails only when it was in flight at a process
   on its path that was killed (SIGKILL at that moment) or stopped (SIGSTOP
   during the request), or was sent, without an answer of any kind, on a
   connection to a proxy killed less than DEAD_PEER_S before. Faults of the
   control plane (controllers, etcd, partitions, the store's disk) excuse
   nothing: the data plane does not share their fate.
4. converged: after the nemesis stopped, every deployment was RUNNING at
   its target within the stated bound, with no replica process or container
   left over, no record without one, and no store damaged (the embedded
   store passes sqlite's integrity check, and refused writes on its full
   disk with an error that says so).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from nemesis.history import (
    FAILED,
    OK,
    UNKNOWN,
    Action,
    Fault,
    Final,
    Op,
    Request,
    Start,
    Write,
)

# Log lines carry milliseconds. A client takes a request's times just
# before it sends and just after the answer, so a request in flight at a
# process when it was killed has the kill inside its own span.
CLOCK_SLACK_S = 0.005
# A process's start time is known to the kernel's tick (10 ms), on a boot
# time read from /proc/uptime (10 ms).
START_SLACK_S = 0.05
# The faults that may fail requests in flight at their target.
KILLING = ("kill", "stop")
# A client may send on a kept-alive connection to a proxy killed just before
# (its pool has not seen the connection close yet): the request reaches no
# process, and fails with no answer. A load balancer would send it to
# another proxy; the run's clients, like httpx, do not. Such a failure is
# the kill's within this long after it, and only without any answer.
DEAD_PEER_S = 1.0


@dataclass
class Verdict:
    name: str
    checked: int  # how many operations, requests, terms... were looked at
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def writes_kept(ops: Sequence[Op], state: dict[str, str]) -> Verdict:
    """Invariant 1 (module docstring)."""
    verdict = Verdict("acknowledged writes kept, in order", len(ops))
    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        by_key[op.key].append(op)
    for key in sorted(set(by_key) | set(state)):
        history = sorted(by_key.get(key, []), key=lambda o: o.invoked)
        acknowledged = [o for o in history if o.outcome == OK]
        last = acknowledged[-1] if acknowledged else None
        allowed = {last.value if last else ""}
        # An operation the client never heard back from may land at any time.
        allowed |= {o.value for o in history if o.outcome == UNKNOWN}
        final = state.get(key, "")
        if final not in allowed:
            said = f"the last acknowledged {last.kind} (mark {last.value!r}, answered at " \
                   f"{last.completed:.3f})" if last else "no acknowledged write"
            verdict.violations.append(
                f"{key}: the store holds mark {final!r}; after {said}, the only marks "
                f"possible are {sorted(allowed)}")
    return verdict


def one_leader(actions: Sequence[Action]) -> Verdict:
    """Invariant 2 (module docstring)."""
    terms: dict[int, list[Action]] = defaultdict(list)
    for action in actions:
        terms[action.term].append(action)
    verdict = Verdict("one leader at a time (terms do not overlap)", len(terms))
    spans = []
    for term, acts in sorted(terms.items()):
        controllers = sorted({a.controller for a in acts})
        if len(controllers) > 1:
            verdict.violations.append(f"term {term} acted from {', '.join(controllers)}")
        acts.sort(key=lambda a: a.time)
        spans.append((term, acts[0], acts[-1]))
    for i, (older, _, older_last) in enumerate(spans):
        for newer, newer_first, _ in spans[i + 1:]:
            if older_last.time > newer_first.time + CLOCK_SLACK_S:
                verdict.violations.append(
                    f"term {older} ({older_last.controller}) acted at {older_last.time:.3f} "
                    f"({older_last.what!r}) after term {newer} ({newer_first.controller}) "
                    f"began acting at {newer_first.time:.3f} ({newer_first.what!r})")
    return verdict


def terms_in_store(writes: Sequence[Write]) -> Verdict:
    """Invariant 2, from the store's history (module docstring)."""
    verdict = Verdict("one leader at a time (store: terms never go back)",
                      len({w.term for w in writes}))
    owner: dict[int, str] = {}
    newest: Write | None = None
    for write in sorted(writes, key=lambda w: w.revision):
        known = owner.setdefault(write.term, write.controller)
        if known != write.controller:
            verdict.violations.append(f"term {write.term} wrote from {known} and from "
                                      f"{write.controller} (revision {write.revision})")
        if newest is not None and write.term < newest.term:
            verdict.violations.append(
                f"term {write.term} ({write.controller}) wrote revision {write.revision} "
                f"after term {newest.term} ({newest.controller}) wrote revision "
                f"{newest.revision}")
        if newest is None or write.term > newest.term:
            newest = write
    return verdict


def starts_within_terms(starts: Sequence[Start], actions: Sequence[Action]) -> Verdict:
    """Invariant 2, from the runtime's side: every replica process started
    (by the kernel's record of its start) before any newer term than the one
    that registered it began acting (by the logs)."""
    verdict = Verdict("one leader at a time (runtime: starts within their term)",
                      len(starts))
    began: dict[int, float] = {}
    for action in actions:
        began[action.term] = min(began.get(action.term, action.time), action.time)
    for start in starts:
        newer = [(t, at) for t, at in began.items() if t > start.term]
        if not newer:
            continue
        term, at = min(newer, key=lambda ta: ta[1])
        if start.time > at + START_SLACK_S:
            verdict.violations.append(
                f"replica {start.replica_id}, registered by term {start.term}, started at "
                f"{start.time:.3f}, after term {term} began acting at {at:.3f}")
    return verdict


def _on_path(fault: Fault, request: Request) -> bool:
    """Whether the fault's target is a process the request crossed or may have."""
    role, _, name = fault.target.partition(":")
    if role == "proxy":
        return fault.target in request.path
    if role == "replica":
        deployment = name.rsplit("/", 1)[0]
        return f"deployment:{deployment}" in request.path
    return False


def _excuses(fault: Fault, request: Request) -> bool:
    if fault.kind not in KILLING or not _on_path(fault, request):
        return False
    if fault.kind == "kill":  # in flight when the signal was sent
        if request.start - CLOCK_SLACK_S <= fault.start <= request.end + CLOCK_SLACK_S:
            return True
        return (fault.target.startswith("proxy:")
                and fault.start <= request.start <= fault.start + DEAD_PEER_S
                and not request.error.startswith(("RuntimeError: HTTP", "InvalidStatus")))
    # stopped: a request that overlapped the stop (sent to it meanwhile, the
    # proxy not knowing, it waits); the target is known by deployment only
    return request.start <= fault.end and fault.start <= request.end


def failures_excused(requests: Sequence[Request], faults: Sequence[Fault]) -> Verdict:
    """Invariant 3 (module docstring)."""
    verdict = Verdict("failed requests only in flight at a killed or stopped process",
                      len(requests))
    for request in requests:
        if request.ok or any(_excuses(f, request) for f in faults):
            continue
        during = [f"{f.kind} {f.target}" for f in faults
                  if f.start <= request.end and request.start <= f.end]
        verdict.violations.append(
            f"{request.kind} request {request.start:.3f}-{request.end:.3f} via "
            f"{', '.join(request.path)} failed ({request.error or 'no detail'}); "
            + (f"faults then: {'; '.join(during)}" if during else "no fault then"))
    return verdict


def converged(final: Final, bound_s: float) -> Verdict:
    """Invariant 4 (module docstring)."""
    verdict = Verdict(f"converged within {bound_s:g} s, nothing left over or damaged",
                      len(final.state))
    if final.converged_at is None:
        verdict.violations.append(
            f"not every deployment RUNNING at its target {final.waited_s:.0f} s after the "
            "nemesis stopped")
    elif final.converged_at - final.nemesis_end > bound_s:
        verdict.violations.append(
            f"converged {final.converged_at - final.nemesis_end:.1f} s after the nemesis "
            f"stopped (bound {bound_s:g} s)")
    verdict.violations.extend(f"left over: {item}" for item in final.leftovers)
    return verdict


def outcomes(ops: Sequence[Op]) -> dict[str, int]:
    """How the operations ended, for the report."""
    counts = {OK: 0, FAILED: 0, UNKNOWN: 0}
    for op in ops:
        counts[op.outcome] = counts.get(op.outcome, 0) + 1
    return counts
