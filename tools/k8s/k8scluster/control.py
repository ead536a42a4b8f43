"""The control plane, in its own namespace: etcd (Debian's, on that
namespace's loopback), kube-apiserver (RBAC and the Node authorizer on,
NodeRestriction admission), kube-controller-manager and kube-scheduler."""

from __future__ import annotations

from . import pki, procs
from .layout import (
    APISERVER_PORT,
    BIN,
    CONTROL_ADDRESS,
    CONTROL_DIR,
    CONTROL_NETNS,
    PKI,
    SERVICE_CIDR,
)

ETCD_CLIENT = "http://127.0.0.1:12379"
ETCD_PEER = "http://127.0.0.1:12380"
NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def start_etcd() -> None:
    procs.start("etcd", [
        "etcd", "--name", "k8s", "--data-dir", str(CONTROL_DIR / "etcd"),
        "--listen-client-urls", ETCD_CLIENT, "--advertise-client-urls", ETCD_CLIENT,
        "--listen-peer-urls", ETCD_PEER, "--initial-advertise-peer-urls", ETCD_PEER,
        "--initial-cluster", f"k8s={ETCD_PEER}", "--initial-cluster-state", "new",
        "--log-level", "warn", "--listen-metrics-urls", "http://127.0.0.1:12381",
    ], netns=CONTROL_NETNS)


def start_apiserver() -> None:
    procs.start("kube-apiserver", [
        str(BIN / "kube-apiserver"),
        "--etcd-servers", ETCD_CLIENT,
        "--bind-address", "0.0.0.0", "--secure-port", str(APISERVER_PORT),
        "--advertise-address", CONTROL_ADDRESS,
        "--tls-cert-file", str(PKI / "apiserver.crt"),
        "--tls-private-key-file", str(PKI / "apiserver.key"),
        "--client-ca-file", str(PKI / "ca.crt"),
        "--kubelet-client-certificate", str(PKI / "apiserver-kubelet-client.crt"),
        "--kubelet-client-key", str(PKI / "apiserver-kubelet-client.key"),
        "--kubelet-certificate-authority", str(PKI / "ca.crt"),
        "--kubelet-preferred-address-types", "InternalIP",
        "--service-account-key-file", str(PKI / "sa.pub"),
        "--service-account-signing-key-file", str(PKI / "sa.key"),
        "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
        "--service-cluster-ip-range", SERVICE_CIDR,
        "--authorization-mode", "Node,RBAC",
        "--enable-admission-plugins", "NodeRestriction",
        "--allow-privileged=true", "--profiling=false", "--v=1",
    ], netns=CONTROL_NETNS)


def start_managers() -> None:
    local = f"https://127.0.0.1:{APISERVER_PORT}"
    cm = pki.kubeconfig(CONTROL_DIR / "controller-manager.kubeconfig", local,
                        "controller-manager")
    procs.start("kube-controller-manager", [
        str(BIN / "kube-controller-manager"),
        "--kubeconfig", str(cm), "--authentication-kubeconfig", str(cm),
        "--authorization-kubeconfig", str(cm),
        "--service-account-private-key-file", str(PKI / "sa.key"),
        "--root-ca-file", str(PKI / "ca.crt"),
        "--use-service-account-credentials=true", "--leader-elect=false",
        "--bind-address", "127.0.0.1", "--cluster-name", "servefleet-k8s",
        "--profiling=false", "--v=1",
    ], netns=CONTROL_NETNS)
    sched = pki.kubeconfig(CONTROL_DIR / "scheduler.kubeconfig", local, "scheduler")
    procs.start("kube-scheduler", [
        str(BIN / "kube-scheduler"),
        "--kubeconfig", str(sched), "--authentication-kubeconfig", str(sched),
        "--authorization-kubeconfig", str(sched),
        "--leader-elect=false", "--bind-address", "127.0.0.1", "--profiling=false", "--v=1",
    ], netns=CONTROL_NETNS)
