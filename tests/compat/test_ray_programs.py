"""Programs written the way Ray Serve's documentation writes them, with only
servefleet's imports (`from servefleet import serve`), each run as a script
in a subprocess of its own: the user's experience of the import swap.

Each script asserts what Ray would give and prints OK last. They serve HTTP
on 127.0.0.1:8000 as Ray does (one at a time: pytest runs them in order).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.serial]
PROGRAMS = Path(__file__).parent / "programs"


@pytest.mark.parametrize("script", sorted(p.name for p in PROGRAMS.glob("*.py")))
def test_a_ray_serve_program_runs_with_only_the_import_swapped(script: str,
                                                               tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVEFLEET_")}
    done = subprocess.run([sys.executable, str(PROGRAMS / script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert done.stdout.strip().endswith("OK"), output[-4000:]
