"""Gangs whose control finishes before a worker resolves it (issue 24), on the real engine
(e2e/cluster). The ranks never talk: the control completes in seconds and leaves the JobSet's
headless Service, so its host name stops resolving; a worker that reaches Metaflow's host-name
wait after that must still run (plugins/gang_control.py gives it the control's IP).

Each test makes the race certain instead of hoping for a busy node:

* without @kubernetes on the step (mfargo's own wait, ``pod_hooks._resolve``): the flow
  module, which a worker's step process imports before any decorator runs, holds a worker
  until the control's host name has resolved once and then stopped resolving (a worker that
  starts after the control has gone never sees it resolve: the test then checks that its
  hold began after the control's container ended);
* with @kubernetes (Metaflow's ``_wait_for_hostname_resolution``): the workers' pods select a
  node label nobody has, so they stay Pending until the test, having seen the control's pod
  Succeed, puts the label on the node: the worker pod starts after the control's has completed.

Both tests also see to it that the completed control has left the Service
(``wait_control_completed``): the EndpointSlice controller sometimes keeps a terminal pod
listed for minutes, and then the name still resolves and there is no race to see.

Without the fix both runs hang in the host-name wait (600 s, then exit 1 and FailJobSet);
with @kubernetes the wait is cut to 60 s here so that failure is quick to see.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from datetime import datetime

import pytest
from clustertools import STATE, failed_nodes, kubectl, run_pods, wait_workflow
from test_cluster_e2e import read_run
from test_cluster_gangs import deployed, jobsets, write_flow

# On the default Argo release only: the races are JobSet's, DNS's and the kubelet's; Argo only
# creates the JobSet and reads its status, as in every gang test that runs on each release.
pytestmark = pytest.mark.cluster

# The control's JobSet host name as mfargo writes it (compiler/naming.control_host), rebuilt
# in the pod from the env every gang pod has: the flow cannot see it once the fix pins the IP.
HOLD = '''
import os, socket, sys, time


def _resolves(host):
    try:
        socket.gethostbyname(host)
        return True
    except OSError:
        return False


def hold_worker_until_the_control_left(wait=300, absent=60):
    """A worker rank's step process only: wait (bounded) until the control's host name has
    resolved and then stopped resolving, i.e. its pod completed and left the Service. A worker
    that starts late (a busy node) may never see it resolve: after ``absent`` s of a name that
    never resolved it goes on, saying when its hold began, for the test to hold against the
    control's completion."""
    if "MF_WORKER_REPLICA_INDEX" not in os.environ or "step" not in sys.argv:
        return
    js, ns = os.environ["METAFLOW_KUBERNETES_JOBSET_NAME"], os.environ["METAFLOW_KUBERNETES_POD_NAMESPACE"]
    host = "%s-rank-0-0.%s.%s.svc.cluster.local" % (js, js, ns)
    began, start = time.time(), time.monotonic()
    seen = False
    while time.monotonic() < start + wait:
        now = _resolves(host)
        if seen and not now:
            print("held until the control %s had left" % host, file=sys.stderr)
            return
        if not seen and not now and time.monotonic() > start + absent:
            print("hold began at %.3f; the control %s never resolved" % (began, host), file=sys.stderr)
            return
        seen = seen or now
        time.sleep(0.5)
    print("hold: the control %s never left within %d s" % (host, wait), file=sys.stderr)


hold_worker_until_the_control_left()
'''

INDEPENDENT = HOLD + '''
from metaflow import FlowSpec, current, parallel, resources, step


class GangControlLeavesFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.train, num_parallel=2)

    @resources(cpu=0.25, memory=300)
    @parallel
    @step
    def train(self):
        # no barrier: the ranks never meet; the control is done long before the held worker
        self.rank = current.parallel.node_index
        self.main_ip = current.parallel.main_ip
        self.master_addr = os.environ["MF_MASTER_ADDR"]
        if self.rank == 0:
            time.sleep(5)  # the worker sees the control's name resolve before it leaves
        self.next(self.join)

    @step
    def join(self, inputs):
        self.got = sorted([i.rank, i.main_ip, i.master_addr] for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    GangControlLeavesFlow()
'''


def gang_pods(env: dict, run_id: str) -> dict[str, dict]:
    """The run's gang pods by replicated job (rank 0's job first): the newest pod of each job index."""
    out = {}
    for pod in run_pods(env, run_id):
        labels = pod["metadata"]["labels"]
        if "jobset.sigs.k8s.io/replicatedjob-name" in labels:
            out["%s-%s" % (labels["jobset.sigs.k8s.io/replicatedjob-name"], labels["jobset.sigs.k8s.io/job-index"])] = pod
    return out


def pod_log(pod: dict) -> str:
    """What a pod's main container wrote so far (the kubelet's log files under the cluster's state)."""
    uid = pod["metadata"]["uid"]
    return "".join(p.read_text(errors="replace") for p in sorted(STATE.glob(f"kubelet/pod-logs/*_{uid}/main/*.log")))


def wait_control_completed(env: dict, run_id: str, control: str, timeout: float = 300) -> dict:
    """The control's pod once it has Succeeded (bounded), then out of its JobSet's Service.

    The EndpointSlice controller drops a terminal pod, but not always at once: a completed pod
    was seen kept (ready, not serving) for minutes. Deleting the slice makes the controller
    write it again from the pods as they are, which is what it does anyway: the race, certain."""
    deadline = time.monotonic() + timeout
    while True:
        pods = gang_pods(env, run_id)
        status = pods.get(control, {}).get("status", {})
        if status.get("phase") in ("Succeeded", "Failed"):
            break
        assert time.monotonic() < deadline, f"the control's pod did not complete in {timeout:.0f} s: {status}"
        time.sleep(2)
    assert status["phase"] == "Succeeded", status
    ns, js = env["METAFLOW_KUBERNETES_NAMESPACE"], pods[control]["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"]
    while True:
        slices = json.loads(kubectl(env, "get", "endpointslices", "-n", ns, "-o", "json",
                                    "-l", "kubernetes.io/service-name=" + js))["items"]
        listed = [e for sl in slices for e in sl.get("endpoints") or [] if status["podIP"] in e.get("addresses", ())]
        if not listed:
            return pods
        assert time.monotonic() < deadline, f"the control {status['podIP']} still in the Service of {js}"
        kubectl(env, "delete", "endpointslices", "-n", ns, "-l", "kubernetes.io/service-name=" + js)
        time.sleep(3)


def test_a_worker_reaching_the_wait_after_the_control_left_still_runs(cluster_env, tmp_path):
    """No @kubernetes: the worker's step resolves MF_MASTER_ADDR after the control's name is gone."""
    flow = write_flow(tmp_path, "GangControlLeavesFlow", INDEPENDENT)
    with deployed(cluster_env, flow) as start:
        run_id = start(flow)
        pods = wait_control_completed(cluster_env, run_id, "rank-0")
        wf = wait_workflow(cluster_env, run_id, timeout=420)
        assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
        got = read_run(cluster_env, f"GangControlLeavesFlow/{run_id}",
                       "{'ok': run.successful, 'got': run['join'].task.data.got, "
                       "'held': [t.stderr for t in run['train'] if t.data.rank == 1]}")
    assert got["ok"] is True, got
    [control, worker] = got["got"]
    assert [control[0], worker[0]] == [0, 1], got
    # the control keeps its host name; the worker got the control's IP, the one main_ip resolves to
    assert control[2].endswith(".svc.cluster.local") and worker[2] == worker[1] == control[1], got
    assert_held_past_the_control(got["held"][0], pods["rank-0"])


def assert_held_past_the_control(said: str, control_pod: dict) -> None:
    """The worker resolved the control after the control had gone: it saw the name resolve and
    then stop, or (a worker that started late) its hold began after the control's container ended."""
    if "held until the control" in said and "had left" in said:
        return
    began = re.search(r"hold began at ([0-9.]+); the control \S+ never resolved", said)
    assert began, said
    [main] = [c for c in control_pod["status"]["containerStatuses"] if c["name"] == "main"]
    ended = datetime.fromisoformat(main["state"]["terminated"]["finishedAt"].replace("Z", "+00:00")).timestamp()
    # finishedAt is whole seconds, rounded down
    assert float(began.group(1)) >= ended, (said, main["state"]["terminated"])


HOLD_LABEL = "mfargo-e2e.test/hold"

CONTROL_FIRST = '''
import os

from metaflow import FlowSpec, current, jobset, kubernetes, parallel, step


class GangControlFirstFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.train, num_parallel=2)

    # Workers wait for a node label the test adds once the control's pod has completed; the
    # control (its own pod, @jobset(control=...)) runs anywhere.
    @kubernetes(cpu=0.25, memory=300, node_selector={%(label)r: %(token)r}, hostname_resolution_timeout=60)
    @jobset(control={"node_selector": {"kubernetes.io/os": "linux"}})
    @parallel
    @step
    def train(self):
        self.rank = current.parallel.node_index
        self.main_ip = current.parallel.main_ip
        self.master_addr = os.environ["MF_MASTER_ADDR"]
        self.next(self.join)

    @step
    def join(self, inputs):
        self.got = sorted([i.rank, i.main_ip, i.master_addr] for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    GangControlFirstFlow()
'''


def test_a_worker_pod_that_starts_after_the_control_completed_still_runs(cluster_env, tmp_path):
    """@kubernetes: the worker's pod is scheduled only once the control's pod has Succeeded."""
    token = secrets.token_hex(4)
    flow = write_flow(tmp_path, "GangControlFirstFlow", CONTROL_FIRST % {"label": HOLD_LABEL, "token": token})
    node = "node/" + cluster_env["MFARGO_E2E_NODES"].split()[0]  # where pods that tolerate no taint run
    try:
        with deployed(cluster_env, flow) as start:
            run_id = start(flow)
            pods = wait_control_completed(cluster_env, run_id, "control-0")
            control = pods["control-0"]["status"]
            worker = pods["worker-0"]["status"]
            assert worker["phase"] == "Pending" and not worker.get("podIP"), worker  # held back, as meant
            control_ip = control["podIP"]  # kept on a completed pod
            kubectl(cluster_env, "label", node, "%s=%s" % (HOLD_LABEL, token))
            wf = wait_workflow(cluster_env, run_id, timeout=420)
            assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
            got = read_run(cluster_env, f"GangControlFirstFlow/{run_id}",
                           "{'ok': run.successful, 'got': run['join'].task.data.got}")
    finally:
        kubectl(cluster_env, "label", node, HOLD_LABEL + "-")
    assert got["ok"] is True, got
    [control_rank, worker_rank] = got["got"]
    assert control_rank[0] == 0 and control_rank[1] == control_ip, got
    assert control_rank[2].endswith(".svc.cluster.local"), got
    assert worker_rank == [1, control_ip, control_ip], got  # Metaflow's contract: main_ip is the control's


EVICTED = '''
import os, time
from metaflow import FlowSpec, current, jobset, parallel, resources, step


class GangEvictedFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.train, num_parallel=2)

    @resources(cpu=0.25, memory=300)
    @jobset(max_restarts=1)
    @parallel
    @step
    def train(self):
        self.attempt = current.retry_count
        self.generation = os.environ["JOBSET_RESTART_ATTEMPT"]
        if self.generation == "0":
            print("generation 0 runs rank %d" % current.parallel.node_index, flush=True)
            time.sleep(300)  # still running when its worker is evicted
        self.next(self.join)

    @step
    def join(self, inputs):
        self.got = sorted([i.attempt, i.generation] for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    GangEvictedFlow()
'''


def test_a_worker_evicted_from_its_node_restarts_the_gang_and_the_run_succeeds(cluster_env, tmp_path):
    """A worker pod evicted (the Eviction API, as a node drain does; Kubernetes marks it
    DisruptionTarget) while its gang runs: the gang restarts inside its JobSet (infrastructure,
    not the user's code), every rank's rerun is Metaflow's next attempt, and the join reads them."""
    flow = write_flow(tmp_path, "GangEvictedFlow", EVICTED)
    ns = cluster_env["METAFLOW_KUBERNETES_NAMESPACE"]
    with deployed(cluster_env, flow) as start:
        run_id = start(flow)
        deadline = time.monotonic() + 300
        while True:  # both ranks in their step code: each has started its attempt 0
            pods = gang_pods(cluster_env, run_id)
            said = {rank: pod_log(pods[rank]) for rank in ("rank-0", "rank-1") if rank in pods}
            if all("generation 0 runs rank" in said.get(rank, "") for rank in ("rank-0", "rank-1")):
                break
            assert time.monotonic() < deadline, f"the ranks never reached their step code: {said}"
            time.sleep(2)
        pod = pods["rank-1"]["metadata"]["name"]
        eviction = tmp_path / "eviction.json"
        eviction.write_text(json.dumps({"apiVersion": "policy/v1", "kind": "Eviction",
                                        "metadata": {"name": pod, "namespace": ns}}))
        kubectl(cluster_env, "create", "--raw", f"/api/v1/namespaces/{ns}/pods/{pod}/eviction", "-f", str(eviction))
        wf = wait_workflow(cluster_env, run_id, timeout=420)
        assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
        [js] = jobsets(cluster_env, run_id)
    assert js["status"]["restarts"] == 1 and js["status"]["terminalState"] == "Completed", js["status"]
    got = read_run(cluster_env, f"GangEvictedFlow/{run_id}", "run['join'].task.data.got")
    assert got == [[1, "1"], [1, "1"]], got
