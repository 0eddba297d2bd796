"""Flows started by Argo Events on the cluster (e2e/argo_events.py: Argo Events' controller, a NATS
JetStream EventBus, the webhook EventSource Metaflow publishes to): @trigger by a published event,
@trigger_on_finish by the upstream run's end, within @project branches, and a flow deployed with
Metaflow's Deployer API. Every run is read back with Metaflow's client.

Flow names carry a token: every run publishes `metaflow.<flow>.<step>` events to the one
EventSource, so two test sessions on one cluster must not start each other's flows.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from clustertools import (flow_cmd, publish, runs_from, sensor_subscribed, started_by_event, trigger,
                          with_webhook)
from flowtools import linear_flow
from test_cluster_deploy import SMALL_STEPS, deployed, start, succeeded, undeploy, unique
from test_cluster_e2e import read_run

pytestmark = pytest.mark.cluster


def events_env(cluster_env: dict, tmp_path) -> dict:
    return with_webhook({**cluster_env, "METAFLOW_DECOSPECS": SMALL_STEPS, "TMP_DIR": str(tmp_path)})


def triggered_flow(name: str, event: str) -> str:
    """@trigger on event, its payload's `table` and `rows` as the Parameters table and min_rows."""
    return linear_flow(name, "self.event = current.trigger.event.name",
                       flow_decorators='@trigger(event={"name": "%s", "parameters": {"table": "table", "min_rows": '
                                       '"rows"}})' % event,
                       members='table = Parameter("table", required=True)\n'
                               'min_rows = Parameter("min_rows", default=1, type=int)')


def test_published_event_starts_the_flow_with_its_payload(cluster_env, tmp_path):
    """@trigger: the event published with Metaflow's ArgoEvent starts one run, its payload's
    fields as the flow's Parameters (a number as a number), seen in current.trigger."""
    token = secrets.token_hex(3)
    flow_name, event = f"Triggered{token}Flow", f"data.ready.{token}"
    flow = tmp_path / "triggered.py"
    flow.write_text(triggered_flow(flow_name, event))
    env = events_env(cluster_env, tmp_path)
    name = unique("triggered")
    with deployed(env, flow, name) as runs:
        sensor_subscribed(env, name)
        publish(env, event, {"table": "orders", "rows": 5})
        run_id = started_by_event(env, name, runs)
        succeeded(env, run_id)
        got = read_run(env, f"{flow_name}/{run_id}", "{'ok': run.successful, 'table': run.data.table, "
                                                     "'rows': run.data.min_rows, 'event': run.data.event}")
        assert got == {"ok": True, "table": "orders", "rows": 5, "event": event}, got
        assert runs_from(env, name) == [run_id]  # one event, one run


def upstream_flow(name: str, project: str = "") -> str:
    return linear_flow(name, "self.rows = 42", flow_decorators=f'@project(name="{project}")' if project else "")


def downstream_flow(name: str, upstream: str, project: str = "") -> str:
    """@trigger_on_finish(flow=upstream): keeps the upstream run's pathspec and its `rows`."""
    decorators = (f'@project(name="{project}")\n' if project else "") + f'@trigger_on_finish(flow="{upstream}")'
    return linear_flow(name, "upstream = current.trigger.run\nself.upstream = upstream.pathspec\n"
                             "self.rows = upstream.data.rows", flow_decorators=decorators)


def test_upstream_end_starts_the_flow_that_waits_for_it(cluster_env, tmp_path):
    """@trigger_on_finish: the upstream run's end (its pods publish Metaflow's events) starts
    the downstream flow, which reads the upstream run through current.trigger."""
    token = secrets.token_hex(3)
    up_flow, down_flow = f"Up{token}Flow", f"Down{token}Flow"
    (tmp_path / "up").mkdir()
    (tmp_path / "down").mkdir()
    up, down = tmp_path / "up" / "up.py", tmp_path / "down" / "down.py"
    up.write_text(upstream_flow(up_flow))
    down.write_text(downstream_flow(down_flow, up_flow))
    env = events_env(cluster_env, tmp_path)
    up_name, down_name = unique("upstream"), unique("downstream")
    with deployed(env, up, up_name) as up_runs, deployed(env, down, down_name) as down_runs:
        sensor_subscribed(env, down_name)
        up_run = start(env, up, up_name, up_runs)
        succeeded(env, up_run)
        down_run = started_by_event(env, down_name, down_runs)
        succeeded(env, down_run)
        got = read_run(env, f"{down_flow}/{down_run}", "{'upstream': run.data.upstream, 'rows': run.data.rows}")
        assert got == {"upstream": f"{up_flow}/{up_run}", "rows": 42}, got
        assert runs_from(env, down_name) == [down_run]


@contextlib.contextmanager
def deployed_in_project(env: dict, flow: Path):
    """`argo-workflows create` of a @project flow (its project and branch name the deployment:
    no --name); yields that name and a list of runs, deleted on leaving with the deployment."""
    out = flow_cmd(env, flow, "argo-workflows", "create")
    [name] = re.findall(r"^Workflow (\S+) for flow", out.stdout + out.stderr, re.M)
    runs: list[str] = []
    try:
        yield name, runs
    finally:
        undeploy(env, flow, runs)


def test_project_branches_start_only_their_own_downstream(cluster_env, tmp_path):
    """@trigger_on_finish with @project: the upstream run on branch `b1` starts the downstream
    deployed on `b1`, never the one deployed on `b2` (the same flows, another branch)."""
    token = secrets.token_hex(3)
    project, up_flow, down_flow = f"proj{token}", f"Up{token}Flow", f"Down{token}Flow"
    for d in ("up", "down"):
        (tmp_path / d).mkdir()
    up, down = tmp_path / "up" / "up.py", tmp_path / "down" / "down.py"
    up.write_text(upstream_flow(up_flow, project))
    down.write_text(downstream_flow(down_flow, up_flow, project))
    env = events_env(cluster_env, tmp_path)
    b1, b2 = {**env, "METAFLOW_BRANCH": "b1"}, {**env, "METAFLOW_BRANCH": "b2"}  # Metaflow's --branch
    with contextlib.ExitStack() as stack:
        _, up_runs = stack.enter_context(deployed_in_project(b1, up))
        down_b1, down_runs = stack.enter_context(deployed_in_project(b1, down))
        down_b2, _ = stack.enter_context(deployed_in_project(b2, down))
        for name in (down_b1, down_b2):
            sensor_subscribed(env, name)
        up_run = trigger(b1, up)
        up_runs.append(up_run)
        succeeded(env, up_run)
        down_run = started_by_event(env, down_b1, down_runs)
        succeeded(env, down_run)
        got = read_run(env, f"{down_flow}/{down_run}", "{'upstream': run.data.upstream, 'branch': "
                                                       "[t for t in run.tags if t.startswith('project_branch:')]}")
        assert got == {"upstream": f"{up_flow}/{up_run}", "branch": ["project_branch:test.b1"]}, got
        # The b2 Sensor saw the same events (one bus) by the time b1's run finished; it took none.
        assert runs_from(env, down_b2) == []


DEPLOYER_CREATE = """
import json, sys
from metaflow import Deployer
deployed = Deployer(sys.argv[1], show_output=False).argo_workflows(name=sys.argv[2]).create()
print(json.dumps({"name": deployed.name, "flow": deployed.flow_name}))
"""


def test_flow_deployed_with_the_deployer_api_is_started_by_its_event(cluster_env, tmp_path):
    """The @trigger flow deployed with Metaflow's Deployer API instead of the CLI."""
    token = secrets.token_hex(3)
    flow_name, event = f"Deployed{token}Flow", f"data.ready.{token}"
    flow = tmp_path / "triggered.py"
    flow.write_text(triggered_flow(flow_name, event))
    env = events_env(cluster_env, tmp_path)
    name = unique("deployer-triggered")
    p = subprocess.run([sys.executable, "-c", DEPLOYER_CREATE, flow.name, name], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    runs: list[str] = []
    try:
        assert json.loads(p.stdout.splitlines()[-1]) == {"name": name, "flow": flow_name}
        sensor_subscribed(env, name)
        publish(env, event, {"table": "events", "rows": 7})
        run_id = started_by_event(env, name, runs)
        succeeded(env, run_id)
        got = read_run(env, f"{flow_name}/{run_id}", "{'table': run.data.table, 'rows': run.data.min_rows}")
        assert got == {"table": "events", "rows": 7}, got
    finally:
        undeploy(env, flow, runs, "--name", name)
