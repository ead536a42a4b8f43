"""The encoder's ONNX file, built once per set of weights and kept on disk.

    onnx_file(model_dir) -> Path

The file is `<cache>/embeddings/<hash>.onnx`, where <hash> is the SHA-256 of
the model's weights, its config files and the source of bert_onnx.py (the
builder), so new weights or a changed builder never meet an old file.
<cache> is $SERVEFLEET_CACHE_DIR, else $XDG_CACHE_HOME/servefleet, else
~/.cache/servefleet. Old files are not removed (each is the model's size).

Replicas that start together may build at once: each writes a temporary
file in the same directory and renames it into place (atomic on POSIX),
so a reader sees a whole file or none, and the last rename wins with the
same bytes. Building all-MiniLM-L6-v2 takes about a second and 90 MB.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

from servefleet._private.embeddings import bert_onnx
from servefleet._private.embeddings.model_files import (
    WEIGHTS,
    read_config,
    read_weights,
)

logger = logging.getLogger(__name__)

CONFIG_FILES = ("config.json", "sentence_bert_config.json", "modules.json",
                "1_Pooling/config.json")


def cache_dir() -> Path:
    """Where servefleet keeps what it builds (see the module docstring)."""
    if os.environ.get("SERVEFLEET_CACHE_DIR"):
        return Path(os.environ["SERVEFLEET_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "servefleet"


def weights_key(model_dir: Path) -> str:
    """The hash that names the model's ONNX file (hex, 24 characters)."""
    digest = hashlib.sha256(Path(bert_onnx.__file__).read_bytes())
    with open(model_dir / WEIGHTS, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    for name in CONFIG_FILES:
        path = model_dir / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b""))
    return digest.hexdigest()[:24]


def build_bytes(model_dir: Path) -> bytes:
    """The serialized ONNX model of `model_dir` (no cache)."""
    return bert_onnx.build_model(read_config(model_dir),
                                 read_weights(model_dir)).SerializeToString()


def onnx_file(model_dir: Path, cache: Path | None = None) -> Path:
    """The model's ONNX file, built into the cache when missing. A cache that
    cannot be written (a replica's user without a home) falls back to the
    system's temporary directory, with a warning."""
    name = f"{weights_key(model_dir)}.onnx"
    folder = (cache or cache_dir()) / "embeddings"
    if (folder / name).exists():
        return folder / name
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        fallback = Path(tempfile.gettempdir()) / f"servefleet-{os.getuid()}" / "embeddings"
        logger.warning("cannot write the cache %s (%s); building into %s", folder, e, fallback)
        folder = fallback
        if (folder / name).exists():
            return folder / name
        folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    logger.info("building the ONNX encoder of %s into %s", model_dir, path)
    data = build_bytes(model_dir)
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".building-", suffix=".onnx")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
