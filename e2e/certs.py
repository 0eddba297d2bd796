"""The cluster's certificates and kubeconfigs, made with openssl for each cold `up`.

One CA signs everything: the API server's serving certificate, a client certificate per
component (its identity is the CN, its groups the O; RBAC is on), the kubelet's, the JobSet
webhook's, the private registry's and Argo Server's serving certificates. A separate key pair
signs service-account tokens.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import layout
from proc import run

# name: (CN, O or None): a client certificate, and a kubeconfig but for the API server's own.
CLIENTS = {
    "admin": ("mfargo-e2e-admin", "system:masters"),
    "kube-controller-manager": ("system:kube-controller-manager", None),
    "kube-scheduler": ("system:kube-scheduler", None),
    **{node.part("kubelet"): (f"system:node:{node.name}", "system:nodes") for node in layout.NODES},
    "kube-proxy": ("system:kube-proxy", None),
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", "system:masters"),
}
KUBECONFIGS = [name for name in CLIENTS if name != "apiserver-kubelet-client"]


def pki(name: str) -> Path:
    return layout.cache("pki", name)


def _key(path: Path) -> None:
    run("certificates", ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                         "-out", path])


def _sign(name: str, subject: str, ext: str) -> None:
    """Key, CSR and CA-signed certificate <name>.key / <name>.crt with the given extensions."""
    _key(pki(f"{name}.key"))
    run("certificates", ["openssl", "req", "-new", "-key", pki(f"{name}.key"), "-subj", subject,
                         "-out", pki(f"{name}.csr")])
    pki(f"{name}.ext").write_text(ext)
    run("certificates", ["openssl", "x509", "-req", "-in", pki(f"{name}.csr"), "-CA", pki("ca.crt"),
                         "-CAkey", pki("ca.key"), "-CAcreateserial", "-days", "30", "-sha256",
                         "-extfile", pki(f"{name}.ext"), "-out", pki(f"{name}.crt")])


def serving(name: str, cn: str, sans: list[str]) -> None:
    alt = ",".join(("IP:" if s[0].isdigit() else "DNS:") + s for s in sans)
    _sign(name, f"/CN={cn}", "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
          f"extendedKeyUsage=serverAuth\nsubjectAltName={alt}\n")


def made() -> bool:
    """Whether make_all made what this version of the cluster needs (pki outlives `down`)."""
    return all(kubeconfig(name).exists() for name in KUBECONFIGS)


def make_all() -> None:
    """Every certificate and key the parts need, and a kubeconfig per client."""
    pki("").mkdir(parents=True, exist_ok=True)
    # Signed by the CA made anew here: registry.serve and components.argo_server make them again.
    pki("registry.crt").unlink(missing_ok=True)
    pki("argo-server.crt").unlink(missing_ok=True)
    _key(pki("ca.key"))
    run("certificates", ["openssl", "req", "-x509", "-new", "-key", pki("ca.key"), "-subj", "/CN=mfargo-e2e-ca",
                         "-days", "30", "-sha256", "-out", pki("ca.crt")])
    _key(pki("sa.key"))
    run("certificates", ["openssl", "pkey", "-in", pki("sa.key"), "-pubout", "-out", pki("sa.pub")])
    serving("apiserver", "kube-apiserver", [
        layout.NODE_IP, "127.0.0.1", layout.KUBERNETES_SERVICE_IP, "localhost", "kubernetes",
        "kubernetes.default", "kubernetes.default.svc", f"kubernetes.default.svc.{layout.CLUSTER_DOMAIN}"])
    for node in layout.NODES:
        serving(node.part("kubelet-serving"), node.name, [node.ip, node.name])
    serving("jobset-webhook", "jobset-webhook", ["127.0.0.1"])
    for name, (cn, org) in CLIENTS.items():
        subject = f"/CN={cn}" + (f"/O={org}" if org else "")
        _sign(name, subject, "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
              "extendedKeyUsage=clientAuth\n")
        if name in KUBECONFIGS:
            write_kubeconfig(name)


def kubeconfig(name: str) -> Path:
    return pki(f"{name}.kubeconfig")


def write_kubeconfig(name: str) -> Path:
    """A kubeconfig for client `name` (JSON is YAML: kubectl and client-go read it)."""
    def b64(p: str) -> str:
        return base64.b64encode(pki(p).read_bytes()).decode()

    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "mfargo-e2e",
           "clusters": [{"name": "mfargo-e2e", "cluster": {"server": layout.APISERVER_URL,
                                                          "certificate-authority-data": b64("ca.crt")}}],
           "users": [{"name": name, "user": {"client-certificate-data": b64(f"{name}.crt"),
                                             "client-key-data": b64(f"{name}.key")}}],
           "contexts": [{"name": "mfargo-e2e", "context": {"cluster": "mfargo-e2e", "user": name,
                                                          "namespace": layout.NAMESPACE}}]}
    out = kubeconfig(name)
    out.write_text(json.dumps(cfg, indent=1))
    out.chmod(0o600)
    return out


def ca_bundle() -> str:
    """The CA as base64 PEM, as webhook configurations want it."""
    return base64.b64encode(pki("ca.crt").read_bytes()).decode()
