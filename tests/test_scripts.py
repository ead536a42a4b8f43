"""The scripts a new user runs first, in a copy of the repository's layout
with stand-ins for the programs they call (a Docker CLI whose engine is
absent, a virtualenv without MkDocs), so that what each script decides to
run is recorded and nothing is installed or built."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A stand-in that records how it was called in $CALLS, then runs its body.
STANDIN = '#!/bin/bash\necho "$(basename "$0") $*" >> "$CALLS"\n'


def standin(path: Path, body: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(STANDIN + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def clone_with(tmp_path: Path, script: str) -> Path:
    """A directory laid out as the repository, holding only scripts/SCRIPT."""
    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / script, clone / "scripts" / script)
    return clone


def run(command: list[str], tmp_path: Path, path: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path, "CALLS": str(tmp_path / "calls")}
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)


def calls(tmp_path: Path) -> list[str]:
    recorded = tmp_path / "calls"
    return recorded.read_text().splitlines() if recorded.exists() else []


def test_docker_image_without_an_engine_says_how_to_start_one_and_installs_nothing(
        tmp_path) -> None:
    clone = clone_with(tmp_path, "docker-image")
    bin_dir = tmp_path / "bin"
    standin(bin_dir / "docker", "exit 1\n")  # as the CLI does when no engine answers
    for name in ("sudo", "apt-get", "debootstrap"):
        standin(bin_dir / name)
    done = run([str(clone / "scripts" / "docker-image")], tmp_path, f"{bin_dir}:/usr/bin:/bin")
    assert done.returncode == 1
    assert "no Docker engine answers" in done.stderr
    assert "scripts/docker-engine start" in done.stderr
    assert calls(tmp_path) == ["docker info"]  # no apt-get, no debootstrap, no build
    assert not (clone / ".build").exists()


def test_docs_installs_mkdocs_into_a_virtualenv_without_it_then_serves(tmp_path) -> None:
    """After scripts/demo the virtualenv has servefleet but not MkDocs."""
    clone = clone_with(tmp_path, "docs")
    venv_bin = clone / ".venv" / "bin"
    # The import check fails until pip has run; pip installs a stand-in mkdocs.
    standin(venv_bin / "python", f"""\
if [ "$1" = -c ]; then [ -x {venv_bin}/mkdocs ]; exit; fi
printf '%s' '{STANDIN}' > {venv_bin}/mkdocs && chmod +x {venv_bin}/mkdocs
""")
    serve = [str(clone / "scripts" / "docs"), "serve"]
    path = "/usr/bin:/bin"
    first = run(serve, tmp_path, path)
    assert first.returncode == 0, first.stderr
    assert "installing MkDocs" in first.stderr
    assert calls(tmp_path) == [
        "python -c import mkdocs, material, mkdocstrings_handlers.python",
        "python -m pip install -q -e .[docs]",
        "mkdocs serve --no-strict --dev-addr 127.0.0.1:8001"]
    (tmp_path / "calls").unlink()
    again = run(serve, tmp_path, path)
    assert again.returncode == 0 and "installing" not in again.stderr
    assert [c.split()[:2] for c in calls(tmp_path)] == [["python", "-c"], ["mkdocs", "serve"]]
    wrong = run([str(clone / "scripts" / "docs"), "publish"], tmp_path, path)
    assert wrong.returncode == 2 and "usage: scripts/docs [build|serve]" in wrong.stderr
