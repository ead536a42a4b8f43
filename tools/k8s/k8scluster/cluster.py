"""scripts/k8s start and stop: the whole cluster, in order, and everything
it made taken away again."""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from . import api, build, control, netns, node, pki, procs
from .build import PAUSE_TAR
from .layout import (
    APISERVER_PORT,
    BIN,
    CNI_BIN,
    CONTROL_NETNS,
    NODES,
    PREFIX,
    RUN,
    Node,
)

ADMIN = RUN / "admin.kubeconfig"
RUN_SIZE = "8g"  # the tmpfs's limit; a start with the servefleet image uses about 2 GB
# Each tool and the Debian package that has it.
NEEDS = {"containerd": "containerd", "ctr": "containerd", "runc": "runc", "etcd": "etcd-server",
         "nsenter": "util-linux", "ip": "iproute2", "nft": "nftables"}


def _say(message: str) -> None:
    print(f"scripts/k8s: {message}", file=sys.stderr, flush=True)


def preflight() -> None:
    """Name what is missing before anything starts."""
    if os.geteuid() != 0:
        raise SystemExit("scripts/k8s: needs root (network namespaces, cgroups, mounts)")
    missing = sorted({pkg for tool, pkg in NEEDS.items() if shutil.which(tool) is None})
    if not (CNI_BIN / "bridge").exists():
        missing.append("containernetworking-plugins")
    if missing:
        raise SystemExit(f"scripts/k8s: missing Debian packages: {' '.join(missing)} "
                         "(scripts/setup installs them)")


def running() -> bool:
    """A cluster runs: a process of this checkout's, or any process in the
    cluster's namespaces or node cgroups (another checkout's cluster).
    Namespaces and cgroups without a process in them are what a run killed
    without its stop left (a machine's session ended): removed here."""
    if any(procs.alive(n) for n in _all_names()):
        return True
    inodes = set()
    for ns in netns.existing():
        try:
            inodes.add(os.stat(f"/run/netns/{ns}").st_ino)
        except OSError:
            pass
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and os.stat(proc / "ns" / "net").st_ino in inodes:
                return True
        except OSError:
            pass
    if any(procs.cgroup_pids(each.cgroup) for each in NODES):
        return True
    if inodes:
        _say(f"removing what a cluster killed without a stop left: {netns.existing()}")
        netns.remove()
    for each in NODES:
        procs.remove_cgroup(each.cgroup)
    return False


def _all_names() -> list[str]:
    names = ["relay", *control.NAMES]
    for each in NODES:
        names += node.names(each)
    return names


def start(images: list[Path], port: int = 0) -> None:
    preflight()
    if running():
        raise SystemExit("scripts/k8s: a cluster is running already (scripts/k8s stop first)")
    began = time.monotonic()
    took = build.build()
    _say(f"binaries: {f'built in {took:.0f} s' if took else 'current'} ({BIN})")
    try:
        _start(images, port, began)
    except BaseException:
        _say(f"start failed: stopping what started (logs: {procs.LOGS})")
        stop()
        raise


def _start(images: list[Path], port: int, began: float) -> None:
    _unmount_all()
    if RUN.exists():
        shutil.rmtree(RUN)
    shutil.rmtree(procs.LOGS, ignore_errors=True)
    RUN.mkdir(parents=True)
    # All state in memory: unpacking an image and deleting it again is most of
    # a start and a stop, and a tmpfs makes both quick (and the stop one umount).
    netns.run("mount", "-t", "tmpfs", "-o", f"size={RUN_SIZE},mode=0755", "sfk8s-run", str(RUN))
    (RUN / "control").mkdir()
    pki.make_all()
    netns.create()
    control.start_etcd()
    control.start_apiserver()
    listener = socket.create_server(("127.0.0.1", port))
    api.ADDRESS.write_text(f"127.0.0.1:{listener.getsockname()[1]}")
    procs.start("relay", [sys.executable, str(Path(__file__).with_name("relay.py")),
                          str(listener.fileno()), "127.0.0.1", str(APISERVER_PORT)],
                netns=CONTROL_NETNS, pass_fds=(listener.fileno(),))
    listener.close()
    pki.kubeconfig(ADMIN, api.server(), "admin")
    api.wait("kube-apiserver ready", api.ready, 90)
    control.start_managers()
    _say(f"control plane ready in {time.monotonic() - began:.0f} s; starting the nodes")
    for each in NODES:
        node.start_containerd(each)
    for each in NODES:
        api.wait(f"containerd of {each.name}", lambda n=each: _containerd_up(n), 30)
    # Unpacking is most of a start: both nodes at once. Before the kubelets
    # start: an unpack's temporary mounts of the tmpfs confuse a starting
    # kubelet's look for its file system ("Failed to start ContainerManager").
    with concurrent.futures.ThreadPoolExecutor(len(NODES)) as pool:
        list(pool.map(lambda n: [node.import_image(n, t) for t in [PAUSE_TAR, *images]],
                      NODES))
    if images:
        _say(f"images loaded: {', '.join(t.name for t in images)}")
    for each in NODES:
        node.start_kubelet(each)
    names = [n.name for n in NODES]
    api.wait("nodes Ready", lambda: api.nodes_not_ready(names), 120)
    _say(f"cluster ready in {time.monotonic() - began:.0f} s: nodes {', '.join(names)}")
    print(f"export KUBECONFIG={ADMIN}\nexport PATH={BIN}:$PATH")


def _containerd_up(each: Node) -> str | None:
    try:
        node.ctr(each, "version")
    except RuntimeError as e:
        return str(e)
    return None


def export_image(image: str) -> Path:
    """Docker's `image`, saved to a tarball for the nodes' containerd (saved
    again only when the image changed)."""
    inspected = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", image],
                               capture_output=True, text=True)
    if inspected.returncode:
        raise SystemExit(f"scripts/k8s: no Docker image {image} "
                         f"({inspected.stderr.strip()}): build it first (scripts/docker-image)")
    path = RUN.parent / "images" / (image.replace("/", "_").replace(":", "_") + ".tar")
    stamp = path.with_suffix(".id")
    if path.exists() and stamp.exists() and stamp.read_text() == inspected.stdout:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["docker", "save", "-o", str(path), image], capture_output=True,
                          text=True)
    if done.returncode:
        raise SystemExit(f"scripts/k8s: docker save {image} failed: {done.stderr.strip()}")
    stamp.write_text(inspected.stdout)
    return path


def load(tarballs: list[Path]) -> None:
    """Images (export_image's tarballs) loaded into the running cluster's
    nodes; one this command loaded before, unchanged, is not loaded again."""
    if not running():
        raise SystemExit("scripts/k8s: no cluster runs (scripts/k8s start --image ... loads "
                         "images as it starts)")

    def into(each: Node) -> None:
        for tarball in tarballs:
            image_id = tarball.with_suffix(".id").read_text()
            marker = each.dir / "loaded" / tarball.name
            if marker.exists() and marker.read_text() == image_id:
                continue
            node.import_image(each, tarball)
            marker.parent.mkdir(exist_ok=True)
            marker.write_text(image_id)

    with concurrent.futures.ThreadPoolExecutor(len(NODES)) as pool:
        list(pool.map(into, NODES))
    _say(f"images loaded: {', '.join(t.name for t in tarballs)}")


def kill_node(name: str) -> None:
    """Every process of node `name` killed at once (kubelet, containerd,
    kube-proxy, shims, Pods), as a machine that loses power."""
    from .layout import node as find
    each = find(name)
    procs.kill_cgroup(each.cgroup)
    procs.forget(node.names(each))


def start_node(name: str) -> None:
    """Node `name`, killed by kill_node, started again: its containerd and
    kubelet (its state, images and Pod network kept), until it is Ready."""
    from .layout import node as find
    each = find(name)
    if not any(procs.alive(n) for n in control.NAMES):
        raise SystemExit("scripts/k8s: no cluster of this checkout runs (scripts/k8s start)")
    if any(procs.alive(n) for n in node.names(each)) or procs.cgroup_pids(each.cgroup):
        raise SystemExit(f"scripts/k8s: {name} runs (kill-node {name} first)")
    node.start_containerd(each)
    api.wait(f"containerd of {name}", lambda: _containerd_up(each), 30)
    node.start_kubelet(each)
    api.wait(f"{name} Ready", lambda: api.nodes_not_ready([name]), 120)
    _say(f"{name} started again")


def _mounts_under(top: Path) -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(top) or point.startswith(f"{top}/"):
            points.append(point)
    return points


def _unmount_all() -> None:
    """Unmount what the nodes mounted under RUN (overlays, shm, netns, Pod
    volumes), then RUN's tmpfs itself."""
    for point in sorted(_mounts_under(RUN), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)
    if left := _mounts_under(RUN):
        raise RuntimeError(f"still mounted under {RUN}: {left}")


def _sandboxes(each: Node) -> list[str]:
    found = each.dir / "containerd" / "state" / "io.containerd.grpc.v1.cri" / "sandboxes"
    return [p.name for p in found.iterdir()] if found.is_dir() else []


def stop() -> None:
    """Stop everything start started; leave nothing behind. The namespaces
    and cgroups have fixed names: when this checkout started nothing (no
    state, no process of its) while a cluster runs, it is another
    checkout's, and left alone."""
    if not RUN.exists() and not any(procs.alive(n) for n in _all_names()) and running():
        raise SystemExit("scripts/k8s: the cluster that runs is not this checkout's "
                         f"(no {RUN}): not stopping it")
    procs.stop([f"{n}-{each.name}" for each in NODES for n in ("kubelet", "kube-proxy")])
    sandboxes = [sandbox for each in NODES for sandbox in _sandboxes(each)]
    for each in NODES:
        procs.kill_cgroup(each.cgroup)
        procs.forget(node.names(each))
    procs.stop(["relay", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"])
    _unmount_all()
    for each in NODES:
        procs.remove_cgroup(each.cgroup)
    netns.remove()
    # libcni keeps each attachment's result here (not configurable in containerd 1.6).
    # (NETWORK-ID-eth0, and cni-loopback-ID-lo for containerd's own loopback).
    results = Path("/var/lib/cni/results")
    if results.is_dir():
        for cached in results.iterdir():
            if any(f"-{sandbox}-" in cached.name for sandbox in sandboxes):
                cached.unlink()
    logs = Path("/var/log/containers")
    if logs.is_dir():
        for link in logs.iterdir():
            if link.is_symlink() and os.readlink(link).startswith(f"{RUN}/"):
                link.unlink()
    if RUN.exists():
        shutil.rmtree(RUN)


__all__ = ["PREFIX", "kill_node", "load", "start", "start_node", "stop"]
