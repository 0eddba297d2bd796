"""Resuming a failed run on the real engine (e2e/cluster): a foreach of gangs whose second gang
fails, the flow fixed and deployed again, then `argo-workflows resume` and the Deployer's
`resume`; and the same run re-run in place by Argo's own `argo retry`. Read back with
Metaflow's client from the metadata service.

The resumed foreach of gangs runs on the default Argo release only: Argo's part in it (a
cloned gang's task skipped by its `when`) also runs on both releases in
test_cluster_argo_server.py's resume from the join; the rest is the pods' work."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import engine_tools
from clustertools import ON_EVERY_ARGO, failed_nodes, flow_cmd, kubectl, wait_workflow
from test_cluster_e2e import read_run
from test_cluster_gangs import SMALL, deployed, write_flow
from test_resume import gang_in_foreach

pytestmark = pytest.mark.cluster

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
        assert list(owned_jobsets(cluster_env, resumed).values()) == ["Completed"]  # split 0's gang never started

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
        assert owned_jobsets(cluster_env, again.split("/")[1]) == {}  # both gangs cloned: no JobSet at all


SWEEP = '''
from metaflow import FlowSpec, kubernetes, step

BROKEN = %(broken)s  # split 1 fails: the bug a user fixes before resuming


class SweepResumeFlow(FlowSpec):
    @step
    def start(self):
        self.items = list(range(%(width)d))
        self.next(self.square, foreach="items")

    @kubernetes(cpu=0.1, memory=200)
    @step
    def square(self):
        if BROKEN and self.input == 1:
            raise RuntimeError("split 1 is broken")
        self.value = self.input * self.input
        self.next(self.join)

    @step
    def join(self, inputs):
        self.total = sum(i.value for i in inputs)
        self.next(self.report)

    @step
    def report(self):  # a chain step: a resumed run's pod of `join` clones it (compiler/graph.py)
        self.line = "total %%d" %% self.total
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    SweepResumeFlow()
'''
SWEEP_READ = ("{'ok': run.successful, 'total': run['end'].task.data.total, "
              "'tasks': {'%s/%s' % (s.id, t.id): ['origin-task-id' in t.metadata_dict, t.metadata_dict.get('origin-run-id')] "
              "for s in run for t in s}}")


def pods_of(wf: dict) -> list[str]:
    """The step templates of the run's nodes that were pods (every other node starts none; the
    run's heartbeat daemon, a template mfargo adds, `0-...`, left out)."""
    return sorted(n["templateName"] for n in wf["status"]["nodes"].values()
                  if n["type"] == "Pod" and not n["templateName"].startswith("0-"))


@ON_EVERY_ARGO
def test_a_resumed_foreach_starts_pods_only_for_the_splits_that_failed(cluster_env, tmp_path):
    """The splitter's clone clones the splits that succeeded (plugins/resume_foreach.py): Argo
    expands only the failed split, and with none left skips the fan-out, whose join runs."""
    width = 4
    flow = write_flow(tmp_path, "SweepResumeFlow", SWEEP % {"broken": "True", "width": width})
    with deployed(cluster_env, flow) as start:
        origin = start(flow)
        wf = wait_workflow(cluster_env, origin, timeout=600)
        assert wf["status"]["phase"] == "Failed", failed_nodes(wf)
        assert pods_of(wf).count("square") == width
        # The body is one step: Argo's fan-out runs its template (its retry node and pod), no sub-DAG a split.
        assert [n["displayName"] for n in wf["status"]["nodes"].values() if n["type"] == "DAG"] == [origin[5:]]

        flow.write_text(SWEEP % {"broken": "False", "width": width})
        flow_cmd(cluster_env, flow, "argo-workflows", "create")
        ids = tmp_path / "resumed-id"
        flow_cmd(cluster_env, flow, "argo-workflows", "resume", "--origin-run-id", origin, "--run-id-file", str(ids))
        resumed = ids.read_text().strip()
        start.runs.append(resumed)
        wf = wait_workflow(cluster_env, resumed, timeout=600)
        assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
        assert pods_of(wf) == ["end", "join", "report", "square", "start"]  # split 1's square only
        got = read_run(cluster_env, f"SweepResumeFlow/{resumed}", SWEEP_READ)
        assert got["ok"] is True and got["total"] == sum(i * i for i in range(width))
        squares = {"square/square-%d" % i for i in range(width)}
        assert cloned(got["tasks"]) == {"start/start"} | squares - {"square/square-1"}

        # Resumed again from `end`: every split is cloned by start's pod and Argo skips the fan-out;
        # join's pod clones `report`, whose task Argo skips by its `when`.
        flow_cmd(cluster_env, flow, "argo-workflows", "resume", "end", "--origin-run-id", resumed,
                 "--run-id-file", str(ids))
        again = ids.read_text().strip()
        start.runs.append(again)
        wf = wait_workflow(cluster_env, again, timeout=600)
        assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
        assert pods_of(wf) == ["end", "join", "start"]
        [fan_out] = [n for n in wf["status"]["nodes"].values() if n["displayName"] == "square"]
        assert (fan_out["phase"], fan_out.get("message")) == ("Skipped", "Skipped, empty params")
        [report] = [n for n in wf["status"]["nodes"].values() if n["displayName"] == "report"]
        assert report["phase"] == "Skipped", report
        last = read_run(cluster_env, f"SweepResumeFlow/{again}", SWEEP_READ)
        assert last["ok"] is True and last["total"] == got["total"]
        assert cloned(last["tasks"]) == {"start/start", "join/join", "report/report"} | squares
        assert {origin_of for _, origin_of in last["tasks"].values()} == {resumed}


ATTEMPTS = ("{'ok': run.successful, 'ranks': [list(r) for r in run['end'].task.data.all_ranks], "
            "'attempts': {'%s/%s' % (s.id, t.id): [__import__('metaflow').Task(t.pathspec, attempt=a).successful "
            "for a in range(t.current_attempt + 1)] for s in run for t in s}}")


@ON_EVERY_ARGO
def test_argo_retry_reruns_the_failed_gang_and_task_as_their_next_attempts(cluster_env, tmp_path):
    """`argo retry` makes the failed nodes again with {{retries}} back at 0: each retried task
    runs as its attempt 1 (never a second attempt 0), the gang as a new JobSet (the failure
    report deleted the old one), and the join reads the new attempts."""
    flow = write_flow(tmp_path, "GangRetryFlow", gang_in_foreach("True", ranks=2, decorators=SMALL,
                                                                 first_attempts_fail=True))
    with deployed(cluster_env, flow) as start:
        run = start(flow)
        wf = wait_workflow(cluster_env, run, timeout=600)
        assert wf["status"]["phase"] == "Failed", failed_nodes(wf)
        # Split 0's gang kept its JobSet; the report deleted split 1's, which failed.
        assert list(owned_jobsets(cluster_env, run).values()) == ["Completed"]

        argo_retry(cluster_env, run)
        wf = wait_workflow(cluster_env, run, timeout=600)
        assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)

        got = read_run(cluster_env, f"GangRetryFlow/{run}", ATTEMPTS)
        assert got["ok"] is True and got["ranks"] == [[0, 0], [0, 1], [1, 0], [1, 1]]
        attempts = got["attempts"]
        retried = {p for p, oks in attempts.items() if len(oks) > 1}
        gang = {p for p in retried if p.startswith("train/")}
        # Split 1's gang re-ran whole (both ranks; the control's attempt 0 may have finished
        # before its worker failed) and split 0's gather ran again; nothing else did.
        assert len(gang) == 2 and retried == gang | {"gather/gather-0"}, attempts
        assert all(len(attempts[p]) == 2 and attempts[p][1] is True for p in retried), attempts
        assert attempts["gather/gather-0"] == [False, True] and any(attempts[p][0] is False for p in gang)
        assert all(oks == [True] for p, oks in attempts.items() if p not in retried), attempts
        assert list(owned_jobsets(cluster_env, run).values()) == ["Completed"] * 2  # split 1's made again


def argo_retry(env: dict, run: str) -> None:
    """Argo's own `argo retry` of the run (the CLI of the cluster's Argo release)."""
    argo = engine_tools.binary("%s@%s" % (engine_tools.ARGO, env["MFARGO_E2E_ARGO"]))
    retry = subprocess.run([str(argo), "retry", run.removeprefix("argo-"), "-n", env["METAFLOW_KUBERNETES_NAMESPACE"]],
                           env=env, capture_output=True, text=True, timeout=120)
    assert retry.returncode == 0, retry.stdout + retry.stderr


def owned_jobsets(env: dict, run: str) -> dict[str, str]:
    """Name -> terminal state of the JobSets the run's Workflow owns (Argo's resource step
    sets the owner)."""
    items = json.loads(kubectl(env, "get", "jobsets", "-n", env["METAFLOW_KUBERNETES_NAMESPACE"], "-o", "json"))
    return {js["metadata"]["name"]: (js.get("status") or {}).get("terminalState") for js in items["items"]
            if any(o.get("name") == run.removeprefix("argo-") for o in js["metadata"].get("ownerReferences", []))}
