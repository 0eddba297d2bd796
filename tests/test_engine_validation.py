"""The examples pass Argo's and JobSet's own validation code (real `argo lint --offline`; the
JobSet webhook's Default + ValidateCreate behind the API server's CRD checks), the tools
refuse what the engines refuse, and mfargo's encoding of the webhook's rules
(mfargo.validation.jobset) agrees with the webhook of the release the cluster serves.

Every other bundle the suite compiles goes through the same checks at the end of the
session (conftest.engine_checks)."""

from __future__ import annotations

import copy
import shutil

import pytest
import yaml

import engine_tools
from flowtools import EXAMPLES
from mfargo.validation import validate_documents
from test_jobset_webhook_rules import jobset

SERVED_JOBSET = "0.10"  # the release e2e/build.py builds (jobset-validate's go.mod pins v0.10.1)
EXAMPLE_BUNDLES = sorted(EXAMPLES.glob("*.yaml"))


def test_argo_lint_passes_every_example():
    lint = engine_tools.argo_lint(EXAMPLE_BUNDLES)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert len(EXAMPLE_BUNDLES) == 9


def test_argo_lint_refuses_what_argo_refuses(tmp_path):
    wft = yaml.safe_load_all((EXAMPLES / "hello.yaml").read_text()).__next__()
    broken = copy.deepcopy(wft)
    broken["spec"]["templates"][0]["dag"]["tasks"][0]["template"] = "no-such-template"
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(broken))
    lint = engine_tools.argo_lint([path])
    assert lint.returncode != 0
    assert "no-such-template" in lint.stdout + lint.stderr


def _write_manifests(tmp_path, bundles) -> list:
    paths = []
    for bundle in bundles:
        for template, text in engine_tools.gang_manifests(bundle.read_text()):
            path = tmp_path / ("%s.%s.yaml" % (bundle.stem, template))
            path.write_text(text)
            paths.append(path)
    return paths


def test_the_jobset_webhook_admits_every_examples_gang(tmp_path):
    paths = _write_manifests(tmp_path, EXAMPLE_BUNDLES)
    assert paths, "no example has a gang"
    admit = engine_tools.jobset_admit(paths)
    assert admit.returncode == 0, admit.stdout + admit.stderr


def test_the_jobset_webhook_refuses_the_rule_names_a_real_cluster_refused(tmp_path):
    [path] = _write_manifests(tmp_path, [EXAMPLES / "distributed_training.yaml"])
    manifest = yaml.safe_load(path.read_text())
    manifest["spec"]["failurePolicy"]["rules"][0]["name"] = "fail-on-user-code"
    path.write_text(yaml.safe_dump(manifest))
    admit = engine_tools.jobset_admit([path])
    assert admit.returncode == 1
    assert 'admission webhook "vjobset.kb.io" denied the request: invalid failure policy rule name ' \
           "'fail-on-user-code'" in admit.stdout


def test_the_session_check_names_the_bundle_and_the_test_that_compiled_it():
    recorder = engine_tools.Recorder()
    good = (EXAMPLES / "distributed_training.yaml").read_text()
    recorder.record(good, "test_good")
    recorder.record(good.replace("fail_on_user_code", "fail-on-user-code"), "test_bad")
    recorder.record("not a bundle", "test_other")
    assert len(recorder.made_by) == 2
    [problem] = recorder.problems()
    assert problem.startswith("the JobSet webhook refused ") and "(compiled by test_bad)" in problem
    assert "invalid failure policy rule name 'fail-on-user-code'" in problem
    assert recorder.dir.is_dir()  # kept for the one refused; removed here
    shutil.rmtree(recorder.dir)


def test_the_api_servers_crd_checks_run_before_the_webhook(tmp_path):
    js = jobset()
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["backofLimit"] = 0  # a typo: strict decoding
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(js))
    admit = engine_tools.jobset_admit([path])
    assert admit.returncode == 1 and "backofLimit" in admit.stdout


def _long_name():
    js = jobset()
    js["metadata"]["name"] = "j" * 46
    return js


def _with(**spec):
    return lambda: jobset(**spec)


def _replicated(index, **fields):
    def make():
        js = jobset()
        js["spec"]["replicatedJobs"][index].update(fields)
        return js
    return make


CASES = {
    "mfargo's rule names": _with(failurePolicy={"rules": [{"name": "fail_on_user_code", "action": "FailJobSet"}]}),
    "hyphenated rule name": _with(failurePolicy={"rules": [{"name": "fail-on-user-code", "action": "FailJobSet"}]}),
    # (A rule without `name` is refused by the CRD mfargo checks against, named by the webhook on a cluster.)
    "unnamed rules": _with(failurePolicy={"rules": [{"name": "", "action": "FailJobSet"},
                                                    {"name": "", "action": "RestartJobSet"}]}),
    "clashing default name": _with(failurePolicy={"rules": [{"name": "", "action": "FailJobSet"},
                                                            {"name": "failurePolicyRule0", "action": "RestartJobSet"}]}),
    "unknown job failure reason": _with(failurePolicy={"rules": [{"name": "r", "action": "FailJobSet",
                                                                  "onJobFailureReasons": ["OOMKilled"]}]}),
    "unknown rule target": _with(failurePolicy={"rules": [{"name": "r", "action": "FailJobSet",
                                                           "targetReplicatedJobs": ["ctrl"]}]}),
    "unknown success target": _with(successPolicy={"operator": "All", "targetReplicatedJobs": ["ctrl"]}),
    "dotted subdomain": _with(network={"subdomain": "a.b"}),
    "good subdomain": _with(network={"subdomain": "js-abc"}),
    "pod name over 63 chars": _long_name,
    "managedBy without a domain": _with(managedBy="multikueue"),
    "managedBy with a domain": _with(managedBy="kueue.x-k8s.io/multikueue"),
    "coordinator beyond the jobs": _with(coordinator={"replicatedJob": "worker", "jobIndex": 3}),
    "coordinator on a pod": _with(coordinator={"replicatedJob": "worker", "jobIndex": 2, "podIndex": 0}),
    "first job depends on another": _replicated(0, dependsOn=[{"name": "control", "status": "Ready"}]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mfargo_refuses_exactly_what_the_served_webhook_refuses(case, tmp_path):
    js = CASES[case]()
    path = tmp_path / "js.yaml"
    path.write_text(yaml.safe_dump(js))
    webhook_refuses = engine_tools.jobset_admit([path]).returncode != 0
    mfargo_refuses = bool(validate_documents([js], jobset_version=SERVED_JOBSET))
    assert mfargo_refuses == webhook_refuses, (case, validate_documents([js], jobset_version=SERVED_JOBSET),
                                               engine_tools.jobset_admit([path]).stdout)


def test_argo_events_accepts_the_examples_sensor():
    checked = engine_tools.sensor_validate(EXAMPLE_BUNDLES)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert any(d and d.get("kind") == "Sensor" for p in EXAMPLE_BUNDLES for d in yaml.safe_load_all(p.read_text()))


def test_sensor_validate_refuses_what_argo_events_refuses(tmp_path):
    sensor = next(d for d in yaml.safe_load_all((EXAMPLES / "triggered.yaml").read_text()) if d["kind"] == "Sensor")
    no_event = copy.deepcopy(sensor)
    del no_event["spec"]["dependencies"][0]["eventName"]
    unknown = copy.deepcopy(sensor)
    unknown["spec"]["triggers"][0]["template"]["k8s"]["sourceTypo"] = {}
    for name, doc in (("no_event", no_event), ("unknown", unknown)):
        (tmp_path / (name + ".yaml")).write_text(yaml.safe_dump(doc))
    checked = engine_tools.sensor_validate([tmp_path / "no_event.yaml", tmp_path / "unknown.yaml"])
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert checked.stdout.splitlines() == [
        "%s: Sensor %s: event dependency must define the EventName" % (tmp_path / "no_event.yaml",
                                                                     sensor["metadata"]["name"]),
        "%s: Sensor (document 0): error unmarshaling JSON: while decoding JSON: json: unknown field "
        "\"sourceTypo\"" % (tmp_path / "unknown.yaml")], checked.stdout
