"""A resumed run's wall time against a fresh run's, on the real engine (e2e/cluster).

The flow: start, a foreach of 2 splits, each a gang of 2 ranks that work ``--work`` seconds,
a join per gang, a join of the splits, and an end step that fails while the flow's code
says so. Each round:

* **fresh**: `argo-workflows trigger`, the whole run, failing at ``end``;
* **resumed**: the flow fixed and deployed again (`create`), then `argo-workflows resume
  --origin-run-id` of that run: every task but ``end`` is cloned, and both gangs are
  skipped (their splitters clone them whole: no JobSet, no pod).

With ``--sweep N`` the flow is instead a foreach of N trivial tasks, a join and an end step
that fails: the resumed run's splitter clones the N tasks in its pod (plugins/resume_foreach.py)
and Argo skips the fan-out.

Printed: the median seconds of each over the rounds (the Workflow's startedAt to
finishedAt, as Argo records them), resumed / fresh, and the pods each run started (the
Workflow's Pod nodes). Metaflow's own Argo integration has no resume on the cluster, so
there is no core column.

    eval "$(python3 e2e/cluster up)"   # or have it up
    python benchmarks/resume_cluster.py [--rounds 3] [--work 20] [--sweep 200]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cluster_vs_core import Kube, cluster_env

FLOW = '''
import time
from metaflow import FlowSpec, kubernetes, parallel, step

BROKEN = %(broken)s


class ResumeClusterBench(FlowSpec):
    @step
    def start(self):
        self.splits = [0, 1]
        self.next(self.fan, foreach="splits")

    @step
    def fan(self):
        self.next(self.train, num_parallel=2)

    @kubernetes(cpu=0.25, memory=300)
    @parallel
    @step
    def train(self):
        time.sleep(%(work)s)  # the gang's compute
        self.next(self.gather)

    @step
    def gather(self, inputs):
        self.next(self.join)

    @step
    def join(self, inputs):
        self.next(self.end)

    @step
    def end(self):
        if BROKEN:
            raise RuntimeError("the bug a user fixes before resuming")


if __name__ == "__main__":
    ResumeClusterBench()
'''
SWEEP = '''
from metaflow import FlowSpec, kubernetes, step

BROKEN = %(broken)s


class ResumeClusterBench(FlowSpec):
    @step
    def start(self):
        self.items = list(range(%(splits)d))
        self.next(self.work, foreach="items")

    @kubernetes(cpu=0.1, memory=200)
    @step
    def work(self):
        self.value = self.input
        self.next(self.join)

    @step
    def join(self, inputs):
        self.total = sum(i.value for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        if BROKEN:
            raise RuntimeError("the bug a user fixes before resuming")


if __name__ == "__main__":
    ResumeClusterBench()
'''
WAIT_SECONDS = 3600  # for one run to finish


def flow_cmd(flow: Path, env: dict, *args: str) -> None:
    p = subprocess.run([sys.executable, flow.name, *args], cwd=flow.parent, env=env, capture_output=True, text=True,
                       timeout=600)
    if p.returncode != 0:
        raise SystemExit("%s %s exited %d:\n%s" % (flow.name, " ".join(args), p.returncode, (p.stdout + p.stderr)[-2000:]))


def run_seconds(env: dict, run_id: str, phase: str) -> tuple[float, int]:
    """Wait (bounded) for the run's Workflow to finish in ``phase``; its startedAt to
    finishedAt, and how many pods it started."""
    name, deadline = run_id.removeprefix("argo-"), time.monotonic() + WAIT_SECONDS
    kube = Kube(env)
    while True:
        status = json.loads(kube("get", "workflow", name, "-o", "json")).get("status", {})
        if status.get("phase") in ("Succeeded", "Failed", "Error"):
            break
        if time.monotonic() > deadline:
            raise SystemExit("workflow %s not finished after %d s" % (name, WAIT_SECONDS))
        time.sleep(2)
    if status["phase"] != phase:
        raise SystemExit("workflow %s ended %s, not %s: %s" % (name, status["phase"], phase, status.get("message")))
    stamp = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    pods = sum(1 for node in status.get("nodes", {}).values() if node.get("type") == "Pod")
    return (stamp(status["finishedAt"]) - stamp(status["startedAt"])).total_seconds(), pods


def one_round(flow: Path, env: dict, source: str, shape: dict, runs: list[str]) -> dict[str, float]:
    ids = flow.parent / "run-id"
    flow.write_text(source % dict(shape, broken=True))
    flow_cmd(flow, env, "argo-workflows", "create")
    flow_cmd(flow, env, "argo-workflows", "trigger", "--run-id-file", str(ids))
    origin = ids.read_text().strip()
    runs.append(origin)
    fresh, fresh_pods = run_seconds(env, origin, "Failed")
    flow.write_text(source % dict(shape, broken=False))
    flow_cmd(flow, env, "argo-workflows", "create")
    flow_cmd(flow, env, "argo-workflows", "resume", "--origin-run-id", origin, "--run-id-file", str(ids))
    runs.append(ids.read_text().strip())
    resumed, resumed_pods = run_seconds(env, runs[-1], "Succeeded")
    return {"fresh": fresh, "resumed": resumed, "fresh pods": fresh_pods, "resumed pods": resumed_pods}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=float, default=20.0, help="seconds each rank works")
    parser.add_argument("--sweep", type=int, default=0, help="a foreach of this many trivial tasks instead of gangs")
    args = parser.parse_args()
    source, shape = (SWEEP, {"splits": args.sweep}) if args.sweep else (FLOW, {"work": args.work})
    env = cluster_env()
    with tempfile.TemporaryDirectory() as tmp:
        flow = Path(tmp) / "resume_cluster_bench.py"
        rounds, runs = [], []
        try:
            for _ in range(args.rounds):
                rounds.append(one_round(flow, env, source, shape, runs))
        finally:  # every run (its JobSets go with it), then the template
            if runs:
                Kube(env)("delete", "workflows", "--wait=false", *(r.removeprefix("argo-") for r in runs), check=False)
            if flow.exists():
                subprocess.run([sys.executable, flow.name, "argo-workflows", "delete"], cwd=tmp, env=env,
                               capture_output=True, timeout=300)
    fresh = statistics.median(r["fresh"] for r in rounds)
    resumed = statistics.median(r["resumed"] for r in rounds)
    what = ("a foreach of %d trivial tasks" % args.sweep if args.sweep
            else "2 gangs of 2 ranks working %.0f s each" % args.work)
    print("%s, end fails; %d rounds; median seconds (Argo's startedAt to finishedAt)" % (what, args.rounds))
    print("fresh %6.1f  resumed %6.1f  resumed/fresh %.2f  pods: fresh %d, resumed %d" % (
        fresh, resumed, resumed / fresh, rounds[-1]["fresh pods"], rounds[-1]["resumed pods"]))
    print("rounds: %s" % ", ".join("%.1f/%.1f" % (r["fresh"], r["resumed"]) for r in rounds))


if __name__ == "__main__":
    main()
