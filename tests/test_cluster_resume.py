"""Resuming a failed run on the real engine (e2e/cluster): a foreach of gangs whose second gang
fails, the flow fixed and deployed again, then `argo-workflows resume` and the Deployer's
`resume`, read back with Metaflow's client from the metadata service."""

from __future__ import annotations

import subprocess
import sys

import pytest
from clustertools import ON_EVERY_ARGO, failed_nodes, flow_cmd, wait_workflow
from test_cluster_e2e import read_run
from test_cluster_gangs import SMALL, deployed, write_flow
from test_resume import gang_in_foreach

pytestmark = [pytest.mark.cluster, ON_EVERY_ARGO]

READ = ("{'ok': run.successful, 'ranks': [list(r) for r in run['end'].task.data.all_ranks], "
        "'tasks': {'%s/%s' % (s.id, t.id): ['origin-task-id' in t.metadata_dict, t.metadata_dict.get('origin-run-id')] "
        "for s in run for t in s}}")


DEPLOYER_RESUME = """
import sys
from metaflow import Deployer

deployed = Deployer(sys.argv[1], show_output=False).argo_workflows().create()
print(deployed.resume(origin_run_id=sys.argv[2], step_to_rerun="join").pathspec)
"""


def cloned(tasks: dict) -> set[str]:
    return {path for path, (is_clone, _) in tasks.items() if is_clone}


def test_a_fixed_flow_resumes_its_failed_gang_on_the_cluster(cluster_env, tmp_path):
    flow = write_flow(tmp_path, "GangResumeFlow", gang_in_foreach("True", ranks=2, decorators=SMALL))
    with deployed(cluster_env, flow) as start:
        origin = start(flow)
        wf = wait_workflow(cluster_env, origin, timeout=600)
        assert wf["status"]["phase"] == "Failed", failed_nodes(wf)

        flow.write_text(gang_in_foreach("False", ranks=2, decorators=SMALL))  # fixed, deployed again (same name)
        flow_cmd(cluster_env, flow, "argo-workflows", "create")
        ids = tmp_path / "resumed-id"
        flow_cmd(cluster_env, flow, "argo-workflows", "resume", "--origin-run-id", origin, "--run-id-file", str(ids))
        resumed = ids.read_text().strip()
        start.runs.append(resumed)
        wf = wait_workflow(cluster_env, resumed, timeout=600)
        assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)

        got = read_run(cluster_env, f"GangResumeFlow/{resumed}", READ)
        assert got["ok"] is True and got["ranks"] == [[0, 0], [0, 1], [1, 0], [1, 1]]
        trains = sorted(p for p in got["tasks"] if p.startswith("train/"))
        assert len(trains) == 4
        # Split 0's gang, start and the fans were cloned; split 1's gang ran again, whole.
        origin_tasks = read_run(cluster_env, f"GangResumeFlow/{origin}", READ.replace(
            "'ranks': [list(r) for r in run['end'].task.data.all_ranks], ", ""))["tasks"]
        assert cloned(got["tasks"]) >= {"start/start", "fan/fan-0", "fan/fan-1", "gather/gather-0"}
        assert len(cloned(got["tasks"]) & set(trains)) == 2 and "gather/gather-1" not in cloned(got["tasks"])
        assert {p for p in origin_tasks if p.startswith("train/")} == set(trains)  # the gangs' task ids are the origin's
        assert {origin_of for _, origin_of in got["tasks"].values()} == {origin}

        # The Deployer resumes the resumed run from `join`: only join and end run.
        p = subprocess.run([sys.executable, "-c", DEPLOYER_RESUME, flow.name, resumed], cwd=tmp_path, env=cluster_env,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        again = p.stdout.splitlines()[-1]
        start.runs.append(again.split("/")[1])
        wf = wait_workflow(cluster_env, again.split("/")[1], timeout=600)
        assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
        last = read_run(cluster_env, again, READ)
        assert {p for p in last["tasks"] if p not in cloned(last["tasks"])} == {"join/join", "end/end"}
