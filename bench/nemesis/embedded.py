"""The embedded side of a chaos run: one controller on the sqlite store
(servefleet up's default) whose file lives on a small tmpfs, one proxy, one
deployment (embedded/Echo, at /echo). The nemesis's disk-full fault fills
that tmpfs for a while: a Deploy meanwhile must be refused with an error
that says so, requests through its proxy must go on, a Deploy after the
space is back must work, and the store file must pass sqlite's integrity
check at the end.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

from nemesis.cluster import CHAOS_APPS, shut_down
from nemesis.disk_full import DiskFiller, small_tmpfs
from nemesis.history import FAILED, OK, Op
from nemesis.operations import Operations, final_state
from servefleet._private.testing import ControllerProcess, ProxyProcess
from servefleet.client import ControllerClient

KEY = "embedded/Echo"


class EmbeddedSide:
    def __init__(self, work: Path) -> None:
        self.work = work
        self._mounts = contextlib.ExitStack()
        self.disk = self._mounts.enter_context(small_tmpfs(work / "embedded-disk", "4m"))
        self.filler = DiskFiller(self.disk)
        (work / "embedded").mkdir(exist_ok=True)
        # Its code is the bench's own, wherever the run was started from.
        self.controller = ControllerProcess(f"sqlite://{self.disk}/state.db",
                                            cluster="chaos-embedded", log_dir=work / "embedded",
                                            extra_args=["--allow-working-dir", CHAOS_APPS])
        self.proxy: ProxyProcess | None = None
        self.client: ControllerClient | None = None
        self.ops: Operations | None = None
        # What the disk-full faults broke of their promises (stop() reports them).
        self.broken: list[str] = []

    def start(self, seed: int) -> EmbeddedSide:
        self.controller.start()
        self.proxy = ProxyProcess([self.controller.address], log_dir=self.work / "embedded")
        self.proxy.start()
        self.client = ControllerClient([self.controller.address], timeout=15)
        self.ops = Operations(self.client, seed)
        self.ops.deploy(KEY, "v1", 1)
        return self

    @property
    def url(self) -> str:
        assert self.proxy is not None
        return self.proxy.url

    def fill_for(self, hold: float) -> str:
        """The fault: the disk full for `hold` seconds, a Deploy tried in the
        middle and one after; a note of what the Deploys got."""
        assert self.ops is not None
        self.filler.fill()
        try:
            time.sleep(hold / 2)
            self.ops.deploy(KEY, "v1", 1)
            refused = self.ops.ops[-1]
            time.sleep(hold / 2)
        finally:
            self.filler.free()
        self.ops.deploy(KEY, "v1", 1)
        after = self.ops.ops[-1]
        if refused.outcome != FAILED or "disk is full" not in refused.error:
            self.broken.append(f"a deploy on the full disk got {refused.outcome} "
                               f"({refused.error or 'no error'}), not a refusal naming the disk")
        if after.outcome != OK:
            self.broken.append(f"a deploy after the disk was freed: {after.error}")
        return (f"a deploy on the full disk: {refused.outcome} ({refused.error[:90]}); "
                f"after: {after.outcome}")

    def recorded_ops(self) -> list[Op]:
        return self.ops.ops if self.ops else []

    def final_state(self) -> dict[str, str]:
        assert self.client is not None
        return final_state(self.client.list())

    def stop(self) -> list[str]:
        """Stop everything; what is wrong with the store file afterwards."""
        shut_down(self.client, self.proxy, self.controller)
        problems = [f"embedded store: {b}" for b in self.broken]
        try:
            with contextlib.closing(sqlite3.connect(self.disk / "state.db")) as db:
                verdict = db.execute("PRAGMA integrity_check").fetchone()[0]
            if verdict != "ok":
                problems.append(f"embedded store: integrity_check says {verdict}")
        except sqlite3.Error as e:
            problems.append(f"embedded store: cannot be read: {e}")
        self._mounts.close()
        return problems

