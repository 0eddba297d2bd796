"""A task Argo runs again under an attempt number it already used (`argo retry` restarts
`{{retries}}` at 0) runs as its next free attempt instead (plugins/attempt_guard.py): the
pods' own commands (the task keeper, init_and_start, a step with mfargo's decorator) run
twice against one local datastore, read back with Metaflow's client."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from flowtools import clean_env, write_flow
from metaflow_extensions.mfargo.plugins import attempt_guard, init_and_start, pod_hooks, task_logs
from metaflow_extensions.mfargo.plugins import pod_contract as contract

FLOW = """
from metaflow import FlowSpec, current, retry, step


class GuardFlow(FlowSpec):
    @step
    def start(self):
        print("start runs as attempt", current.retry_count)
        if current.retry_count == 0:
            raise RuntimeError("the first attempt fails")
        self.attempt = current.retry_count
        self.next(self.end)

    @retry(times=1)
    @step
    def end(self):
        print("end runs as attempt", current.retry_count)


if __name__ == "__main__":
    GuardFlow()
"""

READ = """
import json, sys
from metaflow import Task, namespace
namespace(None)
out = {}
for path in sys.argv[1:]:
    task = Task(path)
    attempts = {}
    for n in range(task.current_attempt + 1):
        t = Task(path, attempt=n)
        attempts[n] = {"ok": t.successful, "stderr": t.stderr, "stdout": t.stdout}
    out[path] = {"current": task.current_attempt, "attempts": attempts}
print(json.dumps(out))
"""

RUN = "argo-guard"
STEP = ["--quiet", "--no-pylint", "--with", "mfargo_internal", "step"]


class Pod:
    """Runs a task's command as its pod would (a fresh pod each time, one datastore)."""

    def __init__(self, tmp_path: Path):
        self.dir = tmp_path
        self.flow = write_flow(tmp_path, FLOW, name="guard_flow.py")
        self.env = clean_env(home=tmp_path / "home", METAFLOW_DEFAULT_DATASTORE="local",
                             METAFLOW_DEFAULT_METADATA="local", METAFLOW_DATASTORE_SYSROOT_LOCAL=str(tmp_path),
                             MF_DATASTORE="local")
        self.pods = 0
        self.flow_name = "GuardFlow"

    def run(self, step: str, task: str, command: list[str], attempt: int = 0) -> subprocess.CompletedProcess:
        self.pods += 1
        logs = self.dir / ("pod-%d" % self.pods)
        logs.mkdir()
        env = dict(self.env, MF_PATHSPEC="%s/%s/%s/%s" % (self.flow_name, RUN, step, task), MF_ATTEMPT=str(attempt),
                   MFLOG_STDOUT=str(logs / "out"), MFLOG_STDERR=str(logs / "err"))
        return subprocess.run([sys.executable, "-m", task_logs.__name__, sys.executable, *command], cwd=self.dir,
                              env=env, capture_output=True, text=True, timeout=120)

    def start(self) -> subprocess.CompletedProcess:
        init = [self.flow.name, "--quiet", "--no-pylint", "init", "--run-id", RUN, "--task-id", "t-params"]
        step = [self.flow.name, *STEP, "start", "--run-id", RUN, "--task-id", "start",
                "--input-paths", "%s/_parameters/t-params" % RUN]
        return self.run("start", "start", ["-m", init_and_start.__name__, str(len(init)), *init, *step])

    def end(self, retry_count: int) -> subprocess.CompletedProcess:
        return self.run("end", "end", [self.flow.name, *STEP, "end", "--run-id", RUN, "--task-id", "end",
                                       "--input-paths", "%s/start/start" % RUN, "--retry-count", str(retry_count),
                                       "--max-user-code-retries", "1"], attempt=retry_count)

    def read(self, *paths: str) -> dict:
        proc = subprocess.run([sys.executable, "-c", READ, *("GuardFlow/%s/%s" % (RUN, p) for p in paths)],
                              cwd=self.dir, env=self.env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def marker(self, path: str, attempt: int) -> str:
        return self.marker_of("GuardFlow", path, attempt)

    def marker_of(self, flow: str, path: str, attempt: int) -> str:
        return (self.dir / ".metaflow" / flow / RUN / path / ("%d.attempt.json" % attempt)).read_text()


def test_a_retried_start_pod_runs_as_attempt_1_and_keeps_attempt_0_and_the_parameters(tmp_path):
    pod = Pod(tmp_path)
    first = pod.start()
    assert first.returncode == 1 and "the first attempt fails" in first.stderr
    parameters = pod.marker("_parameters/t-params", 0)

    again = pod.start()  # argo retry: the same command, {{retries}} back at 0
    assert again.returncode == 0, again.stderr[-2000:]
    assert "attempt 0 of this task already ran" in again.stderr

    start = pod.read("start/start")["GuardFlow/%s/start/start" % RUN]
    assert start["current"] == 1
    assert start["attempts"]["0"]["ok"] is False and start["attempts"]["1"]["ok"] is True
    assert "the first attempt fails" in start["attempts"]["0"]["stderr"]  # attempt 0's logs are its own still
    assert "already ran" not in start["attempts"]["0"]["stderr"]
    assert "already ran" in start["attempts"]["1"]["stderr"]
    assert start["attempts"]["1"]["stdout"].strip() == "start runs as attempt 1"
    assert pod.marker("_parameters/t-params", 0) == parameters  # init did not run again
    assert not (tmp_path / ".metaflow" / "GuardFlow" / RUN / "_parameters" / "t-params" / "1.attempt.json").exists()


def test_a_retried_step_with_retries_continues_its_numbering(tmp_path):
    pod = Pod(tmp_path)
    pod.start()
    assert pod.start().returncode == 0
    assert pod.end(0).returncode == 0 and pod.end(1).returncode == 0  # Argo's own retry: attempt 1
    third = pod.end(0)  # argo retry of the node: {{retries}} is 0 again
    assert third.returncode == 0, third.stderr[-2000:]
    fourth = pod.end(1)  # ... and its own retry after that: 1 again
    assert fourth.returncode == 0, fourth.stderr[-2000:]
    end = pod.read("end/end")["GuardFlow/%s/end/end" % RUN]
    assert end["current"] == 3
    assert [end["attempts"][str(n)]["stdout"].strip() for n in range(4)] == [
        "end runs as attempt %d" % n for n in range(4)]


def _option(words: list[str], name: str) -> str | None:
    return words[words.index(name) + 1] if name in words else None


def _renumber(tmp_path: Path, argv: list[str], given: int, free: int, status=attempt_guard.RENUMBER_EXIT):
    """As the step process asks after an argo retry: @retry counts afresh (``plan``)."""
    user = int(_option(argv, "--max-user-code-retries") or 0)
    attempt, max_retries, outside = attempt_guard.plan(given, user, set(range(free)), set(range(free)))
    path = tmp_path / "next"
    path.write_text("%d %d %d - 0\n" % (given, attempt, max_retries))
    words, attempt, given, outside = attempt_guard.renumbered(argv, status, str(path)) or (None,) * 4
    return None if words is None else (words, attempt, given)


def test_the_renumbered_command_moves_max_user_code_retries_with_the_attempt(tmp_path):
    argv = ["python", "f.py", "--with", "mfargo_internal", "step", "s", "--run-id", "r", "--task-id", "t",
            "--retry-count", "1", "--max-user-code-retries", "2", "user-arg"]
    words, attempt, given = _renumber(tmp_path, argv, 1, 4)
    assert (attempt, given) == (4, 1)
    assert _option(words, "--retry-count") == "4" and _option(words, "--max-user-code-retries") == "5"
    assert words[-1] == "user-arg" and len(words) == len(argv)
    assert not (tmp_path / "next").exists()


def test_the_renumbered_command_adds_the_options_a_step_without_retries_lacks(tmp_path):
    argv = ["python", "f.py", "step", "s", "--run-id", "r", "--task-id", "t"]
    words, _, _ = _renumber(tmp_path, argv, 0, 2)
    assert words[:8] == argv and words[8::2] == ["--retry-count", "--max-user-code-retries"]
    assert _option(words, "--retry-count") == "2" and _option(words, "--max-user-code-retries") == "2"


def test_a_renumbered_start_pod_runs_its_step_only(tmp_path):
    init = ["f.py", "init", "--run-id", "r", "--task-id", "p"]
    step = ["f.py", "step", "start", "--run-id", "r", "--task-id", "start"]
    words, _, _ = _renumber(tmp_path, ["python", "-m", init_and_start.__name__, str(len(init)), *init, *step], 0, 1)
    assert words[0] == "python" and words[1:4] == step[:3] and "init" not in words


def test_only_a_step_process_that_asked_is_run_again(tmp_path):
    argv = ["python", "f.py", "step", "s", "--run-id", "r", "--task-id", "t"]
    assert _renumber(tmp_path, argv, 0, 1, status=1) is None  # any other exit: the task's own status
    assert attempt_guard.renumbered(argv, attempt_guard.RENUMBER_EXIT, str(tmp_path / "absent")) is None


# Infrastructure failures do not spend @retry: on a pod with ERROR_RETRIES_ENV each attempt Argo
# makes counts only the earlier ones its step ended (Metaflow's DONE, or the keeper's mark).

def test_plan_counts_only_the_attempts_the_step_ended():
    plan = attempt_guard.plan
    assert plan(0, 1, set(), set()) == (0, 1, [])  # a first attempt: as compiled
    assert plan(1, 1, {0}, {0}) == (1, 1, [])  # a user failure spent one @retry
    assert plan(1, 0, {0}, set()) == (1, 1, [0])  # attempt 0 evicted: @retry untouched
    assert plan(2, 1, {0, 1}, {1}) == (2, 2, [0])  # evicted, then a user failure
    assert plan(1, 1, set(), set()) == (1, 2, [])  # Argo's attempt 0 never started the step: a front gap
    assert plan(2, 1, {0}, {0}) == (1, 1, [])  # ... a gap after attempt 0 is filled (Metaflow stops at one)
    assert plan(0, 1, {0, 1}, {0, 1}) == (2, 3, [])  # argo retry of the node: @retry counts afresh
    assert plan(1, 1, {0, 1, 2}, {0, 1}) == (3, 4, [2])  # ... whose first attempt was evicted: U still whole


SWEEP = """
import os, time
from metaflow import FlowSpec, current, retry, step


class SweepFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.end)

    @retry(times=%(retries)d, minutes_between_retries=0)
    @step
    def end(self):
        what = os.environ["WHAT_EACH_ATTEMPT_DOES"].split(",")[current.retry_count]
        print("attempt", current.retry_count, "does", what, flush=True)
        if what == "wait":
            time.sleep(120)  # stopped from outside, as an eviction stops a pod
        if what == "fail":
            raise RuntimeError("the step's own failure")


if __name__ == "__main__":
    SweepFlow()
"""


class BudgetedPod(Pod):
    """A step pod with an infrastructure budget (templates/step.py's ERROR_RETRIES_ENV)."""

    def __init__(self, tmp_path: Path, retries: int, each_attempt: str):
        super().__init__(tmp_path)
        self.flow = write_flow(tmp_path, SWEEP % {"retries": retries}, name="sweep_flow.py")
        self.retries = retries
        self.flow_name = "SweepFlow"
        self.env = dict(self.env, WHAT_EACH_ATTEMPT_DOES=each_attempt, **{contract.ERROR_RETRIES_ENV: "0"})

    def command(self, step: str, given: int) -> list[str]:
        inputs = "%s/_parameters/t-params" % RUN if step == "start" else "%s/start/start" % RUN
        return [self.flow.name, *STEP, step, "--run-id", RUN, "--task-id", step, "--input-paths", inputs,
                "--retry-count", str(given), "--max-user-code-retries", str(self.retries if step == "end" else 0)]

    def first(self):
        init = [self.flow.name, "--quiet", "--no-pylint", "init", "--run-id", RUN, "--task-id", "t-params"]
        assert self.run("start", "start", ["-m", init_and_start.__name__, str(len(init)), *init,
                                           *self.command("start", 0)]).returncode == 0

    def evicted(self, given: int) -> int:
        """Attempt ``given`` of ``end``, stopped from outside (SIGTERM) once the step runs."""
        self.pods += 1
        logs = self.dir / ("pod-%d" % self.pods)
        logs.mkdir()
        env = dict(self.env, MF_PATHSPEC="SweepFlow/%s/end/end" % RUN, MF_ATTEMPT=str(given),
                   MFLOG_STDOUT=str(logs / "out"), MFLOG_STDERR=str(logs / "err"))
        proc = subprocess.Popen([sys.executable, "-m", task_logs.__name__, sys.executable, *self.command("end", given)],
                                cwd=self.dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:  # bounded: the step sleeps 120 s, the test's own timeout is less
            if "does wait" in line:
                proc.send_signal(subprocess.signal.SIGTERM)
                break
        return proc.wait(timeout=60)

    def read_end(self) -> dict:
        proc = subprocess.run([sys.executable, "-c", READ_METADATA, "SweepFlow/%s/end/end" % RUN],
                              cwd=self.dir, env=self.env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])


READ_METADATA = """
import json, sys
from metaflow import Task, namespace
namespace(None)
task = Task(sys.argv[1])
infra = sorted(m.value for m in task.metadata if m.name == "%s")
print(json.dumps({"current": task.current_attempt, "ok": task.successful, "retry_count": task["_task_ok"].data
                  and task.current_attempt, "infra": infra, "stderr": task.stderr}))
""" % pod_hooks.INFRA_ATTEMPTS_FIELD


def test_an_evicted_attempt_does_not_spend_retry(tmp_path):
    pod = BudgetedPod(tmp_path, retries=1, each_attempt="wait,fail,ok")
    pod.first()
    assert pod.evicted(0) != contract.FINAL_FAILURE_EXIT  # Argo retries it
    second = pod.run("end", "end", pod.command("end", 1), attempt=1)
    assert second.returncode == 1, second.stderr[-2000:]  # the step's own failure, @retry has one left
    assert "attempt 0 of this task ended without finishing" in second.stderr
    third = pod.run("end", "end", pod.command("end", 2), attempt=2)
    assert third.returncode == 0, third.stderr[-2000:]
    end = pod.read_end()
    assert end["current"] == 2 and end["ok"] is True
    assert set(end["infra"]) == {"0"}  # said to Metaflow's client on the attempts after it


def test_without_retry_an_evicted_attempt_runs_again_and_a_user_failure_is_final(tmp_path):
    pod = BudgetedPod(tmp_path, retries=0, each_attempt="wait,fail")
    pod.first()
    assert pod.evicted(0) != contract.FINAL_FAILURE_EXIT
    second = pod.run("end", "end", pod.command("end", 1), attempt=1)
    assert second.returncode == contract.FINAL_FAILURE_EXIT, second.stderr[-2000:]  # Argo stops here
    assert "the step's own failure" in second.stderr and "@retry has no attempt left" in second.stderr


def test_a_user_failure_with_retries_left_is_retried_and_the_last_is_final(tmp_path):
    pod = BudgetedPod(tmp_path, retries=1, each_attempt="fail,fail")
    pod.first()
    assert pod.run("end", "end", pod.command("end", 0)).returncode == 1
    last = pod.run("end", "end", pod.command("end", 1), attempt=1)
    assert last.returncode == contract.FINAL_FAILURE_EXIT, last.stderr[-2000:]
    assert pod.read_end()["current"] == 1


def test_a_start_pod_lost_before_its_step_began_runs_init_again(tmp_path):
    """Argo's attempt 0 of the start pod ended before anything ran (evicted while its image
    was pulled): attempt 1 runs init and the step, @retry whole."""
    pod = BudgetedPod(tmp_path, retries=0, each_attempt="succeeds")
    init = [pod.flow.name, "--quiet", "--no-pylint", "init", "--run-id", RUN, "--task-id", "t-params"]
    proc = pod.run("start", "start", ["-m", init_and_start.__name__, str(len(init)), *init,
                                      *pod.command("start", 1)], attempt=1)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(pod.marker_of("SweepFlow", "_parameters/t-params", 0))  # init ran
    assert pod.marker_of("SweepFlow", "start/start", 1)  # the step ran as attempt 1: a front gap is no gap
