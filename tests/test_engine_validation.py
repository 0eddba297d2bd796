"""The examples pass Argo's and JobSet's own validation code (real `argo lint --offline` of each
Argo release mfargo targets; the webhooks of each JobSet release, behind the API server's CRD
checks), the tools refuse what the engines refuse, and mfargo's encoding of the webhook's rules
(mfargo.base.validation.jobset) agrees with the webhook of every JobSet release built.

Every other bundle the suite compiles goes through the same checks at the end of the
session (conftest.engine_checks)."""

from __future__ import annotations

import copy
import shutil

import pytest
import yaml

import engine_tools
from flowtools import EXAMPLES, compile_file, example_args
from mfargo.base.validation import validate_documents
from mfargo.base.versions import ARGO_VERSIONS, DEFAULT_ARGO_VERSION
from test_jobset_webhook_rules import jobset

EXAMPLE_BUNDLES = sorted(EXAMPLES.glob("*.yaml"))


def _minor(release: str) -> str:
    return ".".join(release.lstrip("v").split(".")[:2])


@pytest.mark.parametrize("target", ARGO_VERSIONS)
def test_argo_lint_of_the_targeted_release_passes_every_example(target, tmp_path):
    bundles = EXAMPLE_BUNDLES
    if target != DEFAULT_ARGO_VERSION:  # the checked-in examples are compiled for the default
        bundles = []
        for flow in sorted(EXAMPLES.glob("*.py")):
            out = tmp_path / (flow.stem + ".yaml")
            compile_file(flow, *example_args(flow), "--argo-version", target, "--output-file", str(out))
            bundles.append(out)
    assert len(bundles) == 9
    release = engine_tools.argo_release(target)
    lint = engine_tools.argo_lint(bundles, release)
    assert lint.returncode == 0, (release, lint.stdout + lint.stderr)


def test_each_argo_target_is_linted_by_a_release_of_its_major_version():
    assert {target: engine_tools.argo_release(target) for target in ARGO_VERSIONS} == {"3.7": "v3.7.18", "4.1": "v4.0.5"}
    assert {release: engine_tools.argo_target(release) for release in engine_tools.ARGO_RELEASES} == \
        {"v3.7.18": "3.7", "v4.0.5": "4.1"}
    assert engine_tools.jobset_releases("0.12") == ["v0.12.0"]
    assert engine_tools.jobset_releases("0.10") == ["v0.12.0", "v0.11.1", "v0.10.1"]
    assert engine_tools.jobset_releases("0.8") == ["v0.12.0", "v0.11.1", "v0.10.1"]


@pytest.mark.parametrize("release", engine_tools.ARGO_RELEASES)
def test_argo_lint_refuses_what_argo_refuses(release, tmp_path):
    wft = yaml.safe_load_all((EXAMPLES / "hello.yaml").read_text()).__next__()
    broken = copy.deepcopy(wft)
    broken["spec"]["templates"][0]["dag"]["tasks"][0]["template"] = "no-such-template"
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(broken))
    lint = engine_tools.argo_lint([path], release)
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


@pytest.mark.parametrize("release", engine_tools.JOBSET_RELEASES)
def test_the_jobset_webhook_of_each_release_admits_every_examples_gang(release, tmp_path):
    paths = _write_manifests(tmp_path, EXAMPLE_BUNDLES)
    assert paths, "no example has a gang"
    admit = engine_tools.jobset_admit(paths, release)
    assert admit.returncode == 0, admit.stdout + admit.stderr


@pytest.mark.parametrize("release", engine_tools.JOBSET_RELEASES)
def test_the_jobset_webhook_refuses_the_rule_names_a_real_cluster_refused(release, tmp_path):
    [path] = _write_manifests(tmp_path, [EXAMPLES / "distributed_training.yaml"])
    manifest = yaml.safe_load(path.read_text())
    manifest["spec"]["failurePolicy"]["rules"][0]["name"] = "fail-on-user-code"
    path.write_text(yaml.safe_dump(manifest))
    admit = engine_tools.jobset_admit([path], release)
    assert admit.returncode == 1
    [line] = admit.stdout.splitlines()
    assert line.startswith('%s: admission webhook "vjobset.kb.io" denied the request: ' % path), line
    assert "invalid failure policy rule name 'fail-on-user-code'" in line


def test_the_session_check_names_the_bundle_and_the_test_that_compiled_it():
    recorder = engine_tools.Recorder()
    good = (EXAMPLES / "distributed_training.yaml").read_text()
    recorder.record(good, "test_good")
    recorder.record(good.replace("fail_on_user_code", "fail-on-user-code"), "test_bad")
    recorder.record("not a bundle", "test_other")
    assert len(recorder.made_by) == 2
    [problem] = recorder.problems()
    assert problem.startswith("the JobSet v0.12.0 webhook refused ") and "(compiled by test_bad)" in problem
    assert "invalid failure policy rule name 'fail-on-user-code'" in problem
    assert recorder.dir.is_dir()  # kept for the one refused; removed here
    shutil.rmtree(recorder.dir)


def test_the_api_servers_crd_checks_run_before_the_webhook(tmp_path):
    js = jobset()
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["backofLimit"] = 0  # a typo: strict decoding
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(js))
    admit = engine_tools.jobset_admit([path])
    assert admit.returncode == 1 and 'unknown field(s) "spec.replicatedJobs[0].template.spec.backofLimit"' in admit.stdout


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


@pytest.mark.parametrize("release", engine_tools.JOBSET_RELEASES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_mfargo_refuses_exactly_what_each_releases_webhook_refuses(case, release, tmp_path):
    js = CASES[case]()
    path = tmp_path / "js.yaml"
    path.write_text(yaml.safe_dump(js))
    admit = engine_tools.jobset_admit([path], release)
    mfargo = validate_documents([js], jobset_version=_minor(release))
    assert bool(mfargo) == (admit.returncode != 0), (case, release, mfargo, admit.stdout)


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


def test_the_session_check_lints_each_bundle_with_the_argo_release_it_targets(tmp_path):
    """Argo 4 dropped the CronWorkflow's single `schedule` that mfargo writes for Argo 3.7: the
    same bundle passes the 3.7 lint it was compiled for and is refused by the 4.x one."""
    out = tmp_path / "scheduled.yaml"
    flow = EXAMPLES / "scheduled.py"
    compile_file(flow, *example_args(flow), "--argo-version", "3.7", "--output-file", str(out))
    bundle = out.read_text()
    right, wrong = engine_tools.Recorder(), engine_tools.Recorder()
    right.record(bundle, "test_37", "3.7")
    wrong.record(bundle, "test_41", "4.1")
    assert right.problems() == []
    [problem] = wrong.problems()
    assert problem.startswith("argo lint v4.0.5 refused ") and "(compiled by test_41)" in problem
    assert 'unknown field "spec.schedule"' in problem
    shutil.rmtree(wrong.dir)
