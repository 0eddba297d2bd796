"""runner/README.md's "Differences from Argo", shown: one hand-written Workflow run by
`mfargo run` and by the real engine (e2e/cluster), its nodes compared row by row.

Rows that this Workflow does not cover say in runner/README.md why (they are about this
machine, not about the YAML's results, or the cluster has no way to show them).
"""

from __future__ import annotations

import hashlib
import json
import textwrap
import time

import pytest
import yaml
from clustertools import kubectl

from runner_tools import run_yaml

pytestmark = pytest.mark.cluster

PARITY = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {name: NAME}
spec:
  entrypoint: main
  hooks:
    while-running: {expression: "workflow.status == 'Running'", template: note}
    after-failure: {expression: "workflow.status == 'Failed'", template: note}
  templates:
  - name: main
    dag:
      tasks:
      - {name: fails, template: fail-once}
      - {name: after-fails, depends: fails, template: note}
      - {name: slow, template: sleep}
      - {name: no-secret, template: no-secret}
  - name: fail-once
    retryStrategy: {limit: 0}
    container: {image: IMAGE, command: [bash, -c, "exit 1"]}
  - name: sleep
    container: {image: IMAGE, command: [bash, -c, "sleep 10"]}
  - name: note
    container: {image: IMAGE, command: [bash, -c, "echo noted"]}
  - name: no-secret
    activeDeadlineSeconds: 10
    container:
      image: IMAGE
      command: [bash, -c, "echo $TOKEN"]
      env: [{name: TOKEN, valueFrom: {secretKeyRef: {name: SECRET, key: token}}}]
"""


def parity_yaml(name: str, image: str) -> str:
    return textwrap.dedent(PARITY).replace("NAME", name).replace("IMAGE", image).replace("SECRET", name + "-absent")


def on_cluster(env: dict, text: str, path, timeout: float = 240) -> dict[str, tuple[str, str]]:
    """Create the Workflow, wait (bounded) for it to finish, delete it; its nodes by display
    name (the workflow's own name left out of hook names): (phase, message)."""
    doc = yaml.safe_load(text)
    name, ns = doc["metadata"]["name"], env["METAFLOW_KUBERNETES_NAMESPACE"]
    path.write_text(text)
    kubectl(env, "create", "-n", ns, "-f", str(path))
    try:
        deadline = time.monotonic() + timeout
        while True:
            wf = json.loads(kubectl(env, "get", "workflow", name, "-n", ns, "-o", "json"))
            if wf.get("status", {}).get("phase") in ("Succeeded", "Failed", "Error"):
                break
            assert time.monotonic() < deadline, f"workflow {name} not finished after {timeout:.0f} s"
            time.sleep(2)
    finally:
        kubectl(env, "delete", "workflow", name, "-n", ns, "--wait=false", "--ignore-not-found")
    return {n["displayName"].removeprefix(name + "."): (n["phase"], n.get("message", ""))
            for n in wf["status"]["nodes"].values()} | {"": (wf["status"]["phase"], wf["status"].get("message", ""))}


def on_runner(tmp_path, text: str) -> dict[str, tuple[str, str]]:
    result, _ = run_yaml(text, tmp_path, timeout=120)
    return {n.display_name.removeprefix(result.workflow_name + "."): (n.phase, n.message)
            for n in result.nodes.values()} | {"": (result.status, result.message)}


def test_differences_from_argo_shown_on_the_cluster(cluster_env, tmp_path):
    name = "parity-" + hashlib.sha1(str(tmp_path).encode()).hexdigest()[:10]
    text = parity_yaml(name, cluster_env["METAFLOW_KUBERNETES_CONTAINER_IMAGE"])
    argo = on_cluster(cluster_env, text, tmp_path / "workflow.yaml")
    local = on_runner(tmp_path, text)
    seen = json.dumps({"argo": argo, "runner": local}, sort_keys=True)
    # Nodes both have end in the same phase (the workflow's own included: Failed).
    both = set(argo) & set(local)
    assert {n: argo[n][0] for n in both} == {n: local[n][0] for n in both}, seen
    assert argo[""][0] == "Failed" and argo["after-fails"][0] == "Omitted", seen
    # Exactly the rows' differences, and nothing else (the workflow is in mfargo's dialect:
    # the runner refuses task hooks, withItems, failFast... before the run):
    assert set(local) - set(argo) == set(), seen
    assert set(argo) - set(local) == {"hooks.while-running"}, seen  # workflow hooks: evaluated while running
    assert argo["hooks.after-failure"] == local["hooks.after-failure"] == ("Succeeded", ""), seen
    # a missing Secret: Argo's pod waits for it (CreateContainerConfigError) until its deadline;
    # the runner fails it at once
    assert argo["no-secret"] == ("Failed", "Pod was active on the node longer than the specified deadline"), seen
    assert local["no-secret"][1].startswith(f"secret '{name}-absent' (key 'token') is not available"), seen
    # messages: Argo names the container, and a retry node that gave up says only that
    assert (argo["fails(0)"][1], local["fails(0)"][1]) == ("main: Error (exit code 1)", "Error (exit code 1)"), seen
    assert (argo["fails"][1], local["fails"][1]) == ("No more retries left",
                                                     "Error (exit code 1) (no more retries left)"), seen
