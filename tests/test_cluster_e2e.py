"""Flows deployed and run on the real engine (e2e/cluster), the way users do it.

`python flow.py argo-workflows create`, then `trigger`; the run is read back with Metaflow's
client (from the metadata service and S3 the pods wrote to).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from clustertools import ON_EVERY_ARGO, STATE, failed_nodes, flow_cmd, trigger, wait_workflow
from flowtools import EXAMPLES

pytestmark = pytest.mark.cluster


def read_run(env: dict, pathspec: str, expr: str):
    """Evaluate expr (with `run` = Metaflow's client Run) in a fresh process with env; JSON back."""
    code = ("import json, sys; from metaflow import Run, namespace; namespace(None); "
            f"run = Run({pathspec!r}); print(json.dumps({expr}))")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1])


@ON_EVERY_ARGO
def test_hello_runs_on_the_cluster(cluster_env, tmp_path):
    """The run, its steps, an artifact, a task's log and its Argo metadata, all through Metaflow's
    client from the metadata service (e2e/metadata_service.py) the pods registered with."""
    flow = tmp_path / "hello.py"
    shutil.copy(EXAMPLES / "hello.py", flow)
    flow_cmd(cluster_env, flow, "argo-workflows", "create")
    run_id = trigger(cluster_env, flow, "--greeting", "hi")
    wf = wait_workflow(cluster_env, run_id)
    assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
    got = read_run(cluster_env, f"HelloFlow/{run_id}",
                   "{'ok': run.successful, 'finished': run.finished, 'steps': sorted(s.id for s in run), "
                   "'message': run['hello'].task.data.message, 'log': run['hello'].task.stdout.strip(), 'greeting': run.data.greeting, "
                   "'workflow': run['hello'].task.metadata_dict.get('argo-workflow-name'), "
                   "'runtime': 'runtime:argo-workflows' in run.system_tags}")
    assert got == {"ok": True, "finished": True, "steps": ["end", "hello", "start"], "message": "hi, world",
                   "log": "hi, world", "greeting": "hi", "workflow": run_id.removeprefix("argo-"), "runtime": True}


SMALL_GANG = '@kubernetes(cpu=0.25, memory=400, shared_memory=64, port=29500)'


@ON_EVERY_ARGO
def test_gang_example_runs_on_the_cluster(cluster_env, tmp_path):
    """examples/distributed_training.py with a gang of 2 small pods (the node has 2 CPUs).

    Every rank's task, its artifacts and its log are read back with Metaflow's client.
    """
    source = (EXAMPLES / "distributed_training.py").read_text()
    big = '@kubernetes(image="python:3.11", cpu=2, memory=8192, shared_memory=1024, port=29500)'
    assert big in source, "the example's @kubernetes changed: update this test"
    flow = tmp_path / "distributed_training.py"
    flow.write_text(source.replace(big, SMALL_GANG))
    flow_cmd(cluster_env, flow, "argo-workflows", "create")
    run_id = trigger(cluster_env, flow, "--nodes", "2")
    wf = wait_workflow(cluster_env, run_id)
    assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
    got = read_run(cluster_env, f"DistributedTrainingFlow/{run_id}",
                   "{'ok': run.successful, 'ranks': run['join'].task.data.ranks, "
                   "'tasks': sorted([t.data.rank, t.data.world_size, t.successful, t.stdout.strip()] "
                   "for t in run['train'])}")
    assert got["ok"] is True and got["ranks"] == [0, 1], got
    control = [t[3].rsplit(" ", 1)[-1] for t in got["tasks"]]
    assert got["tasks"] == [[0, 2, True, f"rank 0 of 2, control at {control[0]}"],
                            [1, 2, True, f"rank 1 of 2, control at {control[0]}"]], got
    assert control[0] == control[1] and control[0], got


def _descendants(pids: set[int]) -> set[int]:
    """pids and all their descendants (SeaweedFS's weed processes are the S3 daemon's children)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = set(), list(pids)
    while todo:
        p = todo.pop()
        if p not in out:
            out.add(p)
            todo.extend(children.get(p, []))
    return out


def test_cluster_listens_only_on_loopback_and_its_bridges(cluster_env):
    """Every socket the cluster's processes listen on in the host's network namespace is on
    loopback or a node's bridge address (the workflow-controller's :6060 is in its own namespace)."""
    pids_dir = STATE / "pids"
    ours = _descendants({int(p.read_text().split()[0]) for p in pids_dir.glob("*.pid")})
    out = subprocess.run(["ss", "-Hltunp"], capture_output=True, text=True, check=True).stdout
    seen = []
    for line in out.splitlines():
        cols = line.split()
        local, users = cols[4], " ".join(cols[6:])
        owners = {int(m) for m in re.findall(r"pid=(\d+)", users)}
        if owners & ours:
            seen.append(local)
            host = local.rsplit(":", 1)[0].strip("[]")
            assert host in ("127.0.0.1", "::1", "10.77.0.1", "10.77.1.1"), f"{local} ({users})"
    assert any(s.startswith("10.77.0.1:") for s in seen) and any(s.startswith("127.0.0.1:") for s in seen), seen
    assert "10.77.1.1:10250" in seen, seen  # the second node's kubelet


@ON_EVERY_ARGO
def test_the_cluster_runs_the_engine_releases_mfargo_targets(cluster_env):
    """JobSet: the release of mfargo's default target (e2e/build.py's JOBSET is the one place that
    names it); Argo: the release this test asked for, as each controller reports itself at start."""
    import engine_tools
    from mfargo.base.versions import DEFAULT_JOBSET_VERSION

    jobset_log = (STATE / "logs" / "jobset.log").read_text()
    [started] = re.findall(r'"gitVersion": "(v[\d.]+)"', jobset_log)[-1:]
    assert started == engine_tools.JOBSET_RELEASES[0] and started.startswith("v" + DEFAULT_JOBSET_VERSION + ".")
    argo_log = (STATE / "logs" / "workflow-controller.log").read_text()
    starts = re.findall(r'msg="Starting Workflow Controller".* version=(v[\d.]+)', argo_log)
    assert starts and starts[-1] == cluster_env["MFARGO_E2E_ARGO"], starts
