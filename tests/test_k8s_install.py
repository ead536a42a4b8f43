"""servefleet installed the Kubernetes way (issue 55, part 3), on the real
cluster scripts/k8s runs: the Helm chart (deploy/helm/servefleet) lints
clean, refuses bad values by name, renders objects the API server accepts
(with one etcd member and three, a NodePort proxy Service), and so do the
kustomize manifests (deploy/kubernetes), whose base is the chart's output
(deploy/kubernetes/generate.py --check). Then `helm install` with mutual
TLS (tls.enabled: a Job makes the certificates' Secret): etcd, three
controllers of which one leads, two proxies registered at their Pod IPs,
the proxy Service answering /-/healthz inside the cluster, a
ServeApplication served through it; an upgrade keeps the certificates;
`helm uninstall` alone leaves nothing of the release behind (the replicas,
their ConfigMaps and Secrets, and the certificates' Secret hang below the
controllers' Deployment).
Helm is built from its Go module by scripts/k8s build (cached)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from k8s_cluster import BIN, ETCD_IMAGE, IMAGE, K8S, ROOT, has_image, left_in
from k8s_cluster import run as _run
from test_compose import _unavailable

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.timeout(3600)]
CHART = ROOT / "deploy" / "helm" / "servefleet"
OVERLAY = ROOT / "deploy" / "kubernetes" / "overlays" / "example"
NAMESPACE = "sf-install"
RELEASE = "sf"
# What the test cluster needs: its images are loaded, not pulled; no StorageClass.
TEST_VALUES = ["--set", f"image.repository={IMAGE.rpartition(':')[0]}",
               "--set", f"image.tag={IMAGE.rpartition(':')[2]}",
               "--set", "image.pullPolicy=Never",
               "--set", f"etcd.image.repository={ETCD_IMAGE.rpartition(':')[0]}",
               "--set", f"etcd.image.tag={ETCD_IMAGE.rpartition(':')[2]}",
               "--set", "etcd.image.pullPolicy=Never",
               "--set", "etcd.persistence.enabled=false",
               # The examples in the image, for the ServeApplication below.
               "--set", "controller.extraArgs={--allow-working-dir,/opt/servefleet/examples}"]


def _helm(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(BIN / "helm", *args, check=check)


def _kubectl(*args: str | Path, input: str | None = None) -> str:
    return _run(BIN / "kubectl", *args, input=input).stdout


@pytest.fixture(scope="module")
def built() -> None:
    if os.geteuid() != 0:
        pytest.skip("scripts/k8s needs root (network namespaces, cgroups, mounts)")
    done = subprocess.run([str(K8S), "build"], capture_output=True, text=True, timeout=3300)
    if done.returncode:
        pytest.skip(f"Kubernetes and Helm could not be built: {done.stderr[-2000:]}")


@pytest.fixture
def cluster(k8s_cluster: bool) -> None:
    """The session's cluster (tests/k8s_cluster.py), with both images in it."""
    if not k8s_cluster or not has_image(ETCD_IMAGE):
        _unavailable(f"no Docker image {IMAGE} (scripts/docker-image) or no Debian etcd "
                     f"for {ETCD_IMAGE} to load into the nodes")


def test_the_chart_lints_clean_refuses_bad_values_and_the_base_is_its_output(built) -> None:
    lint = _helm("lint", "--strict", CHART)
    assert "0 chart(s) failed" in lint.stdout, lint.stdout
    # values.schema.json (a JSON pointer) or the templates: each refusal names the value.
    for setting, named in (("etcd.replicas=2", "'/etcd/replicas': value must be one of 1, 3"),
                           ("proxy.service.type=Ingress", "'/proxy/service/type'"),
                           ("tls.days=0", "'/tls/days'"),
                           ("etcd.external.endpoints={http://etcd:2379}",
                            "'/etcd/external/endpoints/0'"),
                           ("etcd.replicas=3,etcd.persistence.enabled=false",
                            "etcd.replicas 3 needs etcd.persistence.enabled")):
        refused = _helm("template", "x", CHART, "--set", setting, check=False)
        assert refused.returncode != 0 and named in refused.stderr, (setting, refused.stderr)
    # A ServiceMonitor only where the Prometheus Operator's API is served.
    plain = _helm("template", "x", CHART).stdout
    operator = _helm("template", "x", CHART, "--api-versions",
                     "monitoring.coreos.com/v1/ServiceMonitor").stdout
    assert "kind: ServiceMonitor" not in plain and "kind: ServiceMonitor" in operator
    checked = _run(ROOT / ".venv" / "bin" / "python", ROOT / "deploy" / "kubernetes" /
                   "generate.py", "--check", check=False)
    assert checked.returncode == 0, checked.stderr


def test_the_api_server_accepts_what_the_chart_and_the_overlay_make(cluster) -> None:
    # A server-side dry run needs a namespace that exists; the overlay's is servefleet.
    namespaces = [f"{NAMESPACE}-dry-{os.getpid()}", "servefleet"]
    for namespace in namespaces:
        _kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}))
    try:
        for extra in ([], ["--set", "etcd.replicas=3", "--set", "etcd.persistence.enabled=true",
                           "--set", "proxy.service.type=NodePort",
                           "--set", "proxy.service.nodePort=30080"],
                      ["--set", "etcd.external.endpoints={10.0.0.5:2379,10.0.0.6:2379}",
                       "--set", "controller.applications=false", "--set", "tls.enabled=true"]):
            rendered = _helm("template", RELEASE, CHART, "--namespace", namespaces[0],
                             *TEST_VALUES, *extra).stdout
            applied = _kubectl("apply", "--dry-run=server", "-f", "-", input=rendered)
            kinds = {line.split("/")[0] for line in applied.splitlines()}
            assert {"service", "deployment.apps", "role.rbac.authorization.k8s.io",
                    "rolebinding.rbac.authorization.k8s.io", "serviceaccount"} <= kinds, applied
            assert ("statefulset.apps" in kinds) == ("etcd.external" not in " ".join(extra))
            assert ("job.batch" in kinds) == ("tls.enabled=true" in extra)
        applied = _kubectl("apply", "--dry-run=server", "-k", OVERLAY)
        assert "statefulset.apps/servefleet-etcd created (server dry run)" in applied, applied
    finally:
        _kubectl("delete", "namespace", *namespaces)


def _pods(component: str) -> list[dict]:
    return json.loads(_kubectl("-n", NAMESPACE, "get", "pods", "-o", "json", "-l",
                               f"app.kubernetes.io/component={component}"))["items"]


def _service_ip(component: str) -> str:
    return _kubectl("-n", NAMESPACE, "get", "service", f"{RELEASE}-servefleet-{component}",
                    "-o", "jsonpath={.spec.clusterIP}")


def _in_proxy_pod(*argv: str) -> subprocess.CompletedProcess[str]:
    """A command run in a proxy's Pod: Service IPs are reached from Pods (a
    node's own namespace has no route to them here)."""
    return _run(BIN / "kubectl", "-n", NAMESPACE, "exec", f"deployment/{RELEASE}-servefleet-proxy",
                "--", *argv, check=False, timeout=60)


def _release_leftovers() -> list[str]:
    return left_in(NAMESPACE, "serveapplications")


def _get(url: str) -> subprocess.CompletedProcess[str]:
    return _in_proxy_pod("python3", "-c", "import urllib.request as u; print(u.urlopen("
                         f"{url!r}, timeout=10).read().decode(), end='')")


CERTS = "/etc/servefleet/certs"
# servefleet status in a proxy's Pod, as the proxy (its role may read the status).
STATUS = ["servefleet", "status", "--json", "--cluster-ca", f"{CERTS}/ca.crt",
          "--cluster-cert", f"{CERTS}/proxy.crt", "--cluster-key", f"{CERTS}/proxy.key",
          "--controller-server-name", "controller.servefleet"]


def _certs_secret() -> dict:
    return json.loads(_kubectl("-n", NAMESPACE, "get", "secret", f"{RELEASE}-servefleet-certs",
                               "-o", "json"))


def test_helm_install_with_tls_serves_an_application_and_uninstall_leaves_nothing(
        cluster) -> None:
    """Install with tls.enabled; a leader among the three controllers, both
    proxies known to it at their Pod IPs (checked over TLS, the name
    controller.servefleet expected of a Service IP); a ServeApplication
    (examples/sentiment.py, in the image) served through the proxy Service
    by a replica with TLS; an upgrade's certs Job keeps the Secret; then
    helm uninstall alone: nothing of the release is left."""
    began = time.monotonic()
    _helm("install", RELEASE, CHART, "--namespace", NAMESPACE, "--create-namespace",
          *TEST_VALUES, "--set", "tls.enabled=true", "--wait", "--timeout", "180s")
    installed = time.monotonic() - began
    try:
        secret = _certs_secret()
        (owner,) = secret["metadata"]["ownerReferences"]
        assert owner["name"] == f"{RELEASE}-servefleet-controller"
        controllers = [p["status"]["podIP"] for p in _pods("controller")]
        proxies = [p["status"]["podIP"] for p in _pods("proxy")]
        assert len(controllers) == 3 and len(proxies) == 2
        address = f"{_service_ip('controller')}:7373"
        deadline = time.monotonic() + 60
        while True:  # the proxies' registrations reach the leader by their Watch streams
            status = _in_proxy_pod(*STATUS, "--controller", address)
            reply = json.loads(status.stdout) if status.returncode == 0 else {}
            if len(reply.get("proxies", [])) == 2:
                break
            assert time.monotonic() < deadline, (status.stderr, reply)
            time.sleep(1)
        assert reply["leader"] in {f"{ip}:7373" for ip in controllers}, reply
        assert sorted(reply["controllers"]) == sorted(f"{ip}:7373" for ip in controllers)
        assert sorted(p["address"] for p in reply["proxies"]) == sorted(
            f"{ip}:8000" for ip in proxies)
        proxy = f"http://{_service_ip('proxy')}:8000"
        healthz = _get(f"{proxy}/-/healthz")
        assert healthz.stdout == "ok", healthz.stderr
        _kubectl("-n", NAMESPACE, "apply", "-f", "-", input=json.dumps({
            "apiVersion": "servefleet.io/v1alpha1", "kind": "ServeApplication",
            "metadata": {"name": "sentiment"},
            "spec": {"import_path": "sentiment:app", "route_prefix": "/sentiment",
                     "runtime": {"working_dir": "/opt/servefleet/examples", "image": IMAGE}}}))
        deadline = time.monotonic() + 120
        while '"label":"positive"' not in (answer := _get(
                f"{proxy}/sentiment?text=a+great+day")).stdout:
            assert time.monotonic() < deadline, (answer.stdout, answer.stderr[-2000:])
            time.sleep(1)
        # An upgrade's Job finds the Secret and leaves it: the same CA.
        _helm("upgrade", RELEASE, CHART, "--namespace", NAMESPACE, "--reuse-values")
        _kubectl("-n", NAMESPACE, "wait", "--for=condition=complete", "--timeout=120s",
                 f"job/{RELEASE}-servefleet-certs-2")
        assert _certs_secret()["data"] == secret["data"]
        assert "kept the Secret" in _kubectl("-n", NAMESPACE, "logs",
                                             f"job/{RELEASE}-servefleet-certs-2")
    finally:
        _helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "90s")
        try:
            # The replicas' Pods, their Secrets and ConfigMaps, and the
            # certificates go after the controllers' Deployment, by themselves.
            deadline = time.monotonic() + 60
            while left := [o for o in _release_leftovers()
                           if not o.startswith("ServeApplication/")]:
                assert time.monotonic() < deadline, f"left after helm uninstall: {left}"
                time.sleep(1)
            _kubectl("-n", NAMESPACE, "delete", "serveapplications", "--all")  # the user's
            assert _release_leftovers() == []
        finally:
            _kubectl("delete", "namespace", NAMESPACE, "--wait=false")
    print(f"helm install --wait: {installed:.0f} s")
