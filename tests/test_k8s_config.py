"""Which API server, identity and namespace `--runtime kubernetes` uses
(controller/runtime/kubernetes_config.py, KubeApi.from_kubeconfig and
in_cluster), and the controller's kube flags refused by name when wrong
(controller/config.py). Pure file reading: the real API server is
tests/test_k8s_runtime.py's."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from servefleet._private.security.certs import init_certs
from servefleet.controller.config import ControllerConfig
from servefleet.controller.runtime.kubernetes_config import connect


def _kubeconfig(path: Path, certs: Path, *, inline: bool, namespace: str | None = None) -> Path:
    if inline:
        cluster = {"server": "https://10.0.0.1:6443", "certificate-authority-data":
                   base64.b64encode((certs / "ca.crt").read_bytes()).decode()}
        user = {f"client-{k}-data": base64.b64encode((certs / f"admin.{e}").read_bytes()).decode()
                for k, e in (("certificate", "crt"), ("key", "key"))}
    else:  # paths relative to the kubeconfig's folder, as kubectl reads them
        cluster = {"server": "https://10.0.0.1:6443",
                   "certificate-authority": f"{certs.name}/ca.crt"}
        user = {"client-certificate": f"{certs.name}/admin.crt",
                "client-key": f"{certs.name}/admin.key"}
    context = {"cluster": "c", "user": "u", **({"namespace": namespace} if namespace else {})}
    path.write_text(yaml.safe_dump({
        "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": context}], "current-context": "x"}))
    return path


@pytest.fixture
def certs(tmp_path) -> Path:
    init_certs(tmp_path / "certs")
    return tmp_path / "certs"


def test_a_kubeconfig_with_files_or_inline_data_and_its_namespace(tmp_path, certs) -> None:
    by_files = _kubeconfig(tmp_path / "files.yaml", certs, inline=False, namespace="team")
    api = connect(str(by_files), None, environ={})
    assert api.namespace == "team"  # the context's
    assert connect(str(by_files), "serving", environ={}).namespace == "serving"  # the flag's
    inline = _kubeconfig(tmp_path / "inline.yaml", certs, inline=True)
    assert connect(None, None, environ={"KUBECONFIG": str(inline)}).namespace == "default"


def test_missing_or_broken_kubeconfigs_are_named(tmp_path, certs) -> None:
    with pytest.raises(ValueError, match=r"^\$KUBECONFIG /nowhere/kc: no such file"):
        connect(None, None, environ={"KUBECONFIG": "/nowhere/kc"})
    with pytest.raises(ValueError, match=r"^--kubeconfig \(default ~/.kube/config\) .*"
                                         r"no such file"):
        connect(None, None, environ={"HOME": str(tmp_path)})
    broken = tmp_path / "broken.yaml"
    broken.write_text("current-context: nowhere\ncontexts: []\n")
    with pytest.raises(ValueError, match=r"^--kubeconfig .*broken.yaml: no context 'nowhere'"):
        connect(str(broken), None, environ={})


def test_in_a_pod_the_service_account_and_its_namespace(tmp_path, certs) -> None:
    account = tmp_path / "sa"
    account.mkdir()
    (account / "ca.crt").write_bytes((certs / "ca.crt").read_bytes())
    (account / "namespace").write_text("serving\n")
    pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ValueError, match=r"^--kubeconfig: this is a Pod .* without a "
                                         r"ServiceAccount token"):
        connect(None, None, environ=pod, account=account)
    (account / "token").write_text("t0ken")
    assert connect(None, None, environ=pod, account=account).namespace == "serving"
    assert connect(None, "other", environ=pod, account=account).namespace == "other"
    # --kubeconfig wins over the ServiceAccount.
    kubeconfig = _kubeconfig(tmp_path / "kc.yaml", certs, inline=True, namespace="mine")
    assert connect(str(kubeconfig), None, environ=pod, account=account).namespace == "mine"


@pytest.mark.parametrize(("field", "value", "message"), [
    ("kube_pull_policy", "Sometimes", "--kube-pull-policy 'Sometimes': one of IfNotPresent, "
                                      "Never, Always"),
    ("kube_namespace", "Team_A", "--kube-namespace 'Team_A': a namespace's name"),
    ("kube_image", "my image", "--kube-image 'my image': an image reference"),
    ("kubeconfig", "/nowhere/kc", "--kubeconfig /nowhere/kc: no such file"),
])
def test_bad_kube_flags_are_refused_by_name(field: str, value: str, message: str) -> None:
    config = ControllerConfig(store_url="sqlite:///x.db", runtime="kubernetes",
                              **{field: value})  # type: ignore[arg-type]
    with pytest.raises(ValueError) as refused:
        config.validate()
    assert str(refused.value).startswith(message)
