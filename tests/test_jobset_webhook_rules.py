"""The JobSet admission webhook's create rules, per targeted release (mfargo.base.validation.jobset).

Each case is a JobSet the CRD schema accepts and the webhook of some releases refuses
(kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go, read at v0.6.0 ... v0.12.0); the
message names the targeted release. The gang manifests mfargo writes pass every release.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from flowtools import EXAMPLES
from mfargo.base.validation import validate_documents
from mfargo.base.validation.jobset import RULE_NAME
from mfargo.compiler import ir
from mfargo.templates import gang_policy

RELEASES = ("0.6", "0.7", "0.8", "0.9", "0.10", "0.11", "0.12")


def jobset(**spec) -> dict:
    pod = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "python:3.12"}]}
    job = {"template": {"spec": {"backoffLimit": 0, "completions": 1, "parallelism": 1, "template": {"spec": pod}}}}
    base = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js-abc"},
        "spec": {"replicatedJobs": [{"name": "control", "replicas": 1, **copy.deepcopy(job)},
                                    {"name": "worker", "replicas": 3, **copy.deepcopy(job)}]},
    }
    base["spec"].update(spec)
    return base


def webhook_problems(js: dict, release: str) -> list[str]:
    problems = validate_documents([js], jobset_version=release)
    refused = [p for p in problems if "admission webhook" in p]
    assert refused == problems, "the schema refused it too: %s" % problems
    return refused


def refused_by(js: dict, releases=RELEASES) -> list[str]:
    """The releases whose webhook refuses `js`; each refusal names its release."""
    out = []
    for release in releases:
        problems = webhook_problems(js, release)
        assert all("JobSet v%s's admission webhook" % release in p for p in problems)
        if problems:
            out.append(release)
    return out


def test_the_rule_names_mfargo_writes_are_ones_the_webhook_admits():
    names = [r["name"] for r in gang_policy.failure_policy(ir.GangPlacement())["rules"]]
    assert names and all(RULE_NAME.match(n) for n in names)


def test_the_examples_gang_manifest_passes_every_release():
    bundle = list(yaml.safe_load_all((EXAMPLES / "distributed_training.yaml").read_text()))
    for release in RELEASES:
        assert validate_documents(bundle, jobset_version=release) == [], release


@pytest.mark.parametrize("name", ["fail-on-user-code", "1st", "ends,", "a" * 129, "has space"])
def test_rule_names_outside_the_webhooks_pattern_are_refused_by_every_release(name):
    js = jobset(failurePolicy={"maxRestarts": 1, "rules": [
        {"name": name, "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}]})
    assert refused_by(js) == list(RELEASES)
    assert "failure policy rule name %r" % name in webhook_problems(js, "0.10")[0]


@pytest.mark.parametrize("name", ["fail_on_user_code", "a", "A,b:c_", "x" * 128])
def test_rule_names_in_the_pattern_pass(name):
    js = jobset(failurePolicy={"rules": [{"name": name, "action": "FailJobSet"}]})
    assert refused_by(js) == []


def test_rule_names_are_unique_after_the_mutating_webhook_names_unnamed_rules():
    unnamed = [{"name": "", "action": "FailJobSet"}, {"name": "", "action": "RestartJobSet"}]
    assert refused_by(jobset(failurePolicy={"rules": unnamed})) == []  # failurePolicyRule0, failurePolicyRule1
    clash = [{"name": "", "action": "FailJobSet"}, {"name": "failurePolicyRule0", "action": "RestartJobSet"}]
    assert refused_by(jobset(failurePolicy={"rules": clash})) == list(RELEASES)


def test_job_failure_reasons_are_the_job_controllers():
    js = jobset(failurePolicy={"rules": [{"name": "r", "action": "FailJobSet", "onJobFailureReasons": ["OOMKilled"]}]})
    assert refused_by(js) == list(RELEASES)
    assert "'OOMKilled' is not a Job failure reason" in webhook_problems(js, "0.12")[0]


def test_targets_must_name_replicated_jobs():
    js = jobset(failurePolicy={"rules": [{"name": "r", "action": "FailJobSet", "targetReplicatedJobs": ["ctrl"]}]})
    assert refused_by(js) == list(RELEASES)


def test_subdomain_must_be_a_dns1035_label():
    assert refused_by(jobset(network={"subdomain": "a.b"})) == list(RELEASES)
    assert refused_by(jobset(network={"subdomain": "9lives"})) == list(RELEASES)
    assert refused_by(jobset(network={"subdomain": "js-abc"})) == []


def test_pod_names_with_the_job_controllers_suffix_must_fit_63_chars():
    js = jobset()
    js["metadata"]["name"] = "j" * 45  # j...j-control-0-0-abcde = 63: fits; one more char does not
    assert refused_by(js) == []
    js["metadata"]["name"] = "j" * 46
    assert refused_by(js) == list(RELEASES)
    assert "pod name" in webhook_problems(js, "0.6")[0]


def test_group_names_are_checked_from_v0_9():
    js = jobset()  # (0.9 to 0.11 are checked against the v0.8.2 CRD mfargo ships, which lacks groupName)
    js["spec"]["replicatedJobs"][1]["groupName"] = "Workers"
    assert refused_by(js, ("0.12",)) == ["0.12"]
    js["spec"]["replicatedJobs"][1]["groupName"] = "workers"
    assert refused_by(js, ("0.12",)) == []


def test_the_first_replicated_job_cannot_depend_on_another_from_v0_9():
    js = jobset()
    js["spec"]["replicatedJobs"][0]["dependsOn"] = [{"name": "control", "status": "Ready"}]
    assert refused_by(js, ("0.8", "0.9", "0.12")) == ["0.9", "0.12"]
    js["spec"]["replicatedJobs"][0].pop("dependsOn")
    js["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "control", "status": "Ready"}]
    assert refused_by(js, ("0.8", "0.12")) == []


def test_managed_by_is_a_short_domain_prefixed_path():
    assert refused_by(jobset(managedBy="kueue.x-k8s.io/multikueue")) == []
    assert refused_by(jobset(managedBy="multikueue")) == list(RELEASES)
    assert refused_by(jobset(managedBy="kueue.x-k8s.io/" + "m" * 60)) == list(RELEASES)


def test_coordinator_must_point_at_an_existing_pod():
    assert refused_by(jobset(coordinator={"replicatedJob": "worker", "jobIndex": 2, "podIndex": 0})) == []
    assert refused_by(jobset(coordinator={"replicatedJob": "worker", "jobIndex": 3})) == list(RELEASES)
    assert refused_by(jobset(coordinator={"replicatedJob": "worker", "podIndex": 1})) == list(RELEASES)


def test_restart_job_actions_need_an_alpha_gate_on_v0_12():
    js = jobset(failurePolicy={"rules": [{"name": "r", "action": "RestartJob"}]})
    assert refused_by(js, ("0.12",)) == ["0.12"]


def test_in_place_restart_needs_an_alpha_gate_from_v0_11():
    js = jobset(failurePolicy={"restartStrategy": "InPlaceRestart"})
    assert refused_by(js, ("0.12",)) == ["0.12"]


def test_volume_claim_templates_must_be_mounted_from_v0_11():
    claim = {"templates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}
    assert refused_by(jobset(volumeClaimPolicies=[claim]), ("0.12",)) == ["0.12"]
    js = jobset(volumeClaimPolicies=[claim])
    js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "data", "mountPath": "/data"}]
    assert refused_by(js, ("0.12",)) == []


def test_values_holding_argo_tags_wait_for_run_time():
    js = jobset(failurePolicy={"rules": [{"name": "{{inputs.parameters.rule}}", "action": "FailJobSet"}]})
    js["metadata"]["name"] = "{{workflow.name}}-" + "j" * 60
    assert refused_by(js) == []
