"""The Kubernetes commands, built from tools/k8s/go.mod (k8s.io/kubernetes at
one release, its staging modules mapped to the matching v0.x), the pause
image, built from tools/k8s/pause, and Helm, from tools/k8s/helm/go.mod (a
module of its own: Helm's dependencies are newer than Kubernetes' pins).
Go's build cache (~/.cache/go-build) keeps a rebuild short; a stamp of what
went in (go.mod, go.sum, the pause source, the Go version) skips even the
link step when nothing changed."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

from .layout import BIN, BUILD, COMMANDS, MODULE, PAUSE_IMAGE

GO = shutil.which("go") or "/usr/local/go/bin/go"
STAMP = BIN / ".stamp"
HELM_MODULE = MODULE / "helm"
HELM_STAMP = BIN / ".stamp-helm"
PAUSE_TAR = BUILD / "images" / "pause.tar"


def _go(*args: str, module: Path = MODULE) -> str:
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"}
    done = subprocess.run([GO, *args], cwd=module, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"scripts/k8s: go {' '.join(args[:2])} failed:\n{done.stderr[-4000:]}")
    return done.stdout


def _required(module_dir: Path, module: str) -> str:
    """The release of `module` that module_dir/go.mod requires."""
    found = re.search(rf"^(?:require |\t){re.escape(module)} (v\S+)",
                      (module_dir / "go.mod").read_text(), re.MULTILINE)
    if not found:
        raise SystemExit(f"scripts/k8s: {module_dir.relative_to(MODULE.parent.parent)}/go.mod "
                         f"requires no {module}")
    return found.group(1)


def kubernetes_version() -> str:
    """The k8s.io/kubernetes release go.mod requires (v1.37.2)."""
    return _required(MODULE, "k8s.io/kubernetes")


def _ldflags() -> str:
    """-s -w (no symbols: smaller binaries) and the version the commands
    report (what Kubernetes' own build stamps in; `go build` alone says
    v0.0.0-master)."""
    version = kubernetes_version()
    major, minor = version.lstrip("v").split(".")[:2]
    stamps = [f"-X k8s.io/{pkg}.{name}={value}"
              for pkg in ("component-base/version", "client-go/pkg/version")
              for name, value in (("gitVersion", version), ("gitMajor", major),
                                  ("gitMinor", minor), ("gitTreeState", "clean"))]
    return " ".join(["-s", "-w", *stamps])


def _inputs() -> str:
    digest = hashlib.sha256(_go("env", "GOVERSION").encode() + _ldflags().encode())
    for name in ("go.mod", "go.sum", "pause/main.go"):
        digest.update((MODULE / name).read_bytes())
    return digest.hexdigest()


def build(force: bool = False) -> float:
    """Build whatever is missing or stale; seconds taken (0: all current)."""
    if not Path(GO).exists() and not shutil.which("go"):
        raise SystemExit("scripts/k8s: no Go found (scripts/setup installs it)")
    return _build_kubernetes(force) + _build_helm(force)


def helm_version() -> str:
    """The helm.sh/helm/v4 release tools/k8s/helm/go.mod requires."""
    return _required(HELM_MODULE, "helm.sh/helm/v4")


def _build_helm(force: bool) -> float:
    """Helm (cmd/helm), stamped with its version as Helm's own build does."""
    ldflags = f"-s -w -X helm.sh/helm/v4/internal/version.version={helm_version()}"
    digest = hashlib.sha256(_go("env", "GOVERSION").encode() + ldflags.encode())
    for name in ("go.mod", "go.sum"):
        digest.update((HELM_MODULE / name).read_bytes())
    wanted = digest.hexdigest()
    if (not force and HELM_STAMP.exists() and HELM_STAMP.read_text() == wanted
            and (BIN / "helm").exists()):
        return 0.0
    began = time.monotonic()
    BIN.mkdir(parents=True, exist_ok=True)
    _go("build", "-trimpath", f"-ldflags={ldflags}", "-o", f"{BIN}/helm",
        "helm.sh/helm/v4/cmd/helm", module=HELM_MODULE)
    HELM_STAMP.write_text(wanted)
    return time.monotonic() - began


def _build_kubernetes(force: bool) -> float:
    wanted = _inputs()
    binaries = [BIN / name for name in (*COMMANDS, "pause")]
    if (not force and STAMP.exists() and STAMP.read_text() == wanted
            and all(b.exists() for b in binaries) and PAUSE_TAR.exists()):
        return 0.0
    began = time.monotonic()
    BIN.mkdir(parents=True, exist_ok=True)
    packages = [f"k8s.io/kubernetes/cmd/{name}" for name in COMMANDS]
    _go("build", "-trimpath", f"-ldflags={_ldflags()}", "-o", f"{BIN}/", *packages, "./pause")
    _pause_image(BIN / "pause")
    STAMP.write_text(wanted)
    return time.monotonic() - began


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _pause_image(binary: Path) -> None:
    """A one-layer image of `binary` as /pause, in docker save's format
    (what `ctr images import` reads)."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        _add(tar, "pause", binary.read_bytes(), 0o755)
    layer_bytes = layer.getvalue()
    diff_id = hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
    }).encode()
    config_id = hashlib.sha256(config).hexdigest()
    manifest = json.dumps([{"Config": f"{config_id}.json", "RepoTags": [PAUSE_IMAGE],
                            "Layers": [f"{diff_id}/layer.tar"]}]).encode()
    PAUSE_TAR.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(PAUSE_TAR, "w") as tar:
        _add(tar, f"{config_id}.json", config)
        _add(tar, f"{diff_id}/layer.tar", layer_bytes)
        _add(tar, "manifest.json", manifest)
