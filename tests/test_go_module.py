"""go.mod: Go users on modules `go get` the API and the client; its
requirements are the versions the generated code is for, and the GOPATH
build (what works offline here) still vets clean."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from servefleet._private.gopath import go_workspace

ROOT = Path(__file__).resolve().parent.parent


def _requirements() -> dict[str, str]:
    text = (ROOT / "go.mod").read_text()
    return dict(re.findall(r"^\s*(\S+) v(\S+)$", text, re.M))


def _debian_version(package: str) -> str:
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package],
                         capture_output=True, text=True, check=True).stdout
    return re.sub(r"^\d+:", "", out).split("-")[0].split("+")[0]


def test_the_module_path_is_where_the_protos_put_the_go_package() -> None:
    module = re.search(r"^module (\S+)$", (ROOT / "go.mod").read_text(), re.M)
    assert module is not None and module.group(1) == "github.com/servefleet/servefleet"
    for proto in (ROOT / "proto" / "servefleet" / "v1").glob("*.proto"):
        package = re.search(r'option go_package = "([^";]+)', proto.read_text())
        assert package is not None and package.group(1).startswith(module.group(1) + "/"), proto


def test_the_requirements_are_the_generators_versions() -> None:
    assert _requirements() == {
        "google.golang.org/grpc": _debian_version("golang-google-grpc-dev"),
        "google.golang.org/protobuf": _debian_version("golang-google-protobuf-dev")}
    # protoc-gen-go is protobuf's own generator: the runtime it writes for.
    assert _debian_version("protoc-gen-go") == _requirements()["google.golang.org/protobuf"]
    # Code from protoc-gen-go-grpc asserts the grpc API it needs (v7: gRPC-Go 1.32+).
    generated = (ROOT / "gen/go/servefleet/v1/controller_grpc.pb.go").read_text()
    assert "grpc.SupportPackageIsVersion7" in generated
    major, minor, _ = _requirements()["google.golang.org/grpc"].split(".")
    assert (int(major), int(minor)) >= (1, 32)


def test_go_vet_passes_in_gopath_mode(tmp_path) -> None:
    assert shutil.which("go"), "go is missing: run scripts/setup"
    repository, go_env = go_workspace(tmp_path / "gopath")
    out = subprocess.run(["go", "vet", "./gen/go/...", "./clients/go/..."], cwd=repository,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **go_env},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
