"""A Docker engine of the chaos run's own, in the run's network namespace.

The Docker runtime runs replicas as host-network containers, which live in
the network namespace of the engine that runs them. The machine's engine
lives in the machine's namespace, where a chaos run in its "main"
namespace (hosts.py) can reach nothing; so the run starts a dockerd of its
own where it runs: its own data root, exec root, socket, pid file and
containerd namespaces (nothing of the machine's engine is touched or
seen), `--bridge=none --iptables=false` (the firewall is left alone), and
the servefleet image copied in from the machine's engine (docker save |
docker load, about 300 MB).

`DockerUnavailable` says why an engine cannot be had here (no dockerd, no
engine with the image to copy from).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path

IMAGE = "servefleet:latest"
START_TIMEOUT_S = 60.0


class DockerUnavailable(Exception):
    """No engine of the run's own can be started here; the message says why."""


# The machine's mount namespace, as a path (/proc/PID/ns/mnt of a process in
# it), when this process runs in another one: set by bench/chaos.py's outer
# run for the run inside its hosts.
MACHINE_MOUNTS = "SERVEFLEET_MACHINE_MOUNTS"


def _machine_mounts() -> list[str]:
    """The prefix that runs a command in the machine's mount namespace (and
    this network namespace): `ip netns exec` gives the run a mount namespace
    with a sysfs of its own, where the cgroup hierarchy dockerd needs is not
    mounted."""
    mounts = os.environ.get(MACHINE_MOUNTS)
    return ["nsenter", f"--mount={mounts}", "--"] if mounts else []


class PrivateEngine:
    def __init__(self, work: Path, image: str = IMAGE, netns: str | None = None,
                 name: str = "engine", containerd: str = "servefleet-chaos") -> None:
        # Unix socket paths are short (108 bytes): containerd's live under exec.
        self.root = work / name
        self.image = image
        self.containerd = containerd  # its containerd's namespaces are named after this
        # Started in that network namespace (by its /run/netns name), in the
        # machine's mount namespace: else where this process runs.
        self.prefix = (["nsenter", f"--net=/run/netns/{netns}", "--"] if netns
                       else _machine_mounts())
        self.socket = self.root / "docker.sock"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def docker(self, *args: str, check: bool = True, timeout: float = 120,
               **kwargs) -> subprocess.CompletedProcess:
        """The docker CLI against this engine."""
        return subprocess.run(["docker", "-H", self.url, *args], check=check,
                              capture_output=True, text=True, timeout=timeout, **kwargs)

    def start(self) -> PrivateEngine:
        if shutil.which("dockerd") is None or shutil.which("docker") is None:
            raise DockerUnavailable("no dockerd here (scripts/docker-engine start installs it)")
        if subprocess.run(["docker", "image", "inspect", self.image], capture_output=True,
                          timeout=30).returncode != 0:
            raise DockerUnavailable(f"the machine's Docker engine is not running or has no "
                                    f"{self.image} (scripts/docker-engine start, "
                                    f"scripts/docker-image)")
        self.relaunch()
        self.load(self.image)
        return self

    def load(self, image: str) -> None:
        """Copy `image` in from the machine's engine (docker save | docker load)."""
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        try:
            self.docker("load", "-q", stdin=save.stdout, timeout=300)
        finally:
            assert save.stdout is not None
            save.stdout.close()
            save.wait(60)

    def relaunch(self) -> PrivateEngine:
        """Start its dockerd on the data it has (again, after it was killed)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "dockerd.log", "ab") as log:
            self.proc = subprocess.Popen(
                [*self.prefix, "dockerd", "--data-root", str(self.root / "data"),
                 "--exec-root", str(self.root / "x"), "-H", self.url,
                 "--pidfile", str(self.root / "dockerd.pid"),
                 "--containerd-namespace", self.containerd,
                 "--containerd-plugins-namespace", f"{self.containerd}-plugins",
                 "--bridge=none", "--iptables=false"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + START_TIMEOUT_S
        while self.docker("info", check=False, timeout=10).returncode != 0:
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                tail = (self.root / "dockerd.log").read_text()[-600:]
                raise DockerUnavailable(f"dockerd of the run did not start: {tail}")
            time.sleep(0.3)
        return self

    def containers(self, label: str) -> list[str]:
        """Ids of the containers (running or not) that carry `label` (k=v)."""
        found = self.docker("ps", "-aq", "--filter", f"label={label}", check=False, timeout=30)
        return found.stdout.split()

    def pid(self, container: str) -> int:
        """The host pid of a container's main process; 0 when it is not running."""
        found = self.docker("inspect", "-f", "{{.State.Pid}}", container, check=False,
                            timeout=30)
        return int(found.stdout.strip() or 0) if found.returncode == 0 else 0

    def stop(self) -> None:
        """Remove every container, stop dockerd, delete its data."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                ids = self.docker("ps", "-aq", check=False, timeout=30).stdout.split()
                if ids:
                    self.docker("rm", "-f", *ids, check=False, timeout=120)
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        with contextlib.suppress(OSError):  # its log stays with the run's
            shutil.copy(self.root / "dockerd.log", self.root.parent / "dockerd.log")
        with open("/proc/self/mounts") as mounts:  # never delete through a mount left behind
            if any(f" {self.root}/" in line for line in mounts):
                return
        shutil.rmtree(self.root, ignore_errors=True)


def binary_image(tag: str, binary: str, package: str, work: Path, base: str = IMAGE,
                 tail: str = "ENTRYPOINT []") -> None:
    """An image `tag` in the machine's engine: `base` with this machine's
    `binary` (from Debian's `package`) added, built once (no registry here:
    etcd and Prometheus images for compose and stack runs are made so)."""
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True,
                      timeout=30).returncode == 0:
        return
    found = shutil.which(binary)
    if found is None:
        raise DockerUnavailable(f"Debian's {package} is not installed")
    context = work / f"{binary}-image"
    context.mkdir(parents=True, exist_ok=True)
    shutil.copy(found, context / binary)
    (context / "Dockerfile").write_text(
        f"FROM {base}\nCOPY {binary} /usr/local/bin/{binary}\n{tail}\n")
    subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], check=True,
                   capture_output=True, timeout=600, env={**os.environ, "DOCKER_BUILDKIT": "0"})
