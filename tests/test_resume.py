"""Resuming a failed run from its compiled YAML (plugins/resume.py, resume_clone.py), run
by `mfargo run` on Metaflow's local datastore, and compared with Metaflow's own `resume`
of the same origin run."""
import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flowtools import clean_env, compile_file, compile_source, dag_tasks, gang_flow, templates, write_flow
from metaflow_extensions.mfargo.plugins import pod_contract as contract
from metaflow_extensions.mfargo.plugins import resume

MFARGO = str(Path(sys.executable).parent / "mfargo")

FOREACH_FLOW = '''
import os
from metaflow import FlowSpec, Parameter, step


def ran(flow, what):
    """User code's own trace: one line per task that ran its step's code."""
    with open(os.path.join(os.environ["RESUME_TEST_DIR"], "ran.log"), "a") as f:
        f.write(what + "\\n")


class ResumeFlow(FlowSpec):
    word = Parameter("word", default="first")

    @step
    def start(self):
        ran(self, "start")
        self.items = [1, 2, 3]
        self.next(self.square, foreach="items")

    @step
    def square(self):
        ran(self, "square %d" % self.input)
        self.value = self.input * self.input
        if self.input == 2 and os.path.exists(os.path.join(os.environ["RESUME_TEST_DIR"], "fail")):
            raise RuntimeError("the flag file says fail")
        self.next(self.join)

    @step
    def join(self, inputs):
        ran(self, "join")
        self.total = sum(i.value for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        ran(self, "end")
        self.said = self.word


if __name__ == "__main__":
    ResumeFlow()
'''

GANG_IN_FOREACH = '''
import os
from metaflow import FlowSpec, current, kubernetes, parallel, step

BROKEN = %(broken)s  # rank 1 of split 1 fails: the bug a user fixes before resuming


class GangResumeFlow(FlowSpec):
    @step
    def start(self):
        self.splits = [0, 1]
        self.next(self.fan, foreach="splits")

    @step
    def fan(self):
        self.split = self.input
        self.next(self.train, num_parallel=%(ranks)d)

    %(decorators)s
    @parallel
    @step
    def train(self):
        self.rank = current.parallel.node_index
        print("user code of rank", self.rank, "of split", self.split)
        if os.environ.get("RESUME_TEST_DIR"):  # user code's own trace, where a test reads it
            with open(os.path.join(os.environ["RESUME_TEST_DIR"], "ran.log"), "a") as f:
                f.write("train %%d %%d\\n" %% (self.split, self.rank))
        if BROKEN and (self.split, self.rank) == (1, 1) and %(first_attempt)s:
            raise RuntimeError("the bug")
        self.next(self.gather)

    @step
    def gather(self, inputs):
        self.ranks = sorted((i.split, i.rank) for i in inputs)
        if %(gather_fails)s and self.ranks[0][0] == 0 and current.retry_count == 0:
            raise RuntimeError("a plain task's first attempt fails")
        self.next(self.join)

    @step
    def join(self, inputs):
        self.all_ranks = sorted(r for i in inputs for r in i.ranks)
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    GangResumeFlow()
'''


def gang_in_foreach(broken: str, ranks: int = 3, decorators: str = "", first_attempts_fail: bool = False) -> str:
    """A foreach of two gangs of ``ranks`` whose rank (1, 1) fails when ``broken`` (Python)
    is true where the flow is imported; with ``first_attempts_fail`` only in its attempt 0,
    and split 0's gather (a plain task) fails its attempt 0 too."""
    return GANG_IN_FOREACH % {"broken": broken, "ranks": ranks, "decorators": decorators,
                              "first_attempt": "current.retry_count == 0" if first_attempts_fail else "True",
                              "gather_fails": first_attempts_fail}

READ_RUN = """
import json, sys
from metaflow import Run, namespace
namespace(None)
run = Run(sys.argv[1])
tasks = {}
for step in run:
    for task in step:
        md = task.metadata_dict
        index = task.index
        tasks["%s/%s" % (step.id, task.id)] = {"cloned": "origin-task-id" in md, "origin": md.get("origin-run-id"),
                                               "index": index, "ok": task.successful}
end = run["end"].task.data if "end" in run else None
print(json.dumps({"ok": run.successful, "tasks": tasks,
                  "end": {k: getattr(end, k) for k in sys.argv[2:] if hasattr(end, k)}}))
"""


class Project:
    """A flow compiled once, run by `mfargo run` on one local datastore."""

    def __init__(self, tmp_path: Path, source: str):
        self.dir = tmp_path
        self.flow = write_flow(tmp_path, source)
        compile_file(self.flow, "--code-in-image", "/app", "--output-file", "wf.yaml")
        self.env = clean_env(home=tmp_path / "mfhome", HOME=str(tmp_path), RESUME_TEST_DIR=str(tmp_path),
                             METAFLOW_DATASTORE_SYSROOT_LOCAL=str(tmp_path / "mf"))

    def run(self, *args: str) -> tuple[str, subprocess.CompletedProcess]:
        (self.dir / "ran.log").unlink(missing_ok=True)
        ids = self.dir / "run-id"
        ids.unlink(missing_ok=True)
        proc = subprocess.run([MFARGO, "run", "wf.yaml", "--code-dir", str(self.dir), "--run-id-file", str(ids),
                               "--timeout", "240", *args],
                              cwd=self.dir, env=self.env, capture_output=True, text=True, timeout=300)
        return ids.read_text().strip(), proc

    def ran(self) -> list[str]:
        log = self.dir / "ran.log"
        return sorted(log.read_text().splitlines()) if log.exists() else []

    def read(self, flow: str, run_id: str, *artifacts: str) -> dict:
        proc = subprocess.run([sys.executable, "-c", READ_RUN, "%s/%s" % (flow, run_id), *artifacts],
                              cwd=self.dir, env=self.env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def metaflow_resume(self, origin: str) -> str:
        """Metaflow's own local `resume` of the same origin run (the reference)."""
        proc = subprocess.run([sys.executable, self.flow.name, "--datastore=local", "--metadata=local", "resume",
                               "--origin-run-id", origin, "--run-id-file", "mf-run-id"],
                              cwd=self.dir, env=self.env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return (self.dir / "mf-run-id").read_text().strip()


def _by_index(tasks: dict) -> dict:
    """Each task as (step, foreach index) -> cloned: task ids differ between the engines."""
    return {(path.split("/")[0], info["index"]): info["cloned"] for path, info in tasks.items()}


def test_a_resumed_foreach_clones_what_succeeded_as_metaflows_resume_does(tmp_path):
    project = Project(tmp_path, FOREACH_FLOW)
    (tmp_path / "fail").touch()
    origin, first = project.run("-p", "word=from-the-origin")
    assert first.returncode != 0
    (tmp_path / "fail").unlink()

    resumed, second = project.run("-p", "%s=%s" % (contract.ORIGIN_RUN_PARAMETER, origin))
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    # User code ran only where the origin had not succeeded; start and two squares were cloned.
    assert project.ran() == ["end", "join", "square 2"]
    # start's clone cloned splits 0 and 2 in bulk: only split 1 starts a pod of its step.
    assert "mfargo: resume: foreach start: 2 of 3 splits cloned (2 tasks) by its splitter; splits 1 run again" \
        in second.stdout, second.stdout[-3000:]
    assert _pods_started(second.stdout, "square") == 1
    got = project.read("ResumeFlow", resumed, "total", "said")
    assert got["ok"] is True
    assert got["end"] == {"total": 14, "said": "from-the-origin"}  # the origin's Parameters
    assert {p for p, t in got["tasks"].items() if t["cloned"]} == {"start/start", "square/square-0", "square/square-2"}
    assert all(t["origin"] == origin for t in got["tasks"].values())

    reference = project.read("ResumeFlow", project.metaflow_resume(origin), "total", "said")
    assert _by_index(got["tasks"]) == _by_index(reference["tasks"])
    assert got["end"] == reference["end"]


WIDE_FLOW = '''
import os
from metaflow import FlowSpec, step


class WideFlow(FlowSpec):
    @step
    def start(self):
        self.items = list(range(%(width)d))
        self.next(self.prepare, foreach="items")

    @step
    def prepare(self):
        self.base = self.input + 1
        self.next(self.square)

    @step
    def square(self):
        self.value = self.base * self.base
        self.next(self.join)

    @step
    def join(self, inputs):
        self.total = sum(i.value for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        if os.path.exists(os.path.join(os.environ["RESUME_TEST_DIR"], "fail")):
            raise RuntimeError("the flag file says fail")
        with open(os.path.join(os.environ["RESUME_TEST_DIR"], "ran.log"), "a") as f:
            f.write("end\\n")


if __name__ == "__main__":
    WideFlow()
'''


def _pods_started(stdout: str, step: str) -> int:
    """How many pods of ``step``'s template `mfargo run` started."""
    return len(re.findall(r"^\S+ started +\S*\b%s\b\S* \(pod " % re.escape(step), stdout, re.M))


def _pods(stdout: str) -> int:
    """How many pods `mfargo run` started."""
    return len(re.findall(r"^\S+ started .* \(pod ", stdout, re.M))


def test_a_resumed_foreach_whose_splits_all_succeeded_starts_no_pod_for_them(tmp_path):
    width = 12
    project = Project(tmp_path, WIDE_FLOW % {"width": width})
    (tmp_path / "fail").touch()
    origin, first = project.run()
    assert first.returncode != 0
    (tmp_path / "fail").unlink()
    assert _pods_started(first.stdout, "square") == width, first.stdout[-3000:]

    resumed, second = project.run("-p", "%s=%s" % (contract.ORIGIN_RUN_PARAMETER, origin))
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert project.ran() == ["end"]
    assert ("mfargo: resume: foreach start: %d of %d splits cloned (%d tasks) by its splitter; no split starts"
            % (width, width, 2 * width)) in second.stdout, second.stdout[-3000:]
    # start, join and end: the pods a resumed run starts do not grow with the splits it clones.
    assert _pods_started(second.stdout, "prepare") == _pods_started(second.stdout, "square") == 0
    assert _pods(second.stdout) == 3, second.stdout[-3000:]
    got = project.read("WideFlow", resumed, "total")
    assert got["ok"] is True and got["end"] == {"total": sum((i + 1) ** 2 for i in range(width))}
    cloned = {p for p, t in got["tasks"].items() if t["cloned"]}
    assert cloned == set(got["tasks"]) - {"end/end"}
    origin_tasks = project.read("WideFlow", origin)["tasks"]
    assert set(got["tasks"]) == set(origin_tasks)  # the same task ids as the origin's
    reference = project.read("WideFlow", project.metaflow_resume(origin), "total")
    assert _by_index(got["tasks"]) == _by_index(reference["tasks"])
    assert got["end"] == reference["end"]


CHAIN_FLOW = '''
import os
from metaflow import FlowSpec, step


def ran(what):
    with open(os.path.join(os.environ["RESUME_TEST_DIR"], "ran.log"), "a") as f:
        f.write(what + "\\n")


class ChainFlow(FlowSpec):
    @step
    def start(self):
        ran("start")
        self.x = 1
        self.next(self.load)

    @step
    def load(self):
        ran("load")
        self.x += 1
        self.next(self.clean)

    @step
    def clean(self):
        ran("clean")
        self.x *= 10
        self.next(self.fork)

    @step
    def fork(self):
        ran("fork")
        self.next(self.left, self.right)

    @step
    def left(self):
        ran("left")
        self.side = "l"
        self.next(self.merge)

    @step
    def right(self):
        ran("right")
        self.side = "r"
        self.next(self.merge)

    @step
    def merge(self, inputs):
        ran("merge")
        self.x = inputs.left.x + inputs.right.x
        self.next(self.report)

    @step
    def report(self):
        ran("report")
        self.next(self.end)

    @step
    def end(self):
        ran("end")
        if os.path.exists(os.path.join(os.environ["RESUME_TEST_DIR"], "fail")):
            raise RuntimeError("the flag file says fail")


if __name__ == "__main__":
    ChainFlow()
'''


def test_the_plain_steps_a_pod_heads_say_whether_it_cloned_them(tmp_path):
    """The compiled heads of CHAIN_FLOW: every step after `start` is plain (nothing Argo reads
    from it; its parents plain steps of the same head), so start's pod is told them (env) and
    writes one output each; each one's DAG task runs unless that output is true, and whatever
    follows it takes Skipped as arrived."""
    [wf] = compile_source(tmp_path, CHAIN_FLOW, "--code-in-image", "/app")
    tasks = dag_tasks(wf, wf["spec"]["entrypoint"])
    cloned = {name: re.fullmatch(r"\{\{tasks\.(\S+)\.outputs\.parameters\.cloned-(\S+)\}\} != true",
                                 task.get("when", "")) for name, task in tasks.items()}
    chain = ["load", "clean", "fork", "left", "right", "merge", "report", "end"]
    assert {name: m.groups() for name, m in cloned.items() if m} == {s: ("start", s) for s in chain}
    assert tasks["clean"]["depends"] == "(load.Succeeded || load.Skipped)"
    assert tasks["left"]["depends"] == "(fork.Succeeded || fork.Skipped)"
    assert tasks["merge"]["depends"] == "(left.Succeeded || left.Skipped) && (right.Succeeded || right.Skipped)"
    heads = templates(wf)
    env = {e["name"]: e.get("value") for e in heads["start"]["container"]["env"]}
    assert env[contract.CLONE_CHAIN_ENV].split() == chain
    outputs = [o["name"] for o in heads["start"]["outputs"]["parameters"]]
    assert outputs == [contract.cloned_step_file(s) for s in chain]
    for plain in chain:
        assert contract.CLONE_CHAIN_ENV not in {e["name"] for e in heads[plain]["container"].get("env", [])}


def test_the_plain_steps_after_a_cloned_start_start_no_pod(tmp_path):
    """start's pod clones load, clean, fork, both branches, merge and report: only `end`,
    which failed, runs its code, and the resumed run starts 2 pods where the origin started 9."""
    project = Project(tmp_path, CHAIN_FLOW)
    (tmp_path / "fail").touch()
    origin, first = project.run()
    assert first.returncode != 0
    assert _pods(first.stdout) == 9, first.stdout[-3000:]
    (tmp_path / "fail").unlink()

    resumed, second = project.run("-p", "%s=%s" % (contract.ORIGIN_RUN_PARAMETER, origin))
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert project.ran() == ["end"]
    assert (_pods(second.stdout), _pods_started(second.stdout, "start"), _pods_started(second.stdout, "end")) \
        == (2, 1, 1), second.stdout[-3000:]
    assert "mfargo: resume: merge/merge cloned from %s/merge/merge: it does not start" % origin in second.stdout
    got = project.read("ChainFlow", resumed)
    assert got["ok"] is True
    assert {p for p, t in got["tasks"].items() if not t["cloned"]} == {"end/end"}
    assert set(got["tasks"]) == set(project.read("ChainFlow", origin)["tasks"])  # the origin's task ids
    reference = project.read("ChainFlow", project.metaflow_resume(origin))
    assert _by_index(got["tasks"]) == _by_index(reference["tasks"])


def test_a_head_clones_the_plain_steps_whose_inputs_it_cloned_and_leaves_the_rest_to_run(tmp_path):
    """Resumed from `right`: start's pod clones load, clean, fork and `left`, not `right` (the
    resume step) nor merge, report and end after it, which run in pods of their own."""
    project = Project(tmp_path, CHAIN_FLOW)
    origin, first = project.run()
    assert first.returncode == 0, first.stdout[-3000:]
    resumed, second = project.run("-p", "%s=%s" % (contract.ORIGIN_RUN_PARAMETER, origin),
                                  "-p", "%s=right" % contract.RESUME_STEP_PARAMETER)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert project.ran() == ["end", "merge", "report", "right"]
    started = {step: _pods_started(second.stdout, step) for step in ("load", "left", "right", "merge", "end")}
    assert started == {"load": 0, "left": 0, "right": 1, "merge": 1, "end": 1}, second.stdout[-3000:]
    assert "mfargo: resume: right/right runs again: it is the resume step right or after it" in second.stdout
    assert "mfargo: resume: merge/merge runs again: its input right/right runs again" in second.stdout
    got = project.read("ChainFlow", resumed)
    assert {p for p, t in got["tasks"].items() if t["cloned"]} == {"start/start", "load/load", "clean/clean",
                                                                 "fork/fork", "left/left"}


NESTED_FLOW = '''
import os
from metaflow import FlowSpec, step


class NestedResumeFlow(FlowSpec):
    @step
    def start(self):
        self.rows = [0, 1]
        self.next(self.row, foreach="rows")

    @step
    def row(self):
        self.cols = [0, 1, 2]
        self.next(self.cell, foreach="cols")

    @step
    def cell(self):
        self.value = 10 * self.row_input + self.input if hasattr(self, "row_input") else self.input
        self.next(self.row_join)

    @step
    def row_join(self, inputs):
        self.row_total = sum(i.value for i in inputs)
        self.next(self.join)

    @step
    def join(self, inputs):
        self.total = sum(i.row_total for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        if os.path.exists(os.path.join(os.environ["RESUME_TEST_DIR"], "fail")):
            raise RuntimeError("the flag file says fail")


if __name__ == "__main__":
    NestedResumeFlow()
'''


def test_a_resumed_foreach_of_foreaches_clones_every_level_in_its_outer_splitter(tmp_path):
    project = Project(tmp_path, NESTED_FLOW)
    (tmp_path / "fail").touch()
    origin, first = project.run()
    assert first.returncode != 0
    (tmp_path / "fail").unlink()
    resumed, second = project.run("-p", "%s=%s" % (contract.ORIGIN_RUN_PARAMETER, origin))
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    # Each row: its splitter, 3 cells, their join; read two levels deep, cloned by start's pod.
    assert ("mfargo: resume: foreach start: 2 of 2 splits cloned (10 tasks) by its splitter; no split starts"
            in second.stdout), second.stdout[-3000:]
    assert _pods(second.stdout) == 3, second.stdout[-3000:]
    got = project.read("NestedResumeFlow", resumed, "total")
    assert got["ok"] is True and {p for p, t in got["tasks"].items() if not t["cloned"]} == {"end/end"}
    reference = project.read("NestedResumeFlow", project.metaflow_resume(origin), "total")
    assert _by_index(got["tasks"]) == _by_index(reference["tasks"]) and got["end"] == reference["end"]


def test_a_resume_step_runs_that_step_and_every_step_after_it_again(tmp_path):
    project = Project(tmp_path, FOREACH_FLOW)
    origin, first = project.run()
    assert first.returncode == 0, first.stderr[-3000:]
    resumed, second = project.run("-p", "%s=%s" % (contract.ORIGIN_RUN_PARAMETER, origin),
                                  "-p", "%s=square" % contract.RESUME_STEP_PARAMETER)
    assert second.returncode == 0, second.stdout[-3000:]
    assert project.ran() == ["end", "join", "square 1", "square 2", "square 3"]
    got = project.read("ResumeFlow", resumed)
    assert {p for p, t in got["tasks"].items() if t["cloned"]} == {"start/start"}


def test_mfargo_run_resumes_a_run_kept_in_its_work_directory(tmp_path):
    project = Project(tmp_path, FOREACH_FLOW)
    del project.env["METAFLOW_DATASTORE_SYSROOT_LOCAL"]  # the datastore is the work directory's
    work = str(tmp_path / "work")
    (tmp_path / "fail").touch()
    origin, first = project.run("--work-dir", work)
    assert first.returncode != 0
    (tmp_path / "fail").unlink()
    resumed, second = project.run("--work-dir", work, "--resume", origin, "--resume-step", "join")
    assert second.returncode == 0, second.stdout[-3000:]
    assert project.ran() == ["end", "join", "square 2"]  # square 2 failed in the origin: it runs too
    project.env["METAFLOW_DATASTORE_SYSROOT_LOCAL"] = str(tmp_path / "work" / "metaflow-local")
    got = project.read("ResumeFlow", resumed)
    assert {p for p, t in got["tasks"].items() if t["cloned"]} == {"start/start", "square/square-0", "square/square-2"}


def test_a_resume_step_needs_a_run_to_resume(tmp_path):
    project = Project(tmp_path, FOREACH_FLOW)
    proc = subprocess.run([MFARGO, "run", "wf.yaml", "--resume-step", "join"], cwd=tmp_path, env=project.env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == "mfargo run: --resume-step needs --resume RUN_ID"


def test_a_gang_is_cloned_whole_or_runs_whole(tmp_path):
    project = Project(tmp_path, gang_in_foreach('os.path.exists(os.path.join(os.environ.get("RESUME_TEST_DIR", "."), "fail"))'))
    (tmp_path / "fail").touch()
    origin, first = project.run()
    assert first.returncode != 0
    (tmp_path / "fail").unlink()
    resumed, second = project.run("-p", "%s=%s" % (contract.ORIGIN_RUN_PARAMETER, origin))
    assert second.returncode == 0, second.stdout[-3000:]
    # Split 1's gang failed (rank 1): all three of its ranks ran again, split 0's none, and
    # split 0 never started: start's clone cloned it whole (fan, 3 ranks, gather).
    assert project.ran() == ["train 1 0", "train 1 1", "train 1 2"]
    assert len(re.findall(r"jobset +js-\w+: created", second.stdout)) == 1, second.stdout[-3000:]
    assert ("mfargo: resume: foreach start: 1 of 2 splits cloned (5 tasks) by its splitter; splits 1 run again"
            in second.stdout), second.stdout[-3000:]
    assert _pods_started(second.stdout, "fan") == 1  # split 1's, which cloned its own task
    got = project.read("GangResumeFlow", resumed, "all_ranks")
    cloned = {p for p, t in got["tasks"].items() if t["cloned"]}
    trains = {p for p in got["tasks"] if p.startswith("train/")}
    assert len(trains) == 6 and len(trains & cloned) == 3
    origin_tasks = project.read("GangResumeFlow", origin)["tasks"]
    assert trains == {p for p in origin_tasks if p.startswith("train/")}  # the same task ids as the origin's
    assert got["ok"] is True


def test_a_resume_step_that_is_no_step_fails_the_run_in_one_line(tmp_path):
    project = Project(tmp_path, FOREACH_FLOW)
    origin, first = project.run()
    assert first.returncode == 0
    _, second = project.run("-p", "%s=%s" % (contract.ORIGIN_RUN_PARAMETER, origin),
                            "-p", "%s=nope" % contract.RESUME_STEP_PARAMETER)
    assert second.returncode != 0
    assert "mfargo: resume: the resume step 'nope' is not a step of ResumeFlow" in second.stdout + second.stderr
    assert project.ran() == []


def test_an_origin_that_is_not_a_run_of_the_flow_fails_the_run_in_one_line(tmp_path):
    project = Project(tmp_path, FOREACH_FLOW)
    _, second = project.run("-p", "%s=argo-no-such-run" % contract.ORIGIN_RUN_PARAMETER)
    assert second.returncode != 0
    assert ("mfargo: resume: run argo-no-such-run has no parameters of ResumeFlow to resume from: "
            "not a run of this flow") in second.stdout + second.stderr
    assert project.ran() == []


# -- the YAML -------------------------------------------------------------------------------


def test_every_template_takes_the_resume_parameters_and_passes_them_to_every_pod(tmp_path):
    flow = write_flow(tmp_path, gang_flow("GangFlow"))
    [doc] = [d for d in yaml.safe_load_all(compile_file(flow, "--code-in-image", "/app").stdout)
             if d["kind"] == "WorkflowTemplate"]
    params = {p["name"]: p["value"] for p in doc["spec"]["arguments"]["parameters"]}
    assert params[contract.ORIGIN_RUN_PARAMETER] == "" and params[contract.RESUME_STEP_PARAMETER] == ""
    wanted = {contract.ORIGIN_RUN_ENV: contract.ORIGIN_RUN_PARAMETER,
              contract.RESUME_STEP_ENV: contract.RESUME_STEP_PARAMETER}
    defaults = {e["name"]: e.get("value") for e in doc["spec"]["templateDefaults"]["container"]["env"]}
    for env, parameter in wanted.items():
        assert defaults[env] == '{{=toBase64(workflow.parameters["%s"])}}' % parameter
    [gang] = [t for t in templates(doc).values() if "resource" in t]
    text = gang["resource"]["manifest"]
    # Argo substitutes into the manifest's text before parsing it: each expression there must
    # be exactly what the compiler wrote (a single-quoted YAML scalar would double a `'`).
    expressions = set(re.findall(r"\{\{=(.*?)\}\}", text))
    assert {'toBase64(workflow.parameters["%s"])' % p for p in wanted.values()} <= expressions
    value = base64.b64encode(b"argo-x'y\"z").decode()
    text = re.sub(r"\{\{=toBase64\(workflow\.parameters\[\"[^\"]+\"\]\)\}\}", value, text)
    substituted = yaml.safe_load(re.sub(r"\{\{[^}]*\}\}", "7", text))  # counts, names: any word
    for job in substituted["spec"]["replicatedJobs"]:
        env = {e["name"]: e.get("value") for e in job["template"]["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env[contract.ORIGIN_RUN_ENV] == value and env[contract.RESUME_STEP_ENV] == value


# -- the pod's plan --------------------------------------------------------------------------

STEP = ["python", "flow.py", "--quiet", "--with", "x", "step", "square", "--run-id", "argo-new", "--task-id",
        "square-1", "--input-paths-filename", "/tmp/paths", "--retry-count", "2", "--tag", "step"]
INIT = ["flow.py", "--quiet", "init", "--run-id", "argo-new", "--task-id", "t-params", "--tag", "nightly"]
START = ["flow.py", "--quiet", "step", "start", "--run-id", "argo-new", "--task-id", "start",
         "--input-paths-filename", "/tmp/p"]


def _env(origin="argo-old", step=""):
    encode = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
    return {contract.ORIGIN_RUN_ENV: encode(origin) if origin else "", contract.RESUME_STEP_ENV: encode(step)}


@pytest.fixture()
def calls(monkeypatch):
    """The clone commands a plan runs, answered from ``calls.answers`` in order."""
    class Calls(list):
        answers: list = []

    made = Calls()

    def call(argv):
        made.append(argv)
        return made.answers.pop(0)

    monkeypatch.setattr(resume.subprocess, "call", call)
    return made


def _clone_options(argv):
    at = argv.index("clone-task")
    options, words = {}, argv[at + 1:]
    for name, value in zip(words[::2], words[1::2]):
        options.setdefault(name, []).append(value)
    return argv[:at], options


def test_an_ordinary_run_keeps_its_command(calls):
    assert resume.plan(list(STEP), _env(origin="")) == STEP
    assert calls == []


def test_a_step_that_can_be_cloned_runs_no_command(calls):
    calls.answers = [0]
    assert resume.plan(list(STEP), _env(step="join")) == 0
    prefix, options = _clone_options(calls[0])
    assert prefix == ["python", "flow.py", "--quiet", "--with", "x", "argo-workflows"]
    assert options == {"--origin-run-id": ["argo-old"], "--resume-step": ["join"], "--step": ["square"],
                       "--run-id": ["argo-new"], "--task-id": ["square-1"], "--retry-count": ["2"],
                       "--input-paths-filename": ["/tmp/paths"], "--tag": ["step"]}


def test_a_step_that_cannot_be_cloned_runs_with_its_origin_recorded(calls):
    calls.answers = [resume.RERUN_EXIT]
    assert resume.plan(list(STEP), _env()) == STEP + ["--clone-run-id", "argo-old"]


def test_a_failed_clone_ends_the_task_with_its_status(calls):
    calls.answers = [1]
    assert resume.plan(list(STEP), _env()) == 1


def test_init_and_start_clone_the_parameters_then_the_start_step(calls):
    from metaflow_extensions.mfargo.plugins import init_and_start

    argv = ["python", "-m", init_and_start.__name__, str(len(INIT)), *INIT, *START]
    calls.answers = [0, resume.RERUN_EXIT]
    assert resume.plan(argv, _env()) == ["python", *START, "--clone-run-id", "argo-old"]
    _, params = _clone_options(calls[0])
    assert params["--step"] == ["_parameters"] and params["--task-id"] == ["t-params"]
    assert params["--tag"] == ["nightly"]
    _, start = _clone_options(calls[1])
    assert start["--step"] == ["start"] and start["--input-paths-filename"] == ["/tmp/p"]


def test_a_command_that_is_not_a_task_is_left_alone(calls):
    hook = ["python", "-c", "print('exit hook')"]
    assert resume.plan(list(hook), _env()) == hook
    assert calls == []


# -- a foreach's splits cloned in bulk ---------------------------------------------------------


def _graph(**steps):
    """A stand-in for Metaflow's graph: name -> (type, out_funcs[, matching_join])."""
    from types import SimpleNamespace

    return {name: SimpleNamespace(type=kind.removesuffix("-parallel"), parallel_foreach=kind.endswith("-parallel"),
                                  out_funcs=list(outs), matching_join=join[0] if join else None)
            for name, (kind, outs, *join) in steps.items()}


def test_a_foreach_body_is_cloned_in_bulk_unless_it_holds_a_switch():
    from metaflow_extensions.mfargo.plugins import resume_foreach as bulk

    branches = _graph(start=("foreach", ["a"], "join"), a=("split", ["b", "c"]), b=("linear", ["d"]),
                      c=("linear", ["d"]), d=("join", ["join"]), join=("join", ["end"]), end=("end", []))
    assert bulk.body(branches, "start") == [("a", None), ("b", None), ("c", None), ("d", None)]
    nested = _graph(start=("foreach", ["a"], "join"), a=("foreach", ["b"], "inner"), b=("linear", ["inner"]),
                    inner=("join", ["g"]), g=("foreach-parallel", ["train"], "gather"), train=("linear", ["gather"]),
                    gather=("join", ["join"]), join=("join", ["end"]), end=("end", []))
    tree = bulk.body(nested, "start")
    assert tree == [("a", [("b", None)]), ("g", bulk.GANG), ("gather", None), ("inner", None)]
    assert bulk.step_names(nested, tree) == {"a", "b", "inner", "g", "train", "gather"}
    switch = _graph(start=("foreach", ["a"], "join"), a=("foreach", ["s"], "inner"), s=("split-switch", ["b", "c"]),
                    b=("linear", ["inner"]), c=("linear", ["inner"]), inner=("join", ["join"]),
                    join=("join", ["end"]), end=("end", []))
    assert bulk.body(switch, "start") is None  # a switch at any depth: the tasks depend on its choices
    assert bulk.body(switch, "a") is None


class _Found(dict):
    """An origin task's datastore: its artifacts by name."""


class _Origin:
    """OriginTasks' reads, answered from (step, id) -> _Found (absent: no finished task)."""

    def __init__(self, found):
        self.found, self.reads = found, []

    def load(self, tasks):
        self.reads.append(sorted(tasks))

    def get(self, step, task):
        return self.found.get((step, task))


def test_a_splits_tasks_are_named_as_the_yaml_names_them_at_any_depth():
    from types import SimpleNamespace

    from mfargo.compiler import naming
    from metaflow_extensions.mfargo.plugins import resume_foreach as bulk

    graph = _graph(start=("foreach", ["a"], "join"), a=("foreach", ["b"], "inner"), b=("linear", ["inner"]),
                   inner=("join", ["g"]), g=("foreach-parallel", ["train"], "gather"), train=("linear", ["gather"]),
                   gather=("join", ["join"]), join=("join", ["end"]), end=("end", []))
    outer = naming.child_ctx("", "4")  # the foreach runs inside split 4 of another
    ctxs = {i: naming.child_ctx(outer, str(i)) for i in range(2)}
    ok = lambda **artifacts: _Found(_task_ok=True, **artifacts)  # noqa: E731
    found = {}
    for i, ctx in ctxs.items():
        found[("a", naming.task_id("a", ctx))] = ok(_foreach_num_splits=2)
        found[("g", naming.task_id("g", ctx))] = ok(_parallel_ubf_iter=SimpleNamespace(num_parallel=2),
                                                     **{contract.ENTROPY_ARTIFACT: "e%d" % i})
        for name in ("inner", "gather"):
            found[(name, naming.task_id(name, ctx))] = ok()
        for j in range(2):
            found[("b", naming.task_id("b", naming.child_ctx(ctx, str(j))))] = ok()
        for rank in contract.gang_task_ids("e%d" % i, 2):
            found[("train", rank)] = ok()
    found[("b", "b-4-1-1")] = _Found(_task_ok=False)  # split 1 failed in its nested foreach
    origin = _Origin(found)
    tasks, broken = bulk._split_tasks(graph, origin, ctxs, bulk.body(graph, "start"))
    assert broken == {1}
    assert sorted(tasks[0]) == sorted([("a", "a-4-0"), ("b", "b-4-0-0"), ("b", "b-4-0-1"), ("g", "g-4-0"),
                                       ("gather", "gather-4-0"), ("inner", "inner-4-0"),
                                       ("train", "control-e0-0"), ("train", "worker-e0-0")])
    assert len(origin.reads) == 2  # one bulk read a level: the splits' steps, then what their splitters made
