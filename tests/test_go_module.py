"""go.mod at the repository's root: one module, github.com/servefleet/servefleet,
holding the generated API (gen/go) and the client (clients/go), resolved from
the Go module proxy (go.sum kept), tidy, for the Go this machine has, with
generated code from the pinned plugins of scripts/gen-proto, and vet-clean.
(The client's own tests run against live clusters in test_clients.py.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ROOT / "gen" / "go" / "servefleet" / "v1"


def _go(*args: str) -> subprocess.CompletedProcess:
    assert shutil.which("go"), "go is missing: see the README (Go 1.26)"
    return subprocess.run(["go", *args], cwd=ROOT, env={**os.environ, "GOFLAGS": "-mod=readonly"},
                          capture_output=True, text=True, timeout=300)


def _requirements() -> dict[str, str]:
    text = (ROOT / "go.mod").read_text()
    return dict(re.findall(r"^\s*(\S+) v(\S+)(?: // indirect)?$", text, re.M))


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def test_the_module_path_is_where_the_protos_put_the_go_package() -> None:
    module = re.search(r"^module (\S+)$", (ROOT / "go.mod").read_text(), re.M)
    assert module is not None and module.group(1) == "github.com/servefleet/servefleet"
    for proto in (ROOT / "proto" / "servefleet" / "v1").glob("*.proto"):
        package = re.search(r'option go_package = "([^";]+)', proto.read_text())
        assert package is not None and package.group(1).startswith(module.group(1) + "/"), proto


def test_go_mod_is_tidy_with_its_sums_for_the_go_here() -> None:
    assert (ROOT / "go.sum").is_file(), "go.sum is missing: run go mod tidy"
    tidy = _go("mod", "tidy", "-diff")
    assert tidy.returncode == 0, f"go.mod/go.sum are not tidy:\n{tidy.stdout}{tidy.stderr}"
    wanted = re.search(r"^go (\S+)$", (ROOT / "go.mod").read_text(), re.M)
    here = _go("env", "GOVERSION").stdout.strip()  # go1.26.8
    assert wanted is not None and _version(wanted.group(1)) <= _version(here), (
        f"go.mod wants Go {wanted.group(1)}, this machine has {here}")
    assert _version(wanted.group(1))[:2] == _version(here)[:2], (
        f"go.mod's go line ({wanted.group(1)}) is not the Go here ({here})")


def test_the_generated_code_is_from_the_pinned_plugins() -> None:
    """protoc-gen-go is protobuf's own generator, at the runtime's version in
    go.mod; protoc-gen-go-grpc at scripts/gen-proto's pin (whose
    SupportPackageIsVersion9 needs gRPC-Go 1.64+)."""
    pin = re.search(r"^PROTOC_GEN_GO_GRPC=(v\S+)$", (ROOT / "scripts" / "gen-proto").read_text(),
                    re.M)
    assert pin is not None
    message = (GENERATED / "controller.pb.go").read_text()
    service = (GENERATED / "controller_grpc.pb.go").read_text()
    protobuf = _requirements()["google.golang.org/protobuf"]
    assert f"// \tprotoc-gen-go v{protobuf}\n" in message
    assert f"// - protoc-gen-go-grpc {pin.group(1)}\n" in service
    assert "grpc.SupportPackageIsVersion9" in service
    assert _version(_requirements()["google.golang.org/grpc"]) >= (1, 64)


def test_go_vet_passes() -> None:
    out = _go("vet", "./...")
    assert out.returncode == 0, out.stdout + out.stderr
