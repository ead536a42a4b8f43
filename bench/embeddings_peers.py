"""bench/embeddings.py's peers: their venvs, and how each is started (the
command, its environment, the bodies wrk sends and the path): Ray Serve
(bench/embeddings_ray.py) and BentoML (bench/embeddings_bento.py, behind
bench/embeddings_bento_run.py, which prints "READY <port>" once `bentoml
serve` answers).

    python3 bench/embeddings_peers.py --setup   (from PyPI, into .build/bench-ray
                                                 and .build/bench-bentoml)

Each venv holds the peer and the model's run-time libraries (onnxruntime,
tokenizers, numpy), never servefleet; bench/embeddings.py uses them when they
exist (or the Pythons named by --ray-python, --bentoml-python).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENVS = HERE.parent / ".build"
PEERS = {"ray": "ray[serve]==2.60.0", "bentoml": "bentoml==1.4.40"}
RUNTIME = ("onnxruntime", "tokenizers", "numpy")


def venv_python(peer: str) -> str:
    """The peer's venv Python when it was set up, else ""."""
    python = VENVS / f"bench-{peer}" / "bin" / "python"
    return str(python) if python.exists() else ""


def setup() -> None:
    for peer, requirement in PEERS.items():
        venv = VENVS / f"bench-{peer}"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", requirement, *RUNTIME],
                       check=True)
        print(f"{venv}: {requirement}")


def ray_peer(python: str, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    return [python, str(HERE / "embeddings_ray.py")], env


def bentoml_peer(python: str, env: dict[str, str], texts: list[str]
                 ) -> tuple[list[str], dict[str, str], list[str], str]:
    bodies = [json.dumps({"texts": [t]}) for t in texts]
    return [python, str(HERE / "embeddings_bento_run.py")], env, bodies, "/embed"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setup", action="store_true", help="make the peers' venvs")
    if parser.parse_args().setup:
        setup()
