"""Gangs whose pods never run end their step at its deadline, with a report naming the cause:
one whose image cannot be pulled (the cluster's private registry, no pull secret) and one no
node can hold (more CPU than the node has). Nothing fails a Pending pod, so the step's
@timeout (each Job's activeDeadlineSeconds) is what ends them; the failure report then reads
why the pod never started from its Events (plugins/gang_failure.never_started). A gang naming a
Kueue queue that does not exist would never be admitted: `create` refuses it."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from clustertools import argo_target, failed_nodes, kubectl, wait_workflow
from flowtools import gang_flow
from test_cluster_gangs import deployed, nodes_by_name, write_flow

pytestmark = pytest.mark.cluster


def never_starts(name: str, pod: str) -> str:
    """A gang whose pods (``@kubernetes(pod)``) cannot start, ended by its step's @timeout."""
    return gang_flow(name, "@kubernetes(%s)\n@timeout(seconds=60)" % pod)


def test_gangs_that_never_start_end_at_their_deadline_with_the_cause(cluster_env, tmp_path):
    image = cluster_env["MFARGO_E2E_PRIVATE_IMAGE"]
    unpullable = write_flow(tmp_path, "UnpullableGangFlow", never_starts(
        "UnpullableGangFlow", "cpu=0.25, memory=300, image=%r, image_pull_policy='Always'" % image))
    unschedulable = write_flow(tmp_path, "UnschedulableGangFlow", never_starts("UnschedulableGangFlow", "cpu=64, memory=300"))
    with deployed(cluster_env, unpullable, unschedulable) as start:
        runs = {"pull": start(unpullable), "schedule": start(unschedulable)}
        wfs = {what: wait_workflow(cluster_env, run, timeout=420) for what, run in runs.items()}
    causes = {"pull": r"never started: Failed: Failed to pull image \"%s\": .*401 Unauthorized" % re.escape(image),
              "schedule": r"never started: FailedScheduling: 0/2 nodes are available: 1 Insufficient cpu, "
                          r"1 node\(s\) had untolerated taint"}
    for what, wf in wfs.items():
        assert wf["status"]["phase"] == "Failed", failed_nodes(wf)
        nodes = nodes_by_name(wf)
        assert [n["phase"] for n in nodes["train"]] == ["Failed"], nodes["train"]
        [report] = nodes["train-Failure-report"]
        assert re.search(r"gang step train: rank \d \(\w+\) failed first: DeadlineExceeded, no exit code: "
                         + causes[what], report["message"]), (what, report["message"])


NO_CONTROL = gang_flow("GangNoControlFlow", """
@kubernetes(cpu=0.25, memory=300, hostname_resolution_timeout=30)
@jobset(control={"cpu": 64})
""")


def test_a_worker_whose_control_never_starts_is_reported_as_control_unreachable(cluster_env, tmp_path):
    """The control (a pod of its own no node can hold) never starts; the worker waits for it for
    hostname_resolution_timeout, then stops with exit 75: infrastructure, not the user's code,
    and the report says so in words."""
    flow = write_flow(tmp_path, "GangNoControlFlow", NO_CONTROL)
    with deployed(cluster_env, flow) as start:
        wf = wait_workflow(cluster_env, start(flow), timeout=420)
    assert wf["status"]["phase"] == "Failed", failed_nodes(wf)
    [report] = nodes_by_name(wf)["train-Failure-report"]
    assert re.search(r"gang step train: rank 1 \(worker\) failed first: ControlUnreachable, exit code 75: \S.*"
                     r"\(pod \S+; JobSet \S+: \w+ after 0 restarts\)", report["message"]), report["message"]


def test_a_gang_naming_a_missing_kueue_queue_is_not_deployed(cluster_env, tmp_path):
    """Kueue would hold a JobSet naming a LocalQueue that does not exist suspended for ever:
    `create` asks the API server (Kueue's LocalQueue API is served, the queue is not there),
    exits 1 with one line, and creates nothing. (Without Kueue at all: tests/test_cluster_prerequisites.py.)"""
    flow = write_flow(tmp_path, "GangQueuedFlow", NO_CONTROL.replace('@jobset(control={"cpu": 64})',
                                                                    '@jobset(queue="team-a")'))
    refused = subprocess.run([sys.executable, flow.name, "argo-workflows", "create", *argo_target(cluster_env)],
                             cwd=tmp_path, env=cluster_env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stdout + refused.stderr
    [line] = [ln for ln in refused.stderr.splitlines() if ln.startswith("mfargo:")]
    ns = cluster_env["METAFLOW_KUBERNETES_NAMESPACE"]
    assert line == ("mfargo: nothing deployed: the cluster lacks what the workflow needs: no LocalQueue %s/team-a "
                    "(named by @jobset(queue=...))" % ns)
    assert kubectl(cluster_env, "get", "workflowtemplates", "-n", ns, "-o", "name").split().count(
        "workflowtemplate.argoproj.io/gangqueuedflow") == 0
