"""Argo Server on the cluster (e2e/components.argo_server, client auth mode) as a user reaches
it with `clustertools.argo_server_env` alone, on each Argo release: TLS verified through
REQUESTS_CA_BUNDLE, the bearer token of a service account whose Role allows Argo's kinds and
nothing on RBAC or Secrets."""

from __future__ import annotations

import json
import subprocess

import pytest
import requests
from clustertools import ARGO_USER, ON_EVERY_ARGO, STATE

pytestmark = [pytest.mark.cluster, ON_EVERY_ARGO]


def get(env: dict, monkeypatch, path: str, token: bool = True) -> requests.Response:
    """GET https://$ARGO_SERVER<path> with the process environment set from env, so requests
    trusts the CA as a user's client would (REQUESTS_CA_BUNDLE), with ARGO_TOKEN or no token."""
    for name in ("REQUESTS_CA_BUNDLE", "ARGO_SERVER", "ARGO_TOKEN"):
        monkeypatch.setenv(name, env[name])
    for name in ("CURL_CA_BUNDLE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    headers = {"Authorization": env["ARGO_TOKEN"]} if token else {}
    return requests.get(f"https://{env['ARGO_SERVER']}{path}", headers=headers, timeout=30)


def test_argo_server_answers_the_running_release_to_the_token_only(argo_server_env, monkeypatch):
    env = argo_server_env
    version = get(env, monkeypatch, "/api/v1/version")
    assert version.status_code == 200, version.text
    # These builds say e.g. "v4.0.5+unknown" (no git metadata in a module build).
    assert version.json()["version"].split("+")[0] == env["MFARGO_E2E_ARGO"]

    path = "/api/v1/workflow-templates/" + env["ARGO_NAMESPACE"]
    listed = get(env, monkeypatch, path)
    assert listed.status_code == 200, listed.text
    assert "items" in listed.json()
    refused = get(env, monkeypatch, path, token=False)
    assert refused.status_code == 401, refused.text
    assert refused.json()["code"] == 16  # gRPC Unauthenticated, with a "message"


def can_i(admin_env: dict, *args: str) -> str:
    """`kubectl auth can-i ARGS` for the Argo user in the flows' namespace, asked as the admin:
    "yes" or "no" (kubectl exits 1 on no)."""
    kubectl = json.loads((STATE / "binaries.json").read_text())["kubectl"]
    ns = admin_env["METAFLOW_KUBERNETES_NAMESPACE"]
    p = subprocess.run([kubectl, "auth", "can-i", *args, "-n", ns, f"--as=system:serviceaccount:{ns}:{ARGO_USER}"],
                       env=admin_env, capture_output=True, text=True, timeout=60)
    return p.stdout.strip()


def test_argo_user_may_deploy_workflows_but_not_touch_rbac_or_secrets(argo_server_env, cluster_env):
    assert can_i(cluster_env, "create", "workflowtemplates.argoproj.io") == "yes"
    assert can_i(cluster_env, "create", "roles.rbac.authorization.k8s.io") == "no"
    assert can_i(cluster_env, "get", "secrets") == "no"
