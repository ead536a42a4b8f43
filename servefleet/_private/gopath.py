"""A GOPATH for building this repository's Go code offline (tests, benchmarks)."""

from __future__ import annotations

from pathlib import Path


def go_workspace(gopath: Path) -> tuple[Path, dict[str, str]]:
    """A GOPATH under `gopath` holding this repository at the import path
    go_package names, with Debian's Go packages beside it (GOPATH mode: no
    module proxy is reachable). Returns the repository's directory in it and
    the variables to add to the environment of `go build` / `go test` there."""
    root = Path(__file__).resolve().parents[2]  # servefleet/_private/gopath.py
    link = gopath / "src" / "github.com" / "servefleet" / "servefleet"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.symlink_to(root)
    return link, {"GO111MODULE": "off", "GOFLAGS": "",
                  "GOPATH": f"{gopath}:/usr/share/gocode",
                  "GOCACHE": str(root / ".build" / "go-cache")}
