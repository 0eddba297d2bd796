"""Infrastructure failures do not spend @retry (plugins/attempt_guard.py), on the real engine
of each Argo release: two steps' pods are evicted through the Eviction API (as a node drain or
a spot reclaim evicts them) while their step code runs. The step with @retry(times=1) still has
its one user retry afterwards (its next attempt fails in its own code, the one after succeeds);
the step without @retry runs again and succeeds. Metaflow's client sees three and two
attempts, the evicted one named as infrastructure's on the attempts after it."""

from __future__ import annotations

import json
import secrets
import time

import pytest
from clustertools import ON_EVERY_ARGO, failed_nodes, kubectl, run_pods, wait_workflow
from test_cluster_e2e import read_run
from test_cluster_gang_order import pod_log
from test_cluster_gangs import deployed, write_flow

from metaflow_extensions.mfargo.plugins import pod_hooks

pytestmark = [pytest.mark.cluster, ON_EVERY_ARGO]

FLOW = '''
import time
from metaflow import FlowSpec, current, resources, retry, step


def attempt(plan):
    what = plan[current.retry_count]
    print("attempt %d %s" % (current.retry_count, what), flush=True)
    if what == "waits":
        time.sleep(600)  # evicted meanwhile
    if what == "fails":
        raise RuntimeError("the step's own failure")
    return current.retry_count


class EvictedFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.kept, self.bare)

    @resources(cpu=0.2, memory=300)
    @retry(times=1, minutes_between_retries=0)
    @step
    def kept(self):
        self.ran_as = attempt(["waits", "fails", "succeeds"])
        self.next(self.join)

    @resources(cpu=0.2, memory=300)
    @step
    def bare(self):
        self.ran_as = attempt(["waits", "succeeds"])
        self.next(self.join)

    @step
    def join(self, inputs):
        self.ran_as = {i._current_step: i.ran_as for i in inputs}
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    EvictedFlow()
'''


def step_pods(env: dict, run_id: str) -> dict[str, dict]:
    """The run's step pods by step name: the newest of each."""
    out = {}
    for pod in run_pods(env, run_id):
        step = (pod["metadata"].get("annotations") or {}).get("metaflow/step_name")
        if step:
            out[step] = pod
    return out


def evict(env: dict, pod: dict) -> None:
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}
    kubectl(env, "create", "--raw", f"/api/v1/namespaces/{ns}/pods/{name}/eviction", "-f", "-",
            input=json.dumps(eviction))


def test_evicted_pods_run_again_without_spending_retry(cluster_env, tmp_path):
    name = "EvictedFlow" + secrets.token_hex(3)
    flow = write_flow(tmp_path, name, FLOW)
    with deployed(cluster_env, flow) as start:
        run_id = start(flow)
        deadline = time.monotonic() + 300
        while True:  # both steps in their code, as attempt 0
            pods = step_pods(cluster_env, run_id)
            said = {step: pod_log(pods[step]) for step in ("kept", "bare") if step in pods}
            if all("attempt 0 waits" in said.get(step, "") for step in ("kept", "bare")):
                break
            assert time.monotonic() < deadline, f"the steps never reached their code: {said}"
            time.sleep(2)
        for step in ("kept", "bare"):
            evict(cluster_env, pods[step])
        wf = wait_workflow(cluster_env, run_id, timeout=420)
        assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
        got = read_run(cluster_env, f"{name}/{run_id}", (
            "{'ran_as': run['join'].task.data.ran_as, "
            "'attempts': {s: run[s].task.current_attempt for s in ('kept', 'bare')}, "
            "'infra': {s: sorted({m.value for m in run[s].task.metadata if m.name == %r}) for s in ('kept', 'bare')}, "
            "'log': run['kept'].task.stderr}" % pod_hooks.INFRA_ATTEMPTS_FIELD))
    assert got["ran_as"] == {"kept": 2, "bare": 1}, (name, got)
    assert got["attempts"] == {"kept": 2, "bare": 1}, got
    assert got["infra"] == {"kept": ["0"], "bare": ["0"]}, got
    assert "an infrastructure failure does not spend @retry" in got["log"], got["log"][-2000:]
