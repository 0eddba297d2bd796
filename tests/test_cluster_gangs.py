"""Gangs (`@parallel` -> JobSet) on the real engine (e2e/cluster): ranks that meet over cluster
DNS, a run-time gang size, gangs inside a foreach, failures (exit 1 with @retry and @gang_catch,
OOMKilled, @timeout), read back with Metaflow's client and from the objects the controllers wrote.

Each test deploys flows of its own names (`write_flow`) and deletes its templates and runs when it ends (`deployed`). Pods ask for little:
the node has 2 CPUs, shared with whoever else runs cluster tests.
"""

from __future__ import annotations

import contextlib
import json
import re
import textwrap
import time
from pathlib import Path

import pytest
from flowtools import gang_flow, linear_flow
from clustertools import ON_EVERY_ARGO, failed_nodes, flow_cmd, kubectl, trigger, wait_workflow
from metaflow_extensions.mfargo.plugins.pod_contract import FINAL_FAILURE_EXIT
from test_cluster_e2e import read_run

# ON_EVERY_ARGO on each test Argo takes part in beyond creating the JobSet and reading its
# status (a run-time size, retries, catch, timeouts, terminate); the foreach of gangs also runs
# on each release in test_cluster_resume, and an OOM kill is the kubelet's and JobSet's.
pytestmark = pytest.mark.cluster

SMALL = "@kubernetes(cpu=0.25, memory=300, port=29500)"

# A TCP barrier every rank runs: workers connect to the control at MF_MASTER_ADDR:MF_MASTER_PORT
# (a JobSet host name, resolved by cluster DNS) and send their number; the control answers each
# with the sum of every rank's number, its own included. Every wait is bounded.
BARRIER = '''
import os, socket, time

def barrier(rank, world, mine, wait=120):
    """The sum of every rank's number (mine on this rank), exchanged through the control (rank 0)."""
    addr, port = os.environ["MF_MASTER_ADDR"], int(os.environ["MF_MASTER_PORT"])
    if rank == 0:
        with socket.create_server(("", port)) as server:
            server.settimeout(wait)
            peers = [server.accept()[0] for _ in range(world - 1)]
            for peer in peers:
                peer.settimeout(wait)
            total = mine + sum(int(peer.makefile().readline()) for peer in peers)
            for peer in peers:
                peer.sendall(b"%d\\n" % total)
                peer.close()
            return total
    deadline = time.monotonic() + wait
    while True:
        try:
            peer = socket.create_connection((addr, port), timeout=10)
            break
        except OSError as e:
            if time.monotonic() > deadline:
                raise RuntimeError("control %s:%d unreachable: %s" % (addr, port, e))
            time.sleep(0.5)
    with peer:
        peer.settimeout(wait)
        peer.sendall(b"%d\\n" % mine)
        return int(peer.makefile().readline())
'''


def write_flow(tmp_path: Path, name: str, source: str) -> Path:
    """The flow ``source`` as ``<name>.py``, its FlowSpec class renamed ``name``: the
    WorkflowTemplate is named after it, and tests run side by side, so each test deploys names
    of its own (tests/test_cluster_flow_names.py checks)."""
    source = textwrap.dedent(source).lstrip()
    [defined] = re.findall(r"^class (\w+)\(FlowSpec\):", source, re.M)
    flow = tmp_path / ("%s.py" % name.lower())
    flow.write_text(re.sub(r"\b%s\b" % defined, name, source))
    return flow


@contextlib.contextmanager
def deployed(env: dict, *flows: Path):
    """`argo-workflows create` for each flow; yields `start(flow, *params)`, which triggers a run
    and returns its id. On exit every run started so is deleted (the JobSets it owns go with
    it), then each template with `argo-workflows delete`."""
    created, runs = [], []

    def start(flow: Path, *params: str) -> str:
        runs.append(trigger(env, flow, *params))
        return runs[-1]

    start.runs = runs  # runs started otherwise (a resume) are added here, to be deleted too

    try:
        for flow in flows:
            flow_cmd(env, flow, "argo-workflows", "create")
            created.append(flow)
        yield start
    finally:
        if runs:
            kubectl(env, "delete", "workflows", "-n", env["METAFLOW_KUBERNETES_NAMESPACE"], "--wait=false",
                    *(r.removeprefix("argo-") for r in runs))
        for flow in created:
            flow_cmd(env, flow, "argo-workflows", "delete")


@contextlib.contextmanager
def service_account(env: dict, name: str):
    """A service account in the flows' namespace while the block runs."""
    namespace = env["METAFLOW_KUBERNETES_NAMESPACE"]
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}
    kubectl(env, "apply", "-f", "-", input=json.dumps(account))
    try:
        yield name
    finally:
        kubectl(env, "delete", "serviceaccount", name, "-n", namespace, "--wait=false")


def nodes_by_name(wf: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for node in wf["status"]["nodes"].values():
        out.setdefault(node["displayName"], []).append(node)
    return out


def jobsets(env: dict, run_id: str) -> list[dict]:
    """The JobSets of a run (labelled with its workflow's name), oldest first."""
    items = json.loads(kubectl(env, "get", "jobsets", "-n", env["METAFLOW_KUBERNETES_NAMESPACE"], "-o", "json",
                               "-l", "workflows.argoproj.io/workflow=" + run_id.removeprefix("argo-")))["items"]
    return sorted(items, key=lambda js: js["metadata"]["creationTimestamp"])


MEET = BARRIER + '''
from metaflow import FlowSpec, Parameter, current, kubernetes, parallel, step


class GangMeetFlow(FlowSpec):
    nodes = Parameter("nodes", default=2, type=int)

    @step
    def start(self):
        self.next(self.train, num_parallel=self.nodes)

    %(small)s
    @parallel
    @step
    def train(self):
        self.rank, self.world = current.parallel.node_index, current.parallel.num_nodes
        self.total = barrier(self.rank, self.world, self.rank)
        print("rank %%d of %%d got %%d from %%s at %%s" %% (self.rank, self.world, self.total, os.environ["MF_MASTER_ADDR"],
                                                   current.parallel.main_ip))
        self.next(self.join)

    @step
    def join(self, inputs):
        self.got = sorted([i.rank, i.world, i.total] for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    GangMeetFlow()
''' % {"small": SMALL}


@ON_EVERY_ARGO
def test_gang_of_three_meets_over_cluster_dns(cluster_env, tmp_path):
    """A gang sized at `trigger` (3, the default is 2) whose ranks exchange their ranks through
    the control's JobSet host name; each rank's artifacts and log read with Metaflow's client."""
    flow = write_flow(tmp_path, "GangMeetFlow", MEET)
    with deployed(cluster_env, flow) as start:
        run_id = start(flow, "--nodes", "3")
        wf = wait_workflow(cluster_env, run_id, timeout=300)
        assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
        got = read_run(cluster_env, f"GangMeetFlow/{run_id}",
                       "{'ok': run.successful, 'got': run['join'].task.data.got, "
                       "'tasks': sorted([t.data.rank, t.data.total, t.successful, t.stdout.strip()] "
                       "for t in run['train'])}")
        [js] = [j["metadata"]["name"] for j in jobsets(cluster_env, run_id)]
    assert got["ok"] is True and got["got"] == [[0, 3, 3], [1, 3, 3], [2, 3, 3]], got
    assert [t[:3] for t in got["tasks"]] == [[0, 3, True], [1, 3, True], [2, 3, True]], got
    logs = [re.fullmatch(r"rank (\d) of 3 got 3 from (\S+) at (\S+)", t[3]) for t in got["tasks"]]
    assert all(logs) and [int(m[1]) for m in logs] == [0, 1, 2], got
    # the control's address is its JobSet host name: <pod host>.<jobset>.<namespace>.svc...; every
    # worker met it at the IP that name resolved to (gang_control.py pins it), current.parallel.main_ip
    assert logs[0][2].endswith(".%s.%s.svc.cluster.local" % (js, cluster_env["METAFLOW_KUBERNETES_NAMESPACE"])), got
    assert {m[3] for m in logs} == {logs[0][3]} and [m[2] for m in logs[1:]] == [logs[0][3]] * 2, got


FOREACH = BARRIER + '''
from metaflow import FlowSpec, current, kubernetes, parallel, step


class GangForeachFlow(FlowSpec):
    @step
    def start(self):
        self.items = ["a", "b"]
        self.next(self.fan, foreach="items")

    @step
    def fan(self):
        self.item = self.input
        self.next(self.pair, num_parallel=2)

    %(small)s
    @parallel
    @step
    def pair(self):
        # a's ranks send 10 and 11, b's 20 and 21: a gang that met the other's control would see it
        self.rank = current.parallel.node_index
        self.total = barrier(self.rank, 2, 10 * "_ab".index(self.item) + self.rank)
        self.next(self.pair_join)

    @step
    def pair_join(self, inputs):
        self.item = inputs[0].item
        self.ranks = sorted([i.item, i.rank, i.total] for i in inputs)
        self.next(self.fan_join)

    @step
    def fan_join(self, inputs):
        self.got = sorted(i.ranks for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    GangForeachFlow()
''' % {"small": SMALL}


def test_gangs_inside_a_foreach(cluster_env, tmp_path):
    """Two foreach children, each a gang of 2 with its own JobSet and control: each gang's ranks
    meet only each other, and each join gets its own gang's ranks."""
    flow = write_flow(tmp_path, "GangForeachFlow", FOREACH)
    with deployed(cluster_env, flow) as start:
        run_id = start(flow)
        wf = wait_workflow(cluster_env, run_id, timeout=300)
        assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
        got = read_run(cluster_env, f"GangForeachFlow/{run_id}",
                       "{'ok': run.successful, 'got': run['fan_join'].task.data.got, "
                       "'pairs': len(list(run['pair'])), 'joins': sorted(t.data.item for t in run['pair_join'])}")
        assert len(jobsets(cluster_env, run_id)) == 2
    assert got == {"ok": True, "got": [[["a", 0, 21], ["a", 1, 21]], [["b", 0, 41], ["b", 1, 41]]],
                   "pairs": 4, "joins": ["a", "b"]}, got


RETRY_CATCH = '''
from metaflow import FlowSpec, current, gang_catch, kubernetes, parallel, retry, step


class GangRetryCatchFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.flaky, num_parallel=2)

    %(small)s
    @retry(times=1, minutes_between_retries=0)
    @parallel
    @step
    def flaky(self):
        if current.parallel.node_index == 1 and current.retry_count == 0:
            raise RuntimeError("rank 1 fails on attempt 0")  # the pod exits 1
        self.attempt = current.retry_count
        self.next(self.flaky_join)

    @step
    def flaky_join(self, inputs):
        self.attempts = [i.attempt for i in inputs]
        self.next(self.middle)

    @step
    def middle(self):
        self.next(self.caught, num_parallel=2)

    %(small)s
    @gang_catch(var="error", print_exception=False)
    @parallel
    @step
    def caught(self):
        if current.parallel.node_index == 1:
            raise ValueError("rank 1 gives up")
        self.next(self.caught_join)

    @step
    def caught_join(self, inputs):
        self.errors = sorted([i.error.type, i.error.exception] if i.error else [] for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    GangRetryCatchFlow()
''' % {"small": SMALL}


@ON_EVERY_ARGO
def test_failed_rank_retried_with_a_new_jobset_then_caught(cluster_env, tmp_path):
    """A rank exits 1 on attempt 0: that JobSet fails, so does its Argo node, and @retry's attempt 1
    is a new JobSet that completes (Metaflow's client: attempt 1 succeeded, attempt 0 not).
    Then a gang whose rank always raises under @gang_catch: the run succeeds, the error caught."""
    flow = write_flow(tmp_path, "GangRetryCatchFlow", RETRY_CATCH)
    with deployed(cluster_env, flow) as start:
        run_id = start(flow)
        wf = wait_workflow(cluster_env, run_id, timeout=420)
        assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
        nodes = nodes_by_name(wf)
        states = [(js["metadata"]["annotations"]["metaflow/step_name"], js["status"].get("terminalState"))
                  for js in jobsets(cluster_env, run_id)]
        got = read_run(cluster_env, f"GangRetryCatchFlow/{run_id}",
                       "{'ok': run.successful, 'attempts': run['flaky_join'].task.data.attempts, "
                       "'errors': run['caught_join'].task.data.errors, "
                       "'flaky': sorted([t.current_attempt, t.successful, "
                       "[Task(t.pathspec, attempt=a).successful for a in (0, 1)]] for t in run['flaky'])}"
                       .replace("Task(", "__import__('metaflow').Task("))
    assert [n["phase"] for n in nodes["flaky(0)"]] == ["Failed"] and [n["phase"] for n in nodes["flaky(1)"]] == ["Succeeded"]
    assert [n["phase"] for n in nodes["flaky"]] == ["Succeeded"], nodes["flaky"]
    assert states == [("flaky", "Failed"), ("flaky", "Completed"), ("caught", "Completed")], states
    assert got["ok"] is True and got["attempts"] == [1, 1], got
    # rank 1's attempt 0 failed; rank 0's attempt 0 may have finished or been stopped with its JobSet
    assert [f[:2] for f in got["flaky"]] == [[1, True], [1, True]] and [f[2][1] for f in got["flaky"]] == [True, True], got
    assert [f[2][0] for f in got["flaky"]].count(False) >= 1, got
    assert got["errors"] == [[], ["builtins.ValueError", "rank 1 gives up"]], got


OOM = gang_flow("GangOomFlow", """
# limits = requests; its pods and its failure report run as its own service account
@kubernetes(cpu=0.25, memory=256, port=29500, qos="Guaranteed", service_account="gang-oom")
""", """
if current.parallel.node_index == 1:
    blob = b"x" * (1024 << 20)  # four times the pod's limit: the kernel's OOM killer ends it
""")

GANG_TIMEOUT = '''
import time
from metaflow import FlowSpec, kubernetes, parallel, step, timeout


class GangTimeoutFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.train, num_parallel=2)

    %(small)s
    @timeout(seconds=60)
    @parallel
    @step
    def train(self):
        time.sleep(600)
        self.next(self.join)

    @step
    def join(self, inputs):
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    GangTimeoutFlow()
''' % {"small": SMALL}

STEP_TIMEOUT = linear_flow("StepTimeoutFlow", "time.sleep(600)", imports="import time",
                           start_decorators="@kubernetes(cpu=0.25, memory=300)\n@timeout(seconds=60)")


def test_oom_killed_rank_is_the_reported_reason(cluster_env, tmp_path):
    """A rank over its memory limit is OOM-killed by the kernel: the JobSet fails, and the gang's
    failure report names OOMKilled in its Argo node message and in the control task's
    `gang-failure` metadata (Metaflow's client). The step runs as a service account of its
    own (not the workflow's), as its failure report does: the bundle's Role must be bound
    to it for the report to read the gang (it once was not: HTTP 403)."""
    flow = write_flow(tmp_path, "GangOomFlow", OOM)
    with service_account(cluster_env, "gang-oom"), deployed(cluster_env, flow) as start:
        run_id = start(flow)
        wf = wait_workflow(cluster_env, run_id, timeout=300)
        nodes = nodes_by_name(wf)
        assert jobsets(cluster_env, run_id) == []  # the report deleted it once read (so `argo retry` can make it)
        got = read_run(cluster_env, f"GangOomFlow/{run_id}",
                       "{'finished': run.finished, 'ok': run.successful, "
                       "'md': [t.metadata_dict.get('gang-failure') for t in run['train'] if t.id.startswith('control-')]}")
    assert wf["status"]["phase"] == "Failed", failed_nodes(wf)
    assert [n["phase"] for n in nodes["train"]] == ["Failed"], failed_nodes(wf)
    assert [n["phase"] for n in nodes["join"]] == ["Omitted"], failed_nodes(wf)
    [report] = nodes["train-Failure-report"]
    said = re.fullmatch(
        r"(main: )?Error \(exit code 1\): gang step train: rank 1 \(worker\) failed first: OOMKilled, exit code 137 "
        r"\(pod (js-\w+)-\S+; JobSet (js-\w+): \w+ after 0 restarts\)", report["message"])
    assert report["phase"] == "Failed" and said and said[2] == said[3], report["message"]
    assert got["ok"] is False and got["md"][0], got
    md = json.loads(got["md"][0])
    assert (md["rank"], md["role"], md["reason"], md["exit_code"], md["jobset"]) == \
        (1, "worker", "OOMKilled", 137, said[3]), md


@ON_EVERY_ARGO
def test_timeouts_fail_a_gang_step_and_a_plain_step(cluster_env, tmp_path):
    """@timeout(seconds=60) (Metaflow's minimum on Kubernetes) on a gang step and on a plain
    step, both sleeping past it, run side by side: each run fails at its step once the time is
    up, with the reason in Argo's node messages (the gang's through its failure report)."""
    gang, plain = write_flow(tmp_path, "GangTimeoutFlow", GANG_TIMEOUT), write_flow(tmp_path, "StepTimeoutFlow", STEP_TIMEOUT)
    with deployed(cluster_env, gang, plain) as start:
        gang_run, plain_run = start(gang), start(plain)
        gang_wf, plain_wf = wait_workflow(cluster_env, gang_run, timeout=420), wait_workflow(cluster_env, plain_run, timeout=300)
        assert jobsets(cluster_env, gang_run) == []  # deleted by the failure report, once read
    assert plain_wf["status"]["phase"] == "Failed", failed_nodes(plain_wf)
    # Metaflow's @timeout ends the plain step (its pod's deadline is 120 s later): the step's own
    # failure, with no @retry left, so the keeper's final exit and no retry (docs/cli.md, "Retries")
    plain_nodes = nodes_by_name(plain_wf)
    [start] = plain_nodes["start(0)"]
    assert start["phase"] == "Failed" and start["message"] == "main: Error (exit code %d)" % FINAL_FAILURE_EXIT, start
    assert "start(1)" not in plain_nodes, failed_nodes(plain_wf)
    assert gang_wf["status"]["phase"] == "Failed", failed_nodes(gang_wf)
    nodes = nodes_by_name(gang_wf)
    assert [n["phase"] for n in nodes["train"]] == ["Failed"], nodes["train"]
    [report] = nodes["train-Failure-report"]
    assert re.search(r"gang step train: rank \d \(\w+\) failed first: DeadlineExceeded", report["message"]), report


@ON_EVERY_ARGO
def test_terminate_stops_the_runs_gangs_too(cluster_env, tmp_path):
    """Argo stops a terminated run's pods but not the JobSet its resource step created;
    `argo-workflows terminate` deletes it once the run has stopped, so its ranks stop too."""
    flow = write_flow(tmp_path, "GangTerminateFlow", GANG_TIMEOUT)
    with deployed(cluster_env, flow) as start:
        run_id = start(flow)
        deadline = time.monotonic() + 180
        while not jobsets(cluster_env, run_id):
            assert time.monotonic() < deadline, "no JobSet for %s after 180 s" % run_id
            time.sleep(2)
        done = flow_cmd(cluster_env, flow, "argo-workflows", "terminate", run_id)
        wf = wait_workflow(cluster_env, run_id, timeout=120)
        assert wf["status"]["phase"] in ("Failed", "Error"), failed_nodes(wf)
        assert re.search(r"Deleted the run's JobSets js-\w+ \(their pods with them\)\.", done.stdout + done.stderr), \
            done.stdout + done.stderr
        assert jobsets(cluster_env, run_id) == []
