"""`create --max-concurrent-runs N` and `--schedule-concurrency-policy`: the semaphore on the
WorkflowTemplate, the ConfigMap holding its limit (deployed, replaced and deleted with the
rest of the bundle, through the core API), the CronWorkflow's policy; bad values in one line."""

from __future__ import annotations

import pytest
from k8s_fake import kube  # noqa: F401 - fixture
from test_cluster_cli import Env, one_line_error
from test_cluster_deployer import deployer_env  # noqa: F401 - fixture

from flowtools import compile_source, linear_flow
from mfargo.compiler import naming

SCHEDULED = linear_flow("ScheduledFlow", flow_decorators="@schedule(hourly=True)")


def by_kind(docs: list[dict]) -> dict[str, dict]:
    return {d["kind"]: d for d in docs}


@pytest.mark.parametrize("argo", ["4.1", "3.7"])
def test_a_limit_is_a_semaphore_on_the_template_whose_configmap_the_bundle_brings(tmp_path, argo):
    docs = by_kind(compile_source(tmp_path, SCHEDULED, "--max-concurrent-runs", "2", "--schedule-concurrency-policy",
                                  "Forbid", "--argo-version", argo))
    wt, config_map, cron = docs["WorkflowTemplate"], docs["ConfigMap"], docs["CronWorkflow"]
    name = naming.concurrency_config_map_name(wt["metadata"]["name"])
    assert wt["spec"]["synchronization"] == {"semaphores": [{"configMapKeyRef": {"name": name, "key": "runs"}}]}
    assert config_map["metadata"]["name"] == name and config_map["data"] == {"runs": "2"}
    assert config_map["apiVersion"] == "v1"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"


def test_without_the_options_nothing_changes(tmp_path):
    docs = by_kind(compile_source(tmp_path, SCHEDULED))
    assert "ConfigMap" not in docs
    assert "synchronization" not in docs["WorkflowTemplate"]["spec"]
    assert "concurrencyPolicy" not in docs["CronWorkflow"]["spec"]


@pytest.mark.parametrize("args, words", [
    (("--max-concurrent-runs", "0"), "--max-concurrent-runs must be a whole number from 1 to 2147483647"),
    (("--max-concurrent-runs", "3000000000"), "--max-concurrent-runs=3000000000 is more than 2,147,483,647"),
    (("--schedule-concurrency-policy", "Forbid"), "--schedule-concurrency-policy: the flow has no @schedule"),
])
def test_a_bad_value_is_one_line_and_writes_nothing(kube, tmp_path, args, words):  # noqa: F811
    env = Env(kube, tmp_path)
    proc = env.create("--only-yaml", *args, check=False)
    assert words in one_line_error(proc)
    assert proc.stdout == ""


def test_the_configmap_is_deployed_replaced_and_deleted_with_the_template(kube, tmp_path):  # noqa: F811
    env = Env(kube, tmp_path)
    env.create("--max-concurrent-runs", "1")
    name = naming.concurrency_config_map_name("helloflow")
    stored = kube.get("configmaps", name, "ns1", group="", version="v1")
    assert stored["data"] == {"runs": "1"}
    assert stored["metadata"]["annotations"]["metaflow/flow_name"] == "HelloFlow"  # whose it is
    template = kube.get("workflowtemplates", "helloflow", "ns1")
    assert template["spec"]["synchronization"]["semaphores"][0]["configMapKeyRef"]["name"] == name
    env.create("--max-concurrent-runs", "3")
    assert kube.get("configmaps", name, "ns1", group="", version="v1")["data"] == {"runs": "3"}
    env.create()  # no limit any more: the old ConfigMap goes with the semaphore
    assert kube.get("configmaps", name, "ns1", group="", version="v1") is None
    env.create("--max-concurrent-runs", "1")
    env.run("delete")
    assert kube.get("configmaps", name, "ns1", group="", version="v1") is None
    assert kube.get("workflowtemplates", "helloflow", "ns1") is None


def test_the_deployer_takes_the_limit_as_a_keyword(deployer_env, kube):  # noqa: F811
    from metaflow import Deployer

    deployed = Deployer("flow.py", show_output=False, datastore="s3",
                        datastore_root="s3://mfargo-test/deployer").argo_workflows().create(
        code_in_image="/app", max_concurrent_runs=1)
    name = naming.concurrency_config_map_name(deployed.name)
    assert kube.get("configmaps", name, "ns1", group="", version="v1")["data"] == {"runs": "1"}
    assert deployed.delete() is True
    assert kube.get("configmaps", name, "ns1", group="", version="v1") is None
