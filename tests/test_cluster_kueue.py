"""Gangs admitted by Kueue. e2e/cluster runs Kueue's controller (its JobSet integration only) and
one ResourceFlavor; each test makes its own ClusterQueue and LocalQueue, as a cluster's admin
would. A gang with `@jobset(queue=...)` is created suspended by Kueue's webhook, Argo's
resource step waits on it, and its pods are made only once Kueue admits the whole gang.
Facts are read from the Workloads Kueue keeps and from the pods, not from timing."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from datetime import datetime

import pytest
from flowtools import gang_flow
from clustertools import ON_EVERY_ARGO, argo_target, failed_nodes, kubectl, wait_workflow
from test_cluster_e2e import read_run
from test_cluster_gangs import BARRIER, MEET, SMALL, deployed, jobsets, nodes_by_name, write_flow

pytestmark = pytest.mark.cluster

KUEUE = "kueue.x-k8s.io/v1beta2"
FLAVOR = "mfargo-e2e"  # e2e/layout.KUEUE_FLAVOR, made by `up`


def queued(queue: str) -> str:
    """MEET (ranks exchange numbers through the control's host name) in Kueue's ``queue``."""
    assert SMALL in MEET
    return (MEET.replace(SMALL, SMALL + '\n    @jobset(queue="%s")' % queue)
            .replace("import FlowSpec,", "import FlowSpec, jobset,"))


def queue_objects(env: dict, name: str, cpu: str, preempt: bool = False, storage: bool = True) -> str:
    """A ClusterQueue with ``cpu`` of quota (memory and, if ``storage``, ephemeral storage
    plenty: every mfargo pod requests Metaflow's default disk), where a gang may preempt one of
    lower priority if ``preempt``, and a LocalQueue of the same name in the flows' namespace,
    as one List."""
    preemption = {"preemption": {"withinClusterQueue": "LowerPriority"}} if preempt else {}
    quotas = {"cpu": cpu, "memory": "8Gi", **({"ephemeral-storage": "200Gi"} if storage else {})}
    objects = [
        {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name},
         "spec": {**preemption, "namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": list(quotas),
             "flavors": [{"name": FLAVOR, "resources": [{"name": r, "nominalQuota": q} for r, q in quotas.items()]}]}]}},
        {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": name, "namespace": env["METAFLOW_KUBERNETES_NAMESPACE"]},
         "spec": {"clusterQueue": name}},
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})


@contextlib.contextmanager
def kueue_queue(env: dict, name: str, cpu: str, **kw):
    """``queue_objects`` applied, and deleted on exit."""
    kubectl(env, "apply", "-f", "-", input=queue_objects(env, name, cpu, **kw))
    try:
        yield name
    finally:
        kubectl(env, "delete", "--wait=false", "-n", env["METAFLOW_KUBERNETES_NAMESPACE"], "localqueues.kueue.x-k8s.io", name)
        kubectl(env, "delete", "--wait=false", "clusterqueues.kueue.x-k8s.io", name)


def workload_of(env: dict, jobset: str) -> dict:
    """The Workload Kueue made for ``jobset`` (it owns it)."""
    items = json.loads(kubectl(env, "get", "workloads.kueue.x-k8s.io", "-n", env["METAFLOW_KUBERNETES_NAMESPACE"],
                               "-o", "json"))["items"]
    [wl] = [w for w in items if any(o["name"] == jobset for o in w["metadata"].get("ownerReferences", []))]
    return wl


def conditions(obj: dict) -> dict[str, dict]:
    return {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}


def pods_of(env: dict, jobset: str) -> list[dict]:
    return json.loads(kubectl(env, "get", "pods", "-n", env["METAFLOW_KUBERNETES_NAMESPACE"], "-o", "json",
                              "-l", "jobset.sigs.k8s.io/jobset-name=" + jobset))["items"]


def when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_a_gang_kueue_could_never_admit_is_not_deployed(cluster_env, tmp_path):
    """A ClusterQueue that covers cpu and memory but not ephemeral-storage (which every mfargo
    pod requests) would leave the gang Pending for ever ("resource ephemeral-storage
    unavailable in ClusterQueue"): `create` reads the real Kueue's objects and refuses, with
    nothing created; with ephemeral-storage covered, it deploys."""
    flow = write_flow(tmp_path, "GangUncoveredFlow", queued("mfargo-uncovered"))
    ns = cluster_env["METAFLOW_KUBERNETES_NAMESPACE"]
    create = [sys.executable, flow.name, "argo-workflows", "create", *argo_target(cluster_env)]
    with kueue_queue(cluster_env, "mfargo-uncovered", cpu="1", storage=False):
        refused = subprocess.run(create, cwd=tmp_path, env=cluster_env, capture_output=True, text=True, timeout=300)
        templates = kubectl(cluster_env, "get", "workflowtemplates", "-n", ns, "-o", "name").split()
        kubectl(cluster_env, "apply", "-f", "-", input=queue_objects(cluster_env, "mfargo-uncovered", cpu="1"))
        with deployed(cluster_env, flow):
            pass  # `deployed` runs `create`, which must succeed now
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stdout + refused.stderr
    [line] = [ln for ln in refused.stderr.splitlines() if ln.startswith("mfargo:")]
    assert "workflowtemplate.argoproj.io/ganguncoveredflow" not in templates, templates
    assert line == ("mfargo: nothing deployed: the cluster lacks what the workflow needs: ClusterQueue "
                    "mfargo-uncovered (of LocalQueue %s/mfargo-uncovered) does not cover ephemeral-storage, which "
                    "step train's pods request: Kueue would never admit the gang" % ns)


def test_gangs_over_the_quota_are_admitted_whole_one_after_the_other(cluster_env, tmp_path):
    """Two runs of a gang of 2 ranks (0.25 CPU each) in a queue of 0.75 CPU: Kueue admits one
    gang; the other's JobSet waits suspended, with no pod, and Argo's step waits on it; it is
    admitted when the first has finished. Both runs succeed and their ranks meet."""
    flow = write_flow(tmp_path, "GangKueueFlow", queued("mfargo-quota"))
    with kueue_queue(cluster_env, "mfargo-quota", cpu="750m"), deployed(cluster_env, flow) as start:
        runs = [start(flow), start(flow)]
        wfs = [wait_workflow(cluster_env, run, timeout=600) for run in runs]
        for wf in wfs:
            assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
        gangs = []
        for run in runs:
            [js] = jobsets(cluster_env, run)
            name = js["metadata"]["name"]
            wl, pods = workload_of(cluster_env, name), pods_of(cluster_env, name)
            gangs.append({"queue": wl["spec"]["queueName"], "conditions": conditions(wl), "pods": pods,
                          "podsets": [(p["name"], p["count"]) for p in wl["spec"]["podSets"]]})
        got = [read_run(cluster_env, "GangKueueFlow/%s" % run, "run['join'].task.data.got") for run in runs]
    for gang in gangs:
        assert gang["queue"] == "mfargo-quota" and gang["podsets"] == [("rank", 2)], gang
        assert gang["conditions"]["Admitted"]["status"] == "True", gang["conditions"]
        assert (gang["conditions"]["Finished"]["status"], gang["conditions"]["Finished"]["reason"]) == (
            "True", "Succeeded"), gang["conditions"]
        assert len(gang["pods"]) == 2, [p["metadata"]["name"] for p in gang["pods"]]
    # Never partly started: the gang admitted second had no pod before the first's ranks had ended.
    first, second = sorted(gangs, key=lambda g: min(when(p["metadata"]["creationTimestamp"]) for p in g["pods"]))
    first_done = max(when(p["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"])
                     for p in first["pods"])
    second_made = min(when(p["metadata"]["creationTimestamp"]) for p in second["pods"])
    assert second_made >= first_done, (first_done, second_made)
    assert got == [[[0, 2, 1], [1, 2, 1]]] * 2, got


PREEMPTIBLE = '''
from metaflow import FlowSpec, current, jobset, kubernetes, parallel, step


class GangLowFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.train, num_parallel=2)

    %(small)s
    @jobset(queue="mfargo-preempt", priority_class="%(priority)s")
    @parallel
    @step
    def train(self):
        self.rank, self.attempt = current.parallel.node_index, current.retry_count
        self.total = barrier(self.rank, current.parallel.num_nodes, self.rank)
        time.sleep(%(work)d)
        self.next(self.join)

    @step
    def join(self, inputs):
        self.got = sorted([i.rank, i.total] for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    GangLowFlow()
'''


@contextlib.contextmanager
def priority_classes(env: dict, **values: int):
    """Kueue WorkloadPriorityClasses (cluster-wide) ``name=value``, deleted on exit."""
    items = [{"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}
             for name, value in values.items()]
    kubectl(env, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    try:
        yield
    finally:
        kubectl(env, "delete", "--wait=false", "workloadpriorityclasses.kueue.x-k8s.io", *values)


def wait_admitted_and_running(env: dict, run: str, timeout: float = 300) -> str:
    """The run's JobSet, once Kueue has admitted it and both its pods run (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        found = jobsets(env, run)
        if found:
            name = found[0]["metadata"]["name"]
            pods = pods_of(env, name)
            if len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods):
                return name
        assert time.monotonic() < deadline, "run %s: its gang not admitted and running within %d s" % (run, timeout)
        time.sleep(2)


def test_a_higher_priority_gang_preempts_a_lower_one_which_comes_back_and_succeeds(cluster_env, tmp_path):
    """A low-priority gang runs in a queue with room for one gang; a high-priority gang arrives:
    Kueue evicts the low one (its JobSet suspended, its pods gone), runs the high one, then
    admits the low one again. Its ranks run again as their next attempt, and its run succeeds
    with every rank's results in Metaflow's client."""
    def gang(name: str, priority: str, work: int):
        return write_flow(tmp_path, name, BARRIER + PREEMPTIBLE % {"small": SMALL, "priority": priority, "work": work})

    low, high = gang("GangLowFlow", "mfargo-low", 45), gang("GangHighFlow", "mfargo-high", 0)
    with priority_classes(cluster_env, **{"mfargo-low": 10, "mfargo-high": 1000}), \
            kueue_queue(cluster_env, "mfargo-preempt", cpu="750m", preempt=True), \
            deployed(cluster_env, low, high) as start:
        low_run = start(low)
        low_js = wait_admitted_and_running(cluster_env, low_run)
        high_run = start(high)
        for wf in (wait_workflow(cluster_env, high_run, timeout=600), wait_workflow(cluster_env, low_run, timeout=600)):
            assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
        evictions = workload_of(cluster_env, low_js).get("status", {}).get("schedulingStats", {}).get("evictions", [])
        got = read_run(cluster_env, "GangLowFlow/%s" % low_run,
                       "[run['join'].task.data.got, sorted([t.data.rank, t.data.attempt] for t in run['train'])]")
    assert [e["reason"] for e in evictions] == ["Preempted"], evictions
    assert got[0] == [[0, 1], [1, 1]], got
    assert all(attempt >= 1 for _, attempt in got[1]), got  # the ranks ran again, as their next attempt


NEVER_FITS = gang_flow("GangNeverFitsFlow", '@kubernetes(cpu=0.25, memory=300)\n@timeout(seconds=60)\n'
                                           '@jobset(queue="mfargo-never")', num_parallel=4,
                       imports="from metaflow import timeout")


@ON_EVERY_ARGO  # it rests on how each release's executor ends a resource step whose object was deleted
def test_a_gang_that_never_fits_its_queue_ends_at_its_timeout_naming_the_queue_and_kueues_reason(
        cluster_env, tmp_path):
    """Four ranks of 0.25 CPU in a queue of 0.75 CPU: each pod fits (so `create` deploys), the
    gang never does. Kueue keeps its JobSet suspended, where the Jobs' deadline does not run;
    the run's queue watch deletes it once it has waited longer than the step's @timeout (60 s,
    Metaflow's least), the step fails, and the failure report names the queue and what Kueue said. No rank ever
    started, and the run ends Failed instead of staying Running."""
    flow = write_flow(tmp_path, "GangNeverFitsFlow", NEVER_FITS)
    with kueue_queue(cluster_env, "mfargo-never", cpu="750m"), deployed(cluster_env, flow) as start:
        run = start(flow)
        wf = wait_workflow(cluster_env, run, timeout=420)  # the bound under test is the step's, below
        ranks = json.loads(kubectl(cluster_env, "get", "pods", "-n", cluster_env["METAFLOW_KUBERNETES_NAMESPACE"],
                                   "-o", "json", "-l", "workflows.argoproj.io/workflow=" + run.removeprefix("argo-")
                                   + ",jobset.sigs.k8s.io/jobset-name"))["items"]
    assert wf["status"]["phase"] == "Failed", failed_nodes(wf)
    nodes = nodes_by_name(wf)
    [train] = nodes["train"]
    waited = (when(train["finishedAt"]) - when(train["startedAt"])).total_seconds()
    assert train["phase"] in ("Failed", "Error") and 60 <= waited <= 120, (train["phase"], waited, train.get("message"))
    [report] = nodes["train-Failure-report"]
    assert re.search(r"gang step train was never admitted by Kueue queue mfargo-never within its @timeout "
                        r"\(JobSet js-\w+ deleted by the run's queue watch\): couldn't assign flavors to pod set rank: "
                        r"insufficient quota for cpu in flavor mfargo-e2e.*", report["message"]), report["message"]
    assert ranks == [], [p["metadata"]["name"] for p in ranks]
    [watch] = nodes["Queue-watch"]
    assert watch["phase"] == "Succeeded", watch
