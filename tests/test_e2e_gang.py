"""E2E: @parallel gangs as JobSets — inside a foreach, and under faults (a worker that
exits non-zero, a control killed by SIGKILL, a gang that never gets scheduled)."""
import re
import time

from flowtools import gang_flow
from test_e2e_support import compile_flow, control_task_id, mf_env, tail  # noqa: F401 - fixture

GANG_IN_FOREACH = """
from metaflow import FlowSpec, step, parallel, current

class GangForeachFlow(FlowSpec):
    @step
    def start(self):
        self.items = ["a", "b", "c"]
        self.next(self.prep, foreach="items")

    @step
    def prep(self):
        self.item = self.input
        self.next(self.train, num_parallel=2)

    @parallel
    @step
    def train(self):
        self.rank = current.parallel.node_index
        self.tid = current.task_id
        self.next(self.gang_join)

    @step
    def gang_join(self, inputs):
        self.members = sorted(i.tid for i in inputs)
        self.ranks = sorted(i.rank for i in inputs)
        self.items_seen = sorted({i.item for i in inputs})
        self.merge_artifacts(inputs, include=["item"])
        self.next(self.join)

    @step
    def join(self, inputs):
        self.gangs = sorted((i.item, i.members, i.ranks, i.items_seen) for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        pass

if __name__ == "__main__":
    GangForeachFlow()
"""


def test_parallel_inside_a_foreach_of_three(mf_env, tmp_path):
    c = compile_flow(tmp_path, mf_env, GANG_IN_FOREACH)
    result, rec = c.run()
    assert result.status == "Succeeded", tail(result, rec)
    assert len(result.jobsets) == 3, sorted(result.jobsets)
    assert all(js["status"]["terminalState"] == "Completed" for js in result.jobsets.values())
    got = c.client("""
        run = Run(sys.argv[1])
        print(json.dumps({"ok": run.successful, "ids": {s.id: sorted(t.id for t in s) for s in run},
                          "gangs": run["join"].task.data.gangs,
                          "gang_join": {t.id: t.data.members for t in run["gang_join"]}}))
    """, "GangForeachFlow/" + result.run_id)
    assert got["ok"] is True
    train = got["ids"]["train"]
    assert len(train) == 6 and len(set(train)) == 6
    entropies = {re.fullmatch(r"(?:control-(\w{10})-0|worker-(\w{10})-0)", t).group(1, 2) for t in train}
    es = sorted({a or b for a, b in entropies})
    assert len(es) == 3
    assert sorted(train) == sorted(["control-%s-0" % e for e in es] + ["worker-%s-0" % e for e in es])
    assert got["ids"]["gang_join"] == ["gang_join-0", "gang_join-1", "gang_join-2"]
    assert got["ids"]["prep"] == ["prep-0", "prep-1", "prep-2"]
    gangs = got["gangs"]
    assert [g[0] for g in gangs] == ["a", "b", "c"]
    for item, members, ranks, items_seen in gangs:
        assert ranks == [0, 1] and items_seen == [item]
        [e] = {m.split("-")[1] for m in members}
        assert members == ["control-%s-0" % e, "worker-%s-0" % e]
    assert sorted(m for g in gangs for m in g[1]) == sorted(train)
    # one JobSet per gang, named by its own id (not E: a resumed run keeps E), running its gang's ids
    assert len(result.jobsets) == 3 and len({js.split("-")[1] for js in result.jobsets}) == 3
    assert {control_task_id(js) for js in result.jobsets.values()} == {"control-%s-0" % e for e in es}


FAULTS = """
import os, time
from metaflow import FlowSpec, step, parallel, retry, current

def wait_for_control_attempt_0():
    from metaflow import Task, namespace
    namespace(None)
    path = "/".join((current.flow_name, current.run_id, current.step_name,
                     os.environ["MF_PARALLEL_CONTROL_TASK_ID"]))
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if Task(path, attempt=0).finished:
                return
        except Exception:
            pass
        time.sleep(0.3)

class GangFaultFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.train, num_parallel=2)

    @retry(times=1, minutes_between_retries=0)
    @parallel
    @step
    def train(self):
        self.rank = current.parallel.node_index
        self.attempt = current.retry_count
        self.control_note = "control attempt %d" % current.retry_count
        if current.retry_count == 0 and self.rank == 1:
            wait_for_control_attempt_0()  # so that attempt's data exist to be read back
            os._exit(3)
        self.next(self.train_join)

    @step
    def train_join(self, inputs):
        self.attempts = sorted((i.rank, i.attempt) for i in inputs)
        self.next(self.mid)

    @step
    def mid(self):
        self.next(self.killed, num_parallel=2)

    @retry(times=1, minutes_between_retries=0)
    @parallel
    @step
    def killed(self):
        self.rank = current.parallel.node_index
        self.attempt = current.retry_count
        if current.retry_count == 0 and self.rank == 0:
            os.kill(os.getpid(), 9)
        self.next(self.killed_join)

    @step
    def killed_join(self, inputs):
        self.attempts = sorted((i.rank, i.attempt) for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        pass

if __name__ == "__main__":
    GangFaultFlow()
"""

READ_FAULTS = """
run = Run(sys.argv[1])
out = {"ok": run.successful, "ids": {s.id: sorted(t.id for t in s) for s in run}}
for name in ("train", "killed"):
    step = run[name]
    out[name] = {t.id: {"attempt": t.current_attempt, "data_attempt": t.data.attempt} for t in step}
    ctl = [t for t in step if t.id.startswith("control-")][0]
    a0 = Task(ctl.pathspec, attempt=0)
    out[name + "_a0"] = {"successful": a0.successful, "finished": a0.finished,
                         "attempt": a0.current_attempt,
                         "note": a0.data.control_note if name == "train" else None}
    out[name + "_join"] = run[name + "_join"].task.data.attempts
print(json.dumps(out))
"""


def test_gang_faults_retry_with_a_new_jobset(mf_env, tmp_path):
    c = compile_flow(tmp_path, mf_env, FAULTS)
    result, rec = c.run(timeout=240)
    assert result.status == "Succeeded", tail(result, rec)
    # two gang steps, each: attempt 0 Failed, attempt 1 Completed, under its own JobSet name
    names = sorted(result.jobsets)
    assert len(names) == 4, names
    states = {n: js["status"]["terminalState"] for n, js in result.jobsets.items()}
    by_entropy = {}
    for n in names:
        m = re.fullmatch(r"js-(\w{10})-(\d)", n)
        assert m, n
        by_entropy.setdefault(m.group(1), {})[int(m.group(2))] = states[n]
    assert sorted(by_entropy.values(), key=str) == [{0: "Failed", 1: "Completed"}] * 2, states
    got = c.client(READ_FAULTS, "GangFaultFlow/" + result.run_id)
    assert got["ok"] is True
    for name in ("train", "killed"):
        tasks = got[name]
        assert len(tasks) == 2
        assert all(v == {"attempt": 1, "data_attempt": 1} for v in tasks.values()), tasks
        assert got[name + "_join"] == [[0, 1], [1, 1]]
    # attempt 0 of the control of `train` finished before the worker failed: still readable
    assert got["train_a0"] == {"successful": True, "finished": True, "attempt": 0, "note": "control attempt 0"}
    # the control of `killed` died by SIGKILL on attempt 0: that attempt never finished
    assert got["killed_a0"]["successful"] is False and got["killed_a0"]["attempt"] == 0


NEVER_SCHEDULED = gang_flow("GangPendingFlow", """
    @resources(gpu=1)
    @timeout(seconds=4)
""")


def test_gang_that_is_never_scheduled_fails_at_its_deadline(mf_env, tmp_path):
    c = compile_flow(tmp_path, mf_env, NEVER_SCHEDULED)
    t0 = time.monotonic()
    result, rec = c.run(timeout=90, node_capacity={"nvidia.com/gpu": "0"})
    took = time.monotonic() - t0
    assert result.status == "Failed", tail(result, rec)
    assert took < 45, took
    [js] = result.jobsets.values()
    assert js["status"]["replicatedJobsStatus"][0]["succeeded"] == 0
    text = "\n".join(rec.lines())
    assert "Pending (Unschedulable): 0/1 nodes are available: Insufficient nvidia.com/gpu" in text
    # The deadline is each Job's (a resource step's deadline hangs a real Argo: #13937): the
    # JobSet fails, and the gang's report names the first Job past it.
    assert js["status"]["terminalState"] == "Failed"
    assert re.fullmatch(r"Error \(exit code 1\): gang step train: rank \d \(\w+\) failed first: DeadlineExceeded, "
                        r"no exit code \(job js-\w+-rank-\d+; .*\)", result.node("train-Failure-report").message), \
        result.node("train-Failure-report").message
    assert result.node("join").phase == "Omitted"  # never ran (Argo marks it Omitted)
