"""A registry that wants credentials, holding the pods' image under a private name.

Debian's `docker-registry` (the Distribution registry) on the node's address, TLS from the
cluster's CA (containerd is told to trust that CA for this registry, nothing more) and one
htpasswd user whose random password lives only in the cluster's state and in the Secret
`layout.PULL_SECRET`. The node has no credentials of its own: a pod pulls the private image
only through `imagePullSecrets`, so a pod of a flow that lacks the secret cannot start.
"""

from __future__ import annotations

import base64
import json
import secrets
import ssl
import urllib.error
import urllib.request

import certs
import layout
from proc import PartFailed, run, start, wait_ready

USER = "mfargo-e2e"
HOST = f"{layout.NODE_IP}:{layout.REGISTRY_PORT}"


def private_ref(public_ref: str) -> str:
    """The registry's name for an image the cluster built (`mfargo-e2e/python:<key>`)."""
    return f"{HOST}/{public_ref}"


def _password() -> str:
    path = layout.state("registry", "password")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(24))
    return path.read_text()


def serve() -> None:
    """Start the registry (its blobs are kept in the cache, so a warm `up` pushes nothing)."""
    if not certs.pki("registry.crt").exists():
        certs.serving("registry", "mfargo-e2e-registry", [layout.NODE_IP])
    htpasswd = layout.state("registry", "htpasswd")
    _password()
    run("registry", ["htpasswd", "-B", "-i", "-c", htpasswd, USER], input=_password().encode())
    config = {
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(layout.cache("registry"))}},
        "http": {"addr": HOST, "tls": {"certificate": str(certs.pki("registry.crt")),
                                       "key": str(certs.pki("registry.key"))}},
        "auth": {"htpasswd": {"realm": "mfargo-e2e", "path": str(htpasswd)}},
    }
    path = layout.state("registry", "config.json")  # JSON is YAML
    path.write_text(json.dumps(config, indent=1))
    start("registry", ["docker-registry", "serve", path], env={"PATH": "/usr/bin:/bin"})
    wait_ready("registry", lambda: _status("/v2/", auth=False) == 401, 30, f"GET https://{HOST}/v2/ answers 401")


def _status(path: str, *, auth: bool, method: str = "GET") -> int:
    ctx = ssl.create_default_context(cafile=str(certs.pki("ca.crt")))
    req = urllib.request.Request(f"https://{HOST}{path}", method=method, headers={
        "Accept": "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"})
    if auth:
        token = base64.b64encode(f"{USER}:{_password()}".encode()).decode()
        req.add_header("Authorization", "Basic " + token)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
    try:
        with opener.open(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def push(ctr: list[str], public_ref: str) -> str:
    """Push an image containerd holds to the registry (once: a pushed tag is kept); its private ref."""
    private = private_ref(public_ref)
    repo, tag = public_ref.rsplit(":", 1)
    if _status(f"/v2/{repo}/manifests/{tag}", auth=True, method="HEAD") == 200:
        return private
    run("registry", [*ctr, "images", "tag", "--force", "docker.io/" + public_ref, private])
    run("registry", [*ctr, "images", "push", "--tlscacert", certs.pki("ca.crt"), "--user", f"{USER}:{_password()}",
                     private], timeout=900, hide=_password())
    # Containerd must not answer a pod's pull from this tag without asking the registry.
    run("registry", [*ctr, "images", "rm", private])
    if _status(f"/v2/{repo}/manifests/{tag}", auth=True, method="HEAD") != 200:
        raise PartFailed("registry", f"{private} is not in the registry after the push", layout.log("registry"))
    return private


def pull_secret() -> dict:
    """The Secret (type dockerconfigjson) a pod names in imagePullSecrets to pull from here."""
    auth = base64.b64encode(f"{USER}:{_password()}".encode()).decode()
    config = {"auths": {HOST: {"username": USER, "password": _password(), "auth": auth}}}
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
            "metadata": {"name": layout.PULL_SECRET, "namespace": layout.NAMESPACE},
            "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()}}


def containerd_tls() -> str:
    """containerd's CRI: trust the cluster's CA for this registry (and hold no credentials for it)."""
    return (f'[plugins."io.containerd.grpc.v1.cri".registry.configs."{HOST}".tls]\n'
            f'  ca_file = "{certs.pki("ca.crt")}"\n')
