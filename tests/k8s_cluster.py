"""scripts/k8s's Kubernetes cluster for the tests, once per pytest session
(the `k8s_cluster` fixture, registered in conftest.py).

The commands are built (cached) and the cluster started once, with every
image the tests need loaded into both nodes: the servefleet image and a
small etcd image for the Helm chart's StatefulSet. A cluster this checkout
already runs (a developer's) is used as it is, its images loaded again only
when they changed, and left running. A cluster another checkout runs is
refused by `scripts/k8s start`: the tests skip, and nothing is stopped (the
namespaces and cgroups have machine-wide names). A cluster started here is,
at the end of the session, checked once more (a second start refused, an
unknown node named, kill-node leaving no process of the node), then
stopped, and nothing of it may be left.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "scripts" / "k8s"
RUN = ROOT / ".build" / "k8s" / "run"
BIN = ROOT / ".build" / "k8s" / "bin"
KUBECTL = BIN / "kubectl"
KUBECONFIG = RUN / "admin.kubeconfig"
IMAGE = os.environ.get("SERVEFLEET_TEST_IMAGE", "servefleet:latest")
# Debian's etcd (as the control plane runs it) on an empty image, for the chart's StatefulSet.
ETCD_IMAGE = "servefleet-k8s-etcd:test"
NODES = ("node-a", "node-b")


def run(*args: str | Path, input: str | None = None, check: bool = True,
        timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """A command with the cluster's KUBECONFIG; asserts it succeeded unless not `check`."""
    env = {**os.environ, "KUBECONFIG": str(KUBECONFIG)}
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, input=input,
                          timeout=timeout, env=env)
    if check:
        assert done.returncode == 0, f"{' '.join(map(str, args))}:\n{done.stderr[-3000:]}"
    return done


def kubectl(*args: str | Path, input: str | None = None, check: bool = True,
            timeout: float = 120) -> str:
    return run(KUBECTL, *args, input=input, check=check, timeout=timeout).stdout


def left_in(namespace: str, *more_kinds: str) -> list[str]:
    """KIND/NAME of what a namespace holds besides what Kubernetes puts in
    every namespace (its default ServiceAccount, its CA's ConfigMap); kinds
    beyond the built-in ones (serveapplications) by name."""
    kinds = ",".join(("pods,services,deployments,statefulsets,secrets,configmaps,"
                      "serviceaccounts,roles,rolebindings,persistentvolumeclaims,jobs",
                      *more_kinds))
    listed = json.loads(kubectl("-n", namespace, "get", kinds, "-o", "json"))["items"]
    own = {("ServiceAccount", "default"), ("ConfigMap", "kube-root-ca.crt")}
    return [f"{o['kind']}/{o['metadata']['name']}" for o in listed
            if (o["kind"], o["metadata"]["name"]) not in own]


def running_here() -> bool:
    """Whether this checkout's cluster runs, every process of it."""
    status = subprocess.run([str(K8S), "status"], capture_output=True, text=True, timeout=60)
    lines = status.stdout.split("\n")
    return (status.returncode == 0 and KUBECONFIG.exists()
            and any(line.endswith(": running") for line in lines)
            and not any(line.endswith(": stopped") for line in lines))


def has_image(image: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image],
                          capture_output=True).returncode == 0


def etcd_image() -> bool:
    """ETCD_IMAGE, built once: the etcd binary and the libc files it links
    (ldd), 24 MB for the nodes to load instead of a second servefleet image.
    False when Debian's etcd is not installed."""
    if has_image(ETCD_IMAGE):
        return True
    etcd = shutil.which("etcd")
    if etcd is None:
        return False
    linked = subprocess.run(["ldd", etcd], capture_output=True, text=True).stdout
    files = [etcd, *re.findall(r"(/\S+) \(0x", linked)]
    with tempfile.TemporaryDirectory() as work:
        lines = ["FROM scratch", "COPY etcd /usr/local/bin/etcd", "ENV PATH=/usr/local/bin"]
        shutil.copy(etcd, Path(work) / "etcd")
        for index, path in enumerate(files[1:]):
            shutil.copy(path, Path(work) / f"lib{index}")
            lines.append(f"COPY lib{index} {path}")
        (Path(work) / "Dockerfile").write_text("\n".join(lines) + "\n")
        subprocess.run(["docker", "build", "-q", "-t", ETCD_IMAGE, work], check=True,
                       capture_output=True, timeout=600, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    return True


def leftovers() -> list[str]:
    """What a stopped cluster left on the machine (nothing, if stop works)."""
    found = [f"netns {n}" for n in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                   text=True).stdout.split() if "sfk8s" in n]
    found += [f"cgroup {p}" for p in Path("/sys/fs/cgroup").glob("*/sfk8s-*")]
    found += [f"mount {line.split()[4]}" for line in
              Path("/proc/self/mountinfo").read_text().splitlines() if "/.build/k8s/" in line]
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes() if proc.name.isdigit() else b""
            if b"/.build/k8s/" in argv or b"k8scluster/relay.py" in argv:
                found.append(f"process {proc.name}")
        except OSError:
            pass
    found += [f"CNI result {p}" for p in Path("/var/lib/cni/results").glob("servefleet-k8s-*")]
    if RUN.exists():
        found.append(f"directory {RUN}")
    return found


def refusals_and_a_killed_node() -> None:
    """A second start is refused, a node that does not exist is named, and
    kill-node leaves no process of the node (the other node's run on)."""
    again = subprocess.run([str(K8S), "start"], capture_output=True, text=True, timeout=60)
    assert again.returncode != 0 and "a cluster is running already" in again.stderr
    unknown = subprocess.run([str(K8S), "kill-node", "node-z"], capture_output=True,
                             text=True, timeout=60)
    assert "no node 'node-z' in this cluster (nodes: node-a, node-b)" in unknown.stderr
    killed = subprocess.run([str(K8S), "kill-node", "node-b"], capture_output=True, text=True,
                            timeout=60)
    assert killed.returncode == 0, killed.stderr
    tree = next(p for p in (Path("/sys/fs/cgroup/pids/sfk8s-node-b"),
                            Path("/sys/fs/cgroup/sfk8s-node-b")) if p.is_dir())
    assert [f.read_text() for f in tree.rglob("cgroup.procs") if f.read_text().strip()] == []
    status = subprocess.run([str(K8S), "status"], capture_output=True, text=True, timeout=60)
    assert "kubelet-node-b: stopped" in status.stdout
    assert "kubelet-node-a: running" in status.stdout, status.stdout


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[bool]:
    """The running cluster; True when the servefleet image is loaded in it
    (with it the etcd image, when Debian's etcd is installed)."""
    if os.geteuid() != 0:
        pytest.skip("scripts/k8s needs root (network namespaces, cgroups, mounts)")
    built = subprocess.run([str(K8S), "build"], capture_output=True, text=True, timeout=3300)
    if built.returncode:
        pytest.skip(f"Kubernetes and Helm could not be built: {built.stderr[-2000:]}")
    images = [IMAGE] if has_image(IMAGE) else []
    if images and etcd_image():
        images.append(ETCD_IMAGE)
    if running_here():
        if images:
            run(K8S, "load", *images, timeout=600)
        yield bool(images)
        return
    began = time.monotonic()
    started = subprocess.run([str(K8S), "start", *(f"--image={i}" for i in images)],
                             capture_output=True, text=True, timeout=900)
    if "a cluster is running already" in started.stderr:
        # Another checkout's, or this one's with a part stopped (running_here
        # said no): not ours to use or stop.
        pytest.skip("a Kubernetes cluster runs on this machine, but not every process of "
                    "this checkout's (scripts/k8s status)")
    # A start that fails stops what it started itself.
    assert started.returncode == 0, started.stderr[-4000:]
    print(f"scripts/k8s build: {built.stdout.strip()}; start: {time.monotonic() - began:.0f} s")
    try:
        yield bool(images)
        refusals_and_a_killed_node()
    finally:
        stopped = subprocess.run([str(K8S), "stop"], capture_output=True, text=True, timeout=300)
        assert stopped.returncode == 0, stopped.stderr[-3000:]
        assert leftovers() == []
