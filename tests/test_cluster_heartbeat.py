"""The run's heartbeat daemon on the real engine (e2e/cluster, Metaflow's metadata service).

Metaflow's UI calls a run failed once its heartbeat is old; on Argo only the daemon pod
(templates/heartbeat.py) lives as long as the run. These tests read what the service holds
while and after a run: the run beats while it waits, the daemon ends Succeeded with the run,
and a run whose start task never reaches the service is still recorded, with its tags.
"""

from __future__ import annotations

import time

import pytest
import requests
from clustertools import ON_EVERY_ARGO, failed_nodes, flow_cmd, kubectl, trigger, wait_workflow
from flowtools import linear_flow
from test_cluster_e2e import read_run
from test_cluster_gangs import write_flow

pytestmark = [pytest.mark.cluster, ON_EVERY_ARGO]

WAITING = '''
import time
from metaflow import FlowSpec, step


class HeartbeatWaitFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.wait)

    @step
    def wait(self):
        time.sleep(40)  # four of the service's heartbeat intervals (10 s)
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    HeartbeatWaitFlow()
'''

# The start step is sent to a service address nobody answers (@environment overrides the
# pods' shared env), so it fails before it registers anything; the daemon has the shared env.
UNREACHABLE = linear_flow("HeartbeatRecordFlow",
                          start_decorators='@environment(vars={"METAFLOW_SERVICE_URL": "http://127.0.0.1:9"})')


def run_record(env: dict, flow: str, run_id: str) -> dict | None:
    """The run as the metadata service holds it (None: no record)."""
    got = requests.get("%s/flows/%s/runs/%s" % (env["METAFLOW_SERVICE_URL"], flow, run_id), timeout=10)
    return None if got.status_code == 404 else got.json()


def workflow(env: dict, run_id: str) -> dict:
    import json

    return json.loads(kubectl(env, "get", "workflow", "-n", env["METAFLOW_KUBERNETES_NAMESPACE"], "-o", "json",
                              run_id.removeprefix("argo-")))


def cleanup(env: dict, flow, run_id: str | None) -> None:
    """The run (its pods go with it), then the template."""
    if run_id:
        kubectl(env, "delete", "workflow", "-n", env["METAFLOW_KUBERNETES_NAMESPACE"], "--wait=false",
                run_id.removeprefix("argo-"))
    flow_cmd(env, flow, "argo-workflows", "delete")


def daemon_node(wf: dict) -> dict:
    [node] = [n for n in wf["status"]["nodes"].values() if n["displayName"] == "Heartbeat"]
    return node


def test_a_running_run_beats_and_its_daemon_ends_with_it(cluster_env, tmp_path):
    flow = write_flow(tmp_path, "HeartbeatWaitFlow", WAITING)
    flow_cmd(cluster_env, flow, "argo-workflows", "create")
    run_id = None
    try:
        run_id = trigger(cluster_env, flow)
        beats, deadline = [], time.monotonic() + 240
        while len(set(beats)) < 3:  # three different heartbeats while the run is still running
            assert time.monotonic() < deadline, f"heartbeats seen: {beats}"
            record = run_record(cluster_env, "HeartbeatWaitFlow", run_id)
            if record and record["last_heartbeat_ts"]:
                assert workflow(cluster_env, run_id)["status"].get("phase") == "Running", record
                beats.append(record["last_heartbeat_ts"])
            time.sleep(2)
        wf = wait_workflow(cluster_env, run_id, timeout=300)
        assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
        node = daemon_node(wf)
        assert node["phase"] == "Succeeded" and node["templateName"] == "0-heartbeat", node
        assert max(beats) - min(beats) >= 10, beats  # the service's interval: beats, not one write
        got = read_run(cluster_env, f"HeartbeatWaitFlow/{run_id}", "{'ok': run.successful}")
        assert got == {"ok": True}
    finally:
        cleanup(cluster_env, flow, run_id)


def test_a_run_whose_start_never_reaches_the_service_is_recorded(cluster_env, tmp_path):
    flow = write_flow(tmp_path, "HeartbeatRecordFlow", UNREACHABLE)
    flow_cmd(cluster_env, flow, "argo-workflows", "create", "--tag", "nightly")
    run_id = None
    try:
        run_id = trigger(cluster_env, flow)
        wf = wait_workflow(cluster_env, run_id, timeout=600)
        assert wf["status"]["phase"] == "Failed", wf["status"]
        failed = [n["displayName"] for n in wf["status"]["nodes"].values()
                  if n["type"] == "Pod" and n["phase"] in ("Failed", "Error")]
        assert failed == ["start(0)"], failed_nodes(wf)  # its own failure: not retried (docs/cli.md, "Retries")
        record = run_record(cluster_env, "HeartbeatRecordFlow", run_id)
        assert record is not None and record["run_number"] == run_id, record
        assert "nightly" in record["tags"], record
        got = read_run(cluster_env, f"HeartbeatRecordFlow/{run_id}",
                       "{'steps': [s.id for s in run], 'ok': run.successful, 'tags': sorted(run.user_tags)}")
        assert got == {"steps": [], "ok": False, "tags": ["nightly"]}, got
    finally:
        cleanup(cluster_env, flow, run_id)
