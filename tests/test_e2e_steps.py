"""E2E: recursion, @retry, @catch and @timeout, compiled and run like on a cluster,
then read back with Metaflow's client (task ids, attempts, artifacts)."""
import time

import pytest

from test_e2e_support import compile_flow, mf_env, mf_env_for, tail  # noqa: F401 - fixture

from mfargo.templates import step as step_templates

RECURSION = """
from metaflow import FlowSpec, step

class LoopFlow(FlowSpec):
    @step
    def start(self):
        self.i = 0
        self.next(self.loop)

    @step
    def loop(self):
        self.i += 1
        self.visits = getattr(self, "visits", []) + [self.i]
        self.state = "again" if self.i < 3 else "done"
        self.next({"again": self.loop, "done": self.after}, condition="state")

    @step
    def after(self):
        self.final = self.i
        self.seen = self.visits
        self.next(self.end)

    @step
    def end(self):
        pass

if __name__ == "__main__":
    LoopFlow()
"""


READ_LOOP = """
run = Run(sys.argv[1])
out = {"ok": run.successful, "ids": {s.id: sorted(t.id for t in s) for s in run},
       "loop_i": {t.id: t.data.i for t in run["loop"] if t.successful},
       "loop_state": {t.id: t.data.state for t in run["loop"] if t.successful}}
if "after" in out["ids"] and run["after"].task.successful:
    out["final"] = run["after"].task.data.final
    out["seen"] = run["after"].task.data.seen
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def loop_run(s3_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("loop")
    c = compile_flow(tmp, mf_env_for(s3_server, tmp), RECURSION)
    result, rec = c.run()
    return result, rec, c.client(READ_LOOP, "LoopFlow/" + result.run_id)


def test_recursive_switch_iterations_are_t_r0_r1_r2(loop_run):
    result, rec, got = loop_run
    assert got["ids"]["loop"] == ["loop-r0", "loop-r1", "loop-r2"], tail(result, rec)
    assert got["loop_i"] == {"loop-r0": 1, "loop-r1": 2, "loop-r2": 3}
    assert got["loop_state"] == {"loop-r0": "again", "loop-r1": "again", "loop-r2": "done"}
    loops = [n for n in result.nodes.values() if n.type == "Pod" and n.template_name == "loop"]
    assert len(loops) == 3


def test_step_after_recursion_reads_the_last_iteration(loop_run):
    result, rec, got = loop_run
    assert result.status == "Succeeded", tail(result, rec)
    assert got["ok"] is True
    assert got["ids"] == {"start": ["start"], "loop": ["loop-r0", "loop-r1", "loop-r2"], "after": ["after"], "end": ["end"]}
    assert got["final"] == 3 and got["seen"] == [1, 2, 3]


RETRY_CATCH = """
from metaflow import FlowSpec, step, retry, catch, current

class RetryCatchFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.flaky)

    @retry(times=1, minutes_between_retries=0)
    @step
    def flaky(self):
        self.attempt_seen = current.retry_count
        if current.retry_count == 0:
            raise RuntimeError("first attempt fails")
        self.next(self.doomed)

    @catch(var="err")
    @step
    def doomed(self):
        self.before = "ran"
        raise ValueError("always broken")
        self.next(self.end)

    @step
    def end(self):
        self.err_type = self.err.type if self.err else None

if __name__ == "__main__":
    RetryCatchFlow()
"""


def test_retry_then_catch(mf_env, tmp_path):
    c = compile_flow(tmp_path, mf_env, RETRY_CATCH)
    result, rec = c.run()
    assert result.status == "Succeeded", tail(result, rec)
    got = c.client("""
        run = Run(sys.argv[1])
        flaky = run["flaky"].task
        doomed = run["doomed"].task
        a0 = Task(flaky.pathspec, attempt=0)
        print(json.dumps({"ok": run.successful, "ids": {s.id: sorted(t.id for t in s) for s in run},
                          "attempt": flaky.current_attempt, "attempt_seen": flaky.data.attempt_seen,
                          "attempt_md": flaky.metadata_dict.get("attempt"),
                          "argo": {k: flaky.metadata_dict.get("argo-workflow-" + k)
                                   for k in ("template", "name", "namespace")},
                          "a0_ok": a0.successful, "a0_attempt": a0.current_attempt,
                          "err_type": doomed.data.err.type, "err": str(doomed.data.err),
                          "end_err_type": run["end"].task.data.err_type,
                          "doomed_attempt": doomed.current_attempt}))
    """, "RetryCatchFlow/" + result.run_id)
    assert got["ok"] is True
    assert got["ids"] == {"start": ["start"], "flaky": ["flaky"], "doomed": ["doomed"], "end": ["end"]}
    assert got["attempt"] == 1 and got["attempt_seen"] == 1 and got["attempt_md"] == "1"
    assert got["a0_ok"] is False and got["a0_attempt"] == 0
    assert got["err_type"] == "builtins.ValueError" and "always broken" in got["err"]
    assert got["end_err_type"] == "builtins.ValueError"
    assert got["doomed_attempt"] == 0
    # the workflow's metadata fields core's Argo pods register (argo_workflows_decorator.py)
    assert got["argo"] == {"template": c.doc["metadata"]["name"], "name": result.run_id.removeprefix("argo-"),
                           "namespace": c.doc["metadata"].get("namespace", "default")}, got["argo"]
    pods = [n for n in result.nodes.values() if n.type == "Pod" and n.template_name == "flaky"]
    assert len(pods) == 2, [n.display_name for n in pods]


TIMEOUT = """
from metaflow import FlowSpec, step, timeout
import time

class TimeoutFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.slow)

    @timeout(seconds=3)
    @step
    def slow(self):
        time.sleep(120)
        self.next(self.end)

    @step
    def end(self):
        pass

if __name__ == "__main__":
    TimeoutFlow()
"""


def test_timeout_kills_a_slow_step(mf_env, tmp_path):
    c = compile_flow(tmp_path, mf_env, TIMEOUT)
    [slow] = [t for t in c.doc["spec"]["templates"] if t["name"] == "slow"]
    # Metaflow's @timeout ends the attempt, as the step's own failure; the pod's deadline is the backstop
    assert slow["activeDeadlineSeconds"] == 3 + step_templates.TIMEOUT_GRACE_SECONDS
    t0 = time.monotonic()
    result, rec = c.run(timeout=90)
    took = time.monotonic() - t0
    assert result.status == "Failed", tail(result, rec)
    assert took < 45, took
    assert result.node("end").phase == "Omitted"  # never ran (Argo marks it Omitted)
    assert result.message.startswith("child 'slow' failed"), result.message
    assert "not retried" in result.node("slow").message  # the keeper's final failure: no retry on the budget
