"""Which pod failures restart a gang: the rules mfargo writes (templates/gang_policy.py) and
the runner's reading of them (runner/job_policy.py), checked against each other in-process."""

from __future__ import annotations

import metaflow  # noqa: F401 - loads the extension first, as in a pod
import pytest
from metaflow.exception import MetaflowException

from mfargo.compiler import ir
from mfargo.runner import job_policy
from mfargo.templates import gang_policy

from metaflow_extensions.mfargo.plugins import jobset_decorator


def outcome(exit_code, disrupted=False, container="train"):
    conditions = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}] if disrupted else []
    return job_policy.PodOutcome("p", "ns", container, "Failed", exit_code, "Error", "", conditions)


def decide(retry_on, pod):
    placement = ir.GangPlacement(max_restarts=1, retry_on=retry_on)
    return job_policy.action(gang_policy.pod_failure_policy(placement, "train"), pod)[0]


@pytest.mark.parametrize(
    "retry_on, pod, expected",
    [
        # Default: infrastructure restarts (Count -> BackoffLimitExceeded), user code fails now.
        (None, outcome(1), "FailJob"),
        (None, outcome(2), "FailJob"),
        (None, outcome(137), "Count"),
        (None, outcome(143), "Count"),
        (None, outcome(1, disrupted=True), "Count"),  # a disrupted pod's exit code says nothing
        # Only disruptions restart: a bare SIGKILL fails the JobSet.
        (("disruption",), outcome(137), "FailJob"),
        (("disruption",), outcome(137, disrupted=True), "Count"),
        # Everything restarts but SIGTERM.
        (("disruption", "killed", "error"), outcome(1), "Count"),
        (("disruption", "killed", "error"), outcome(143), "FailJob"),
        # Nothing restarts.
        ((), outcome(137, disrupted=True), "FailJob"),
        ((), outcome(137), "FailJob"),
        # A worker that could not reach the control (gang_control.py): infrastructure, always.
        (None, outcome(75), "Count"),
        (("disruption",), outcome(75), "Count"),
        ((), outcome(75), "Count"),
        (("disruption", "killed", "error"), outcome(75), "Count"),
    ],
)
def test_retry_on_sorts_failures(retry_on, pod, expected):
    categories = jobset_decorator.retry_on(retry_on, "train")
    assert decide(categories, pod) == expected


def test_other_containers_exit_codes_are_not_the_users():
    assert decide(jobset_decorator.retry_on(None, "train"), outcome(1, container="sidecar")) == "Count"


def test_jobset_rules_are_named_and_keyed_on_job_reasons():
    policy = gang_policy.failure_policy(ir.GangPlacement(max_restarts=3))
    assert policy["maxRestarts"] == 3
    assert [(r["name"], r["action"], r["onJobFailureReasons"]) for r in policy["rules"]] == [
        ("fail_on_user_code", "FailJobSet", ["PodFailurePolicy"]),
        ("restart_on_infrastructure", "RestartJobSet", ["BackoffLimitExceeded"]),
    ]


def test_the_job_controllers_message_names_container_pod_and_rule():
    policy = gang_policy.pod_failure_policy(ir.GangPlacement(), "train")
    assert job_policy.action(policy, outcome(3)) == (
        "FailJob", "Container train for pod ns/p failed with exit code 3 matching FailJob rule at index 2")
    assert job_policy.action(policy, outcome(137, disrupted=True))[1] == (
        "Pod ns/p has condition DisruptionTarget matching Count rule at index 0")


@pytest.mark.parametrize("bad", ["sometimes", ["error", "oops"], 3])
def test_bad_retry_on_is_one_line(bad):
    with pytest.raises(MetaflowException) as err:
        jobset_decorator.retry_on(bad, "train")
    assert "@jobset(retry_on=...)" in str(err.value) and "*train*" in str(err.value)
    assert "\n" not in str(err.value)


def test_runner_fault_annotation():
    got = job_policy.faults({job_policy.FAULTS_ANNOTATION: "worker-0@0=preempt, control-0@1=oom:7"})
    assert got == {("worker", 0, 0): job_policy.Fault("preempt", 3.0), ("control", 0, 1): job_policy.Fault("oom", 7.0)}
    oom = got[("control", 0, 1)].outcome("p", "ns", "train")
    assert (oom.exit_code, oom.reason, oom.conditions) == (137, "OOMKilled", [])
    with pytest.raises(ValueError):
        job_policy.faults({job_policy.FAULTS_ANNOTATION: "worker@0=preempt"})


@pytest.mark.parametrize("bad", ["big", {"cpu": 4, "colour": "red"}])
def test_bad_control_is_one_line(bad):
    with pytest.raises(MetaflowException) as err:
        jobset_decorator.control(bad, "train")
    assert "@jobset(control=...)" in str(err.value) and "*train*" in str(err.value) and "\n" not in str(err.value)


def test_gang_attempt_counts_started_attempts_in_the_datastore(tmp_path):
    """The next attempt follows the last started one, gaps in Argo/JobSet counters or not."""
    import os
    import subprocess
    import sys

    task = tmp_path / ".metaflow" / "F" / "argo-wf" / "train" / "control-e-0"
    env = dict(os.environ, METAFLOW_DEFAULT_DATASTORE="local", METAFLOW_DATASTORE_SYSROOT_LOCAL=str(tmp_path))
    cmd = [sys.executable, "-m", "metaflow_extensions.mfargo.plugins.gang_attempt", "F", "argo-wf", "train", "control-e-0"]

    def next_attempt():
        return subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.strip()

    assert next_attempt() == "0"  # nothing started yet
    task.mkdir(parents=True)
    for name in ("0.attempt.json", "0.data.json", "1.attempt.json", "1.DONE.lock"):
        (task / name).write_text("{}")
    assert next_attempt() == "2"
