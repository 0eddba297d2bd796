"""Argo Server on the cluster (e2e/components.argo_server, client auth mode) as a user reaches
it with `clustertools.argo_server_env` alone, on each Argo release: TLS verified through
REQUESTS_CA_BUNDLE, the bearer token of a service account whose Role allows Argo's kinds and
nothing on RBAC or Secrets; then mfargo's commands (mfargo.argo_server) through it, with no kube
config, a gang flow included."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import requests
import yaml
from clustertools import ARGO_USER, ON_EVERY_ARGO, STATE, failed_nodes, flow_cmd, kubectl, until, wait_workflow
from flowtools import EXAMPLES
from test_cluster_deploy import (SLEEPER, SMALL_STEPS, _triggered, assert_stopped, controller_took_cron, exists,
                                 kube_json, start, undeploy, unique)
from test_cluster_e2e import SMALL_GANG, read_run

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


# -- mfargo's commands through Argo Server alone ---------------------------------------------------

def user_env(argo_server_env: dict) -> dict:
    """A user who reaches Argo only through Argo Server: no kube config, small step pods."""
    return {**argo_server_env, "METAFLOW_DECOSPECS": SMALL_STEPS}


def test_a_gang_flow_deployed_run_listed_and_deleted_through_argo_server(argo_server_env, cluster_env, tmp_path):
    """examples/distributed_training.py through Argo Server with no kube config: the admin creates
    the gang's Role and RoleBinding (Argo Server cannot; `create` says so in one line), the user
    deploys (and deploys again: a replace), triggers, reads the status, resumes from the join, lists runs and templates and
    deletes; the runs are read back with Metaflow's client."""
    user, ns = user_env(argo_server_env), cluster_env["METAFLOW_KUBERNETES_NAMESPACE"]
    source = (EXAMPLES / "distributed_training.py").read_text()
    big = '@kubernetes(image="python:3.11", cpu=2, memory=8192, shared_memory=1024, port=29500)'
    assert big in source, "the example's @kubernetes changed: update this test"
    flow = tmp_path / "distributed_training.py"
    flow.write_text(source.replace(big, SMALL_GANG))
    name = unique("via-server")
    printed = flow_cmd(user, flow, "argo-workflows", "--name", name, "create", "--only-yaml").stdout
    rbac = [d for d in yaml.safe_load_all(printed) if d["kind"] in ("Role", "RoleBinding")]
    assert sorted(d["kind"] for d in rbac) == ["Role", "RoleBinding"]
    kubectl(cluster_env, "apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(rbac))
    runs: list[str] = []
    try:
        created = flow_cmd(user, flow, "argo-workflows", "--name", name, "create")
        said = " ".join((created.stdout + created.stderr).split())
        assert "Argo Server cannot create %s" % ", ".join("%s %s" % (d["kind"], d["metadata"]["name"])
                                                           for d in rbac) in said, said
        assert exists(cluster_env, "workflowtemplate", name)
        again = flow_cmd(user, flow, "argo-workflows", "--name", name, "create")  # a replace, at its resourceVersion
        assert "Replaced WorkflowTemplate %s" % name in (again.stdout + again.stderr).replace("*", ""), again.stdout
        run_id = start(user, flow, name, runs, "--nodes", "2")
        wf = wait_workflow(cluster_env, run_id)
        assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
        status = flow_cmd(user, flow, "argo-workflows", "--name", name, "status", run_id).stdout.split()
        assert status == ["Succeeded"], status
        templates = flow_cmd(user, flow, "argo-workflows", "list-workflow-templates").stdout
        assert name in templates.split(), templates
        got = read_run(user, f"DistributedTrainingFlow/{run_id}",
                       "{'ok': run.successful, 'ranks': run['join'].task.data.ranks}")
        assert got == {"ok": True, "ranks": [0, 1]}, got
        ids = tmp_path / "resumed-id"  # from `join`: the gang is cloned, join and end run again
        flow_cmd(user, flow, "argo-workflows", "--name", name, "resume", "join", "--origin-run-id", run_id,
                 "--run-id-file", str(ids))
        runs.append(ids.read_text().strip())
        wf = wait_workflow(cluster_env, runs[-1])
        assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
        got = read_run(user, f"DistributedTrainingFlow/{runs[-1]}",
                       "{'ok': run.successful, 'join': 'origin-task-id' in run['join'].task.metadata_dict, "
                       "'train': sorted(t.metadata_dict.get('origin-run-id') for t in run['train'] "
                       "if 'origin-task-id' in t.metadata_dict)}")
        assert got == {"ok": True, "join": False, "train": [run_id, run_id]}, got  # the gang cloned, join ran
        listed = json.loads(flow_cmd(user, flow, "argo-workflows", "--name", name, "list-runs", "--json").stdout)
        assert [(r["run_id"], r["status"]) for r in listed] == [(runs[1], "Succeeded"), (run_id, "Succeeded")], listed
        deleted = flow_cmd(user, flow, "argo-workflows", "--name", name, "delete")
        said = " ".join((deleted.stdout + deleted.stderr).split())
        assert "Argo Server cannot delete Role" in said and not exists(cluster_env, "workflowtemplate", name), said
    finally:
        undeploy(cluster_env, flow, runs, "--name", name)
        for doc in rbac:
            kubectl(cluster_env, "delete", doc["kind"].lower(), doc["metadata"]["name"], "-n", ns, "--ignore-not-found")


def test_a_run_suspended_resumed_and_terminated_through_argo_server(argo_server_env, cluster_env, tmp_path):
    user = user_env(argo_server_env)
    flow = tmp_path / "sleeper.py"
    flow.write_text(SLEEPER)
    name = unique("sleeper-via-server")
    runs: list[str] = []
    flow_cmd(user, flow, "argo-workflows", "--name", name, "create")
    try:
        run_id = start(user, flow, name, runs)
        workflow = run_id.removeprefix("argo-")
        flow_cmd(user, flow, "argo-workflows", "--name", name, "suspend", run_id)
        assert kube_json(cluster_env, "workflow", workflow)["spec"].get("suspend") is True
        flow_cmd(user, flow, "argo-workflows", "--name", name, "unsuspend", run_id)
        assert not kube_json(cluster_env, "workflow", workflow)["spec"].get("suspend")
        flow_cmd(user, flow, "argo-workflows", "--name", name, "terminate", run_id)
        assert_stopped(cluster_env, run_id)
    finally:
        undeploy(cluster_env, flow, runs, "--name", name)


@pytest.mark.parametrize("example", ["scheduled", "triggered"])
def test_a_schedule_and_a_sensor_deployed_and_deleted_through_argo_server(argo_server_env, cluster_env, tmp_path,
                                                                          example):
    """The CronWorkflow (Argo 3.7's one `schedule` sent as the one-item `schedules` hera's model
    holds, which 3.6+ reads the same), replacing one deployed through the Kubernetes API, and the
    Sensor (sent as JSON) created through Argo Server are taken by Argo's cron controller and Argo
    Events' (an event starts a run, read back with Metaflow's client); `delete` through Argo
    Server removes them."""
    user = user_env(argo_server_env)
    admin = {**cluster_env, "METAFLOW_DECOSPECS": SMALL_STEPS, "TMP_DIR": str(tmp_path)}
    flow = tmp_path / (example + ".py")
    flow.write_text((EXAMPLES / flow.name).read_text())
    name = unique(example[:5] + "-via-server")
    runs: list[str] = []
    if example == "scheduled":  # first deployed through the Kubernetes API (3.7: its one `schedule`), then replaced
        flow_cmd(admin, flow, "argo-workflows", "--name", name, "create")
    created = flow_cmd(user, flow, "argo-workflows", "--name", name, "create")
    try:
        if example == "scheduled":
            said = (created.stdout + created.stderr).replace("*", "")
            assert "Replaced CronWorkflow %s" % name in said, said
            cron = kube_json(cluster_env, "cronworkflow", name)
            assert cron["spec"]["schedules"] == ["0 3 * * *"] and "schedule" not in cron["spec"], cron["spec"]
            assert cron["spec"]["timezone"] == "Europe/Berlin", cron["spec"]
            until("the cron controller scheduled " + name, lambda: controller_took_cron(cluster_env, name), timeout=60)
            made = ("cronworkflow", name)
        else:  # the EventSource was read through Argo Server (hera's EventSource model); the EventBus cannot be
            [unchecked] = [line for line in (created.stdout + created.stderr).splitlines() if "not checked" in line]
            assert "EventBus" in unchecked and "EventSource" not in unchecked, unchecked
            _triggered(admin, flow, name, runs)
            made = ("sensor", kube_json(cluster_env, "workflowtemplate", name)["metadata"]["annotations"][
                "metaflow/sensor_name"])
        flow_cmd(user, flow, "argo-workflows", "--name", name, "delete")
        assert not exists(cluster_env, *made) and not exists(cluster_env, "workflowtemplate", name)
    finally:
        undeploy(cluster_env, flow, runs, "--name", name)


DEPLOYER = """
import json, sys
from metaflow import Deployer
deployed = Deployer(sys.argv[1], show_output=False).argo_workflows(name=sys.argv[2]).create()
run = deployed.trigger()
run.wait_for_completion(check_interval=2, timeout=600)
print(json.dumps({"token": deployed.production_token, "run": run.pathspec, "status": run.status,
                  "ok": run.run.successful}))
"""


def test_the_deployer_api_through_argo_server(argo_server_env, cluster_env, tmp_path):
    """Metaflow's Deployer API with the Argo Server settings alone: create, trigger, the run's
    status while it runs and at its end, the production token: every read through Argo Server."""
    flow = tmp_path / "hello.py"
    flow.write_text((EXAMPLES / "hello.py").read_text())
    name = unique("deployer-via-server")
    argv = [sys.executable, "-c", DEPLOYER, flow.name, name]
    done = subprocess.run(argv, cwd=tmp_path, env=user_env(argo_server_env), capture_output=True, text=True,
                          timeout=900)
    got = json.loads(done.stdout.splitlines()[-1]) if done.returncode == 0 else {}
    try:
        assert done.returncode == 0, done.stderr
        assert got["status"] == "Succeeded" and got["ok"] is True, got
        assert got["token"] == kube_json(cluster_env, "workflowtemplate", name)["metadata"]["annotations"][
            "metaflow/production_token"]
    finally:
        undeploy(cluster_env, flow, [got["run"].split("/")[1]] if got.get("run") else [], "--name", name)
