"""E2E: task logs, Metaflow's way. Flows compiled by mfargo, run by the local runner
on the loopback S3 server; what each task printed is read back through Metaflow's
client (Task.stdout/.stderr/.loglines) and `flow.py logs`, and still shows in the
pods' own output."""
import subprocess
import sys

import pytest

from flowtools import linear_flow
from test_e2e_support import compile_flow, mf_env_for, tail

LOGS_FLOW = """
import sys
from metaflow import FlowSpec, Parameter, step, parallel, current

class LogsFlow(FlowSpec):
    who = Parameter("who", default="world")

    @step
    def start(self):
        print("start says hello %s" % self.who)
        print("start warns", file=sys.stderr)
        self.items = ["a", "b"]
        self.next(self.each, foreach="items")

    @step
    def each(self):
        print("child of %s" % self.input)
        self.next(self.join)

    @step
    def join(self, inputs):
        self.next(self.gang)

    @step
    def gang(self):
        self.next(self.train, num_parallel=3)

    @parallel
    @step
    def train(self):
        print("rank %d of %d" % (current.parallel.node_index, current.parallel.num_nodes))
        print("rank %d stderr" % current.parallel.node_index, file=sys.stderr)
        self.next(self.gang_join)

    @step
    def gang_join(self, inputs):
        self.next(self.end)

    @step
    def end(self):
        print("the end")

if __name__ == "__main__":
    LogsFlow()
"""

READ_LOGS = """
run = Run(sys.argv[1])
out = {}
for s in run:
    for t in s:
        out["%s/%s" % (s.id, t.id)] = {
            "stdout": t.stdout, "stderr": t.stderr,
            "lines": [line for _, line in t.loglines("stdout")],
        }
print(json.dumps({"tasks": out, "system_tags": sorted(run.system_tags)}))
"""


@pytest.fixture(scope="module")
def logs_run(s3_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("logs")
    c = compile_flow(tmp, mf_env_for(s3_server, tmp), LOGS_FLOW)
    result, rec = c.run(params={"who": "argo"}, timeout=180)
    assert result.status == "Succeeded", tail(result, rec)
    return c, result, rec, c.client(READ_LOGS, "LogsFlow/" + result.run_id)


def _by_step(got: dict, step: str) -> dict:
    return {k.split("/")[1]: v for k, v in got["tasks"].items() if k.split("/")[0] == step}


def test_linear_step_logs_both_streams_and_its_init(logs_run):
    _, _, _, got = logs_run
    [start] = _by_step(got, "start").values()
    assert "start says hello argo" in start["stdout"].splitlines()
    assert start["stderr"].splitlines()[-1] == "start warns"
    assert "start says hello argo" in start["lines"]
    [end] = _by_step(got, "end").values()
    assert end["stdout"].splitlines() == ["the end"]


def test_every_foreach_child_has_its_own_logs(logs_run):
    _, _, _, got = logs_run
    children = _by_step(got, "each")
    assert sorted(v["stdout"].strip() for v in children.values()) == ["child of a", "child of b"]


def test_every_rank_of_a_gang_of_three_has_its_own_logs(logs_run):
    _, _, _, got = logs_run
    ranks = _by_step(got, "train")
    assert len(ranks) == 3, sorted(ranks)
    by_rank = {v["stdout"].strip(): v["stderr"].strip() for v in ranks.values()}
    assert by_rank == {"rank %d of 3" % i: "rank %d stderr" % i for i in range(3)}
    control = [v for k, v in ranks.items() if k.startswith("control-")]
    assert control and control[0]["stdout"].strip() == "rank 0 of 3"


def test_runs_are_tagged_runtime_argo_workflows(logs_run):
    _, _, _, got = logs_run
    assert "runtime:argo-workflows" in got["system_tags"], got["system_tags"]
    assert "runtime:dev" not in got["system_tags"]


def test_output_still_reaches_the_pods_own_log(logs_run):
    _, _, rec, _ = logs_run
    printed = {e.message for e in rec.kinds("log")}
    assert {"start says hello argo", "start warns", "child of a", "rank 2 of 3", "the end"} <= printed


def test_flow_py_logs_reads_them(logs_run):
    c, result, _, got = logs_run
    for task, logs in _by_step(got, "each").items():
        out = _flow_logs(c, "%s/each/%s" % (result.run_id, task))
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout == logs["stdout"]
    [start] = _by_step(got, "start")
    err = _flow_logs(c, "%s/start/%s" % (result.run_id, start), "--stderr")
    assert err.returncode == 0 and err.stdout.splitlines()[-1] == "start warns", err.stderr[-2000:]


def _flow_logs(c, pathspec: str, *opts: str) -> subprocess.CompletedProcess:
    env = dict(c.env, METAFLOW_DEFAULT_METADATA="local")
    cmd = [sys.executable, "flow.py", "--quiet", "--datastore=s3", "--datastore-root=" + c.root, "logs", *opts,
           pathspec]
    return subprocess.run(cmd, cwd=c.code_dir, env=env, capture_output=True, text=True, timeout=120)


FAILING_FLOW = """
import os, signal, sys, time
from metaflow import FlowSpec, step, timeout

class FailFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.boom, self.slow, self.stopped)

    @step
    def boom(self):
        print("about to fail")
        raise ValueError("boom went the step")
        self.next(self.join)

    @timeout(seconds=15)
    @step
    def slow(self):
        print("slow starts", flush=True)
        time.sleep(300)
        self.next(self.join)

    @step
    def stopped(self):
        print("stopped step starts", flush=True)
        os.kill(os.getppid(), signal.SIGTERM)  # its pod being stopped: the pod's main process is signalled
        time.sleep(300)
        self.next(self.join)

    @step
    def join(self, inputs):
        self.next(self.end)

    @step
    def end(self):
        pass

if __name__ == "__main__":
    FailFlow()
"""


@pytest.fixture(scope="module")
def failed_run(s3_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fail")
    c = compile_flow(tmp, mf_env_for(s3_server, tmp), FAILING_FLOW)
    # Kubernetes' default grace period after SIGTERM is 30 s; the runner's default is 2 s.
    result, rec = c.run(timeout=120, kill_grace=10)
    assert result.status == "Failed", tail(result, rec)
    return c, result, rec, c.client(READ_LOGS, "FailFlow/" + result.run_id)


def test_a_step_that_raises_keeps_its_logs_and_traceback(failed_run):
    c, result, rec, got = failed_run
    [boom] = _by_step(got, "boom").values()
    assert boom["stdout"].splitlines() == ["about to fail"], tail(result, rec)
    assert "ValueError: boom went the step" in boom["stderr"]


def test_a_step_stopped_by_sigterm_keeps_what_it_printed(failed_run):
    c, result, rec, got = failed_run
    [stopped] = _by_step(got, "stopped").values()
    assert stopped["stdout"].splitlines() == ["stopped step starts"], tail(result, rec)
    assert stopped["lines"] == ["stopped step starts"]


def test_a_step_ended_by_its_timeout_keeps_what_it_printed(failed_run):
    """Metaflow's @timeout ends the step (the pod's deadline is later: docs/cli.md, "Retries"),
    and says so after what the step printed."""
    c, result, rec, got = failed_run
    [(task, slow)] = _by_step(got, "slow").items()
    first, said = slow["stdout"].splitlines()
    assert first == "slow starts" and said.endswith("Step slow timed out after 0 hours, 0 minutes, 15 seconds"), \
        tail(result, rec)
    out = _flow_logs(c, "%s/slow/%s" % (result.run_id, task))
    assert out.returncode == 0 and out.stdout.splitlines()[0] == "slow starts", out.stderr[-2000:]


HOOK_FLOW = linear_flow("HookFlow", flow_decorators="@exit_hook(on_success=[notify])", imports="""
def notify(run=None):
    print("hook saw %s" % (run.pathspec if run else "no run"))
""")

READ_HOOK_LOGS = """
import os
from metaflow.datastore import FlowDataStore
from metaflow.mflog.mflog import parse
from metaflow.plugins import DATASTORES

storage = [d for d in DATASTORES if d.TYPE == "s3"][0]
flow_store = FlowDataStore("HookFlow", None, storage_impl=storage, ds_root=os.environ["METAFLOW_DATASTORE_SYSROOT_S3"])
task = flow_store.get_task_datastore(sys.argv[1], "_hook_notify", "1", 0, mode="r", allow_not_done=True)
[(_, blob)] = task.load_logs(["task"], "stdout")
print(json.dumps([parse(line).msg.decode() for line in blob.splitlines()]))
"""


def test_exit_hook_output_is_kept_where_core_puts_hook_logs(s3_server, tmp_path):
    # Core names a hook's logs <flow>/<run>/_hook_<fn>/1 (attempt 0); no task metadata exists
    # for it, so Metaflow's datastore reads them (the client's Task needs metadata).
    c = compile_flow(tmp_path, mf_env_for(s3_server, tmp_path), HOOK_FLOW)
    result, rec = c.run(timeout=120)
    assert result.status == "Succeeded", tail(result, rec)
    lines = c.client(READ_HOOK_LOGS, result.run_id)
    assert lines == ["hook saw HookFlow/%s" % result.run_id], tail(result, rec)
