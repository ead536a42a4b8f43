"""`servefleet build`: the config file of applications written in code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from servefleet._private.configuration.config_file import load_config

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(*args: str, cwd: Path = EXAMPLES) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servefleet", "build", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_the_file_holds_every_deployment_and_loads_back(tmp_path) -> None:
    out = tmp_path / "conf" / "apps.yaml"
    out.parent.mkdir()
    done = run("sentiment:app", "compose:app", "-o", str(out))
    assert done.returncode == 0, done.stderr
    request = load_config(str(out))
    sentiment, compose = request.applications
    assert (sentiment.name, sentiment.route_prefix, compose.route_prefix) == (
        "sentiment", "/sentiment", "/compose")
    # working_dir is relative to the file, and loads back as the examples folder.
    assert sentiment.runtime.working_dir == str(EXAMPLES)
    model = sentiment.deployments[0]
    assert model.name == "SentimentModel" and model.replica_config.num_replicas == 2
    assert json.loads(model.replica_config.user_config_json) == {"threshold": 1}
    assert [d.name for d in compose.deployments] == ["Front", "WordCounter"]
    one = run("sentiment:app")
    assert one.returncode == 0 and "route_prefix" not in one.stdout  # one app: served at "/"


def test_what_does_not_load_is_named_without_a_traceback() -> None:
    missing = run("no_such_module:app")
    assert missing.returncode == 1 and "no_such_module:app: ModuleNotFoundError" in missing.stderr
    assert "Traceback" not in missing.stderr
    bad_dir = run("sentiment:app", "--working-dir", "/nope")
    assert bad_dir.returncode == 2 and "--working-dir /nope: no such directory" in bad_dir.stderr
