"""Metaflow's Deployer API (`Deployer(flow).argo_workflows()`) runs on mfargo's provider,
against the loopback fake Kubernetes API."""

from __future__ import annotations

import textwrap

import pytest
from flowtools import clean_env
from k8s_fake import kube  # noqa: F401 - fixture
from test_cluster_cli import FLOW


@pytest.fixture
def deployer_env(kube, tmp_path, monkeypatch):  # noqa: F811
    import metaflow.metaflow_config as config

    (tmp_path / "flow.py").write_text(textwrap.dedent(FLOW))
    env = clean_env(home=tmp_path / "mfhome", USER="alice", KUBECONFIG=str(kube.kubeconfig(tmp_path / "kc")),
                    METAFLOW_KUBERNETES_NAMESPACE="ns1")
    for key in list(clean_env()):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(config, "KUBERNETES_NAMESPACE", "ns1")  # this process read its config at import
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_deployer_create_trigger_and_manage_a_run(deployer_env, kube):  # noqa: F811
    from metaflow import Deployer

    from metaflow_extensions.mfargo.plugins.deployer import MfargoArgoWorkflowsDeployer

    deployer = Deployer("flow.py", show_output=False, datastore="s3",
                        datastore_root="s3://mfargo-test/deployer").argo_workflows()
    assert isinstance(deployer, MfargoArgoWorkflowsDeployer)
    deployed = deployer.create(code_in_image="/app")
    assert (deployed.name, deployed.flow_name) == ("helloflow", "HelloFlow")
    assert deployed.metadata.startswith("local@")
    token = deployed.production_token
    assert token and token.startswith("helloflow-")
    assert [r.body["kind"] for r in kube.calls("POST")] == ["WorkflowTemplate"]

    run = deployed.trigger(who="deployer", times=2)
    [post] = kube.calls("POST", "workflows")
    assert post.body["spec"]["workflowTemplateRef"] == {"name": "helloflow"}
    params = {p["name"]: p["value"] for p in post.body["spec"]["arguments"]["parameters"]}
    assert params["who"] == "deployer" and params["times"] == "2"
    name = next(k[4] for k in kube.objects if k[3] == "workflows")
    assert run.pathspec == "HelloFlow/argo-" + name
    assert run.status == "Pending" and run.is_running

    wf = kube.get("workflows", name, "ns1")
    wf["metadata"]["annotations"].update(kube.get("workflowtemplates", "helloflow", "ns1")["spec"]["workflowMetadata"]
                                         ["annotations"])
    assert run.suspend() is True
    assert kube.get("workflows", name, "ns1")["spec"]["suspend"] is True
    assert run.terminate() is True
    assert kube.get("workflows", name, "ns1")["spec"]["shutdown"] == "Terminate"
    kube.get("workflows", name, "ns1")["status"] = {"phase": "Failed", "finishedAt": "2024-01-01T00:00:00Z"}
    assert run.status == "Failed" and not run.is_running
    assert run.terminate() is False  # already finished: the command exits 1

    kube.reset_log()
    resumed = deployed.resume(origin_run_id=run.pathspec.split("/")[1], step_to_rerun="end")
    [post] = kube.calls("POST", "workflows")
    params = {p["name"]: p["value"] for p in post.body["spec"]["arguments"]["parameters"]}
    assert params["mfargo-origin-run-id"] == run.pathspec.split("/")[1] and params["mfargo-resume-step"] == "end"
    assert params["who"] == "deployer"
    assert resumed.pathspec.startswith("HelloFlow/argo-") and resumed.pathspec != run.pathspec

    assert deployed.delete() is True
    assert kube.names("workflowtemplates", "ns1") == []
    assert deployed.production_token is None


def test_deployer_only_json_returns_the_template_without_deploying(deployer_env, kube):  # noqa: F811
    from metaflow import Deployer

    deployed = Deployer("flow.py", show_output=False, datastore="s3",
                        datastore_root="s3://mfargo-test/deployer").argo_workflows(name="other").create(
        code_in_image="/app", only_json=True)
    assert deployed.name == "other"
    assert deployed.workflow_template["kind"] == "WorkflowTemplate"
    assert "metaflow/production_token" not in deployed.workflow_template["metadata"].get("annotations", {})
    assert kube.requests == []
