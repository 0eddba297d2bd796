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
from metaflow_extensions.mfargo.plugins import attempt_guard, init_and_start, task_logs

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

    def run(self, step: str, task: str, command: list[str], attempt: int = 0) -> subprocess.CompletedProcess:
        self.pods += 1
        logs = self.dir / ("pod-%d" % self.pods)
        logs.mkdir()
        env = dict(self.env, MF_PATHSPEC="GuardFlow/%s/%s/%s" % (RUN, step, task), MF_ATTEMPT=str(attempt),
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
        return (self.dir / ".metaflow" / "GuardFlow" / RUN / path / ("%d.attempt.json" % attempt)).read_text()


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
    path = tmp_path / "next"
    path.write_text("%d %d\n" % (given, free))
    return attempt_guard.renumbered(argv, status, str(path))


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
