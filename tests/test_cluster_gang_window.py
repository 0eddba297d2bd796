"""A gang starts whole or lets go (@jobset(start_window=...)), on the real engine.

Three ranks of 1 CPU each on the first node's 2 CPUs (the second node is tainted): the ranks
that fit start and hold the CPUs while the third stays Pending ("Insufficient cpu"). Without
the window nothing would end it before the step's @timeout (Metaflow's default: 5 days). The
run's gang watch (plugins/queue_watch.py) deletes the JobSet once the window has passed with a
rank not started, after recording why as an Event; the step fails (no @retry here), the node's
CPUs are free again, and the failure report names the rank that never started and the
scheduler's reason. Unit tests of the watch's decision: tests/test_queue_watch.py."""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest

from clustertools import failed_nodes, kubectl, wait_workflow
from flowtools import gang_flow
from test_cluster_gangs import deployed, nodes_by_name, write_flow

pytestmark = pytest.mark.cluster

WINDOW = 45
# Each started rank sleeps well past the window: were the gang let be, it would hold the CPUs.
NEVER_WHOLE = gang_flow("GangNeverWholeFlow", "@kubernetes(cpu=1, memory=300)\n@jobset(start_window=%d)" % WINDOW,
                        body="import time\ntime.sleep(600)", num_parallel=3)


def when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_a_gang_that_cannot_start_whole_is_let_go_after_its_window_with_the_cause(cluster_env, tmp_path):
    ns = cluster_env["METAFLOW_KUBERNETES_NAMESPACE"]
    flow = write_flow(tmp_path, "GangNeverWholeFlow", NEVER_WHOLE)
    with deployed(cluster_env, flow) as start:
        run = start(flow)
        wf = wait_workflow(cluster_env, run, timeout=300)
        workflow = run.removeprefix("argo-")
        left = json.loads(kubectl(cluster_env, "get", "pods", "-n", ns, "-o", "json", "-l",
                                  "workflows.argoproj.io/workflow=%s,jobset.sigs.k8s.io/jobset-name" % workflow))["items"]
        jobsets = json.loads(kubectl(cluster_env, "get", "jobsets", "-n", ns, "-o", "json", "-l",
                                     "workflows.argoproj.io/workflow=" + workflow))["items"]
        events = json.loads(kubectl(cluster_env, "get", "events", "-n", ns, "-o", "json", "--field-selector",
                                    "involvedObject.kind=JobSet,reason=GangNotStarted"))["items"]
    assert wf["status"]["phase"] == "Failed", failed_nodes(wf)
    nodes = nodes_by_name(wf)
    [train] = nodes["train"]
    took = (when(train["finishedAt"]) - when(train["startedAt"])).total_seconds()
    # The window counts from the JobSet's creation, a few seconds into the step; then a poll
    # (5 s) and the foreground deletion (the started ranks' pods stop first).
    assert train["phase"] in ("Failed", "Error") and WINDOW <= took <= WINDOW + 90, (train["phase"], took,
                                                                                      train.get("message"))
    [report] = nodes["train-Failure-report"]
    assert re.search(r"gang step train: JobSet js-\w+ deleted by the run's gang watch: not started whole within "
                     r"its @jobset\(start_window\) of %d s \(\d+ s since it became active; ranks? [\d, ]+ started\): "
                     r"rank \d \((control|worker)\), pod \S+: Unschedulable: 0/2 nodes are available: "
                     r"1 Insufficient cpu" % WINDOW, report["message"]), report["message"]
    assert left == [] and jobsets == [], ([p["metadata"]["name"] for p in left], jobsets)
    jobset_name = re.search(r"JobSet (js-\w+)", report["message"]).group(1)
    assert [e["involvedObject"]["name"] for e in events if e["involvedObject"]["name"] == jobset_name] == [jobset_name]
    [watch] = nodes["Queue-watch"]
    assert watch["phase"] == "Succeeded", watch


RETRIED = gang_flow("GangRetriedWindowFlow", "@kubernetes(cpu=1, memory=300)\n@jobset(start_window=30)\n"
                                             "@retry(times=1, minutes_between_retries=0)",
                    body="import time\ntime.sleep(600)", num_parallel=3)


def test_the_steps_retry_makes_a_new_jobset_after_the_watch_lets_one_go(cluster_env, tmp_path):
    """Deleting the JobSet fails Argo's resource step as a queued gang's deadline does, so
    @retry(times=1) makes a second attempt with a JobSet of its own, let go in turn; the report
    runs once, after it, and names the second JobSet."""
    ns = cluster_env["METAFLOW_KUBERNETES_NAMESPACE"]
    flow = write_flow(tmp_path, "GangRetriedWindowFlow", RETRIED)
    with deployed(cluster_env, flow) as start:
        run = start(flow)
        wf = wait_workflow(cluster_env, run, timeout=360)
        events = json.loads(kubectl(cluster_env, "get", "events", "-n", ns, "-o", "json", "--field-selector",
                                    "involvedObject.kind=JobSet,reason=GangNotStarted"))["items"]
    assert wf["status"]["phase"] == "Failed", failed_nodes(wf)
    nodes = nodes_by_name(wf)
    phases = [[n["phase"] for n in nodes.get("train(%d)" % i, [])] for i in (0, 1)]
    assert all(p in (["Failed"], ["Error"]) for p in phases), (phases, sorted(nodes))
    [report] = nodes["train-Failure-report"]
    last = re.search(r"JobSet (js-[\w-]+) deleted by the run's gang watch", report["message"])
    assert last and "Insufficient cpu" in report["message"], report["message"]
    let_go = {e["involvedObject"]["name"] for e in events}
    # Both attempts' JobSets, one name each (a JobSet's name ends with its attempt), the last reported.
    mine = {name for name in let_go if name[:-1] == last.group(1)[:-1]}
    assert last.group(1) in mine and len(mine) == 2, (mine, let_go)
