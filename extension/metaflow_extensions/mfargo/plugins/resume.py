"""A pod of a resumed run: clone its task from the origin run, or run it again.

A resumed run (``argo-workflows resume``) is an ordinary run of the deployed template,
started with the workflow parameters ``pod_contract.ORIGIN_RUN_PARAMETER`` and
``RESUME_STEP_PARAMETER``, which reach every pod as env. The pod's task keeper
(``task_logs``) hands its command to :func:`plan` first; with no origin it is unchanged,
so an ordinary run pays one env lookup. With one, as Metaflow's local ``resume`` does:

* ``init`` (the run's ``_parameters`` task) is cloned: Parameters come from the origin;
* a ``step`` asks ``flow.py argo-workflows clone-task`` (``resume_clone.py``) to clone
  its task. It does when the step is neither the resume step nor after it, the origin's
  task of the same id succeeded (a template's task ids are the same in every run) and
  every input task of this run was cloned; the clone writes the outputs Argo reads.
* else the step runs, with ``--clone-run-id`` so its task records ``origin-run-id``.

Standard library only, until a resumed pod runs the clone command: it runs in every pod.
"""

import base64
import os
import subprocess

from . import init_and_start
from . import pod_contract as contract
from . import step_argv

RERUN_EXIT = 3  # clone-task's answer: this task cannot be cloned, run it
PARAMETERS_STEP = "_parameters"


def plan(argv, environ=None):
    """The command to run in place of ``argv``, or an exit status when nothing is left to
    run (the task was cloned, or cloning failed)."""
    environ = os.environ if environ is None else environ
    origin = decoded(environ.get(contract.ORIGIN_RUN_ENV, ""))
    if not origin:
        return argv
    resume_step = decoded(environ.get(contract.RESUME_STEP_ENV, ""))
    if argv[1:3] == ["-m", init_and_start.__name__]:
        init, step = init_and_start.split_commands(argv[3:])
        status = _clone(argv[:1] + init, origin, resume_step)
        return status if status else _step(argv[:1] + step, origin, resume_step)
    command, _ = step_argv.subcommand(argv)
    if command == "init":
        return _clone(argv, origin, resume_step)
    if command == "step":
        return _step(argv, origin, resume_step)
    return argv  # an exit hook, a notification: not a task of the run


def decoded(value):
    """A run-time value as Argo's toBase64 wrote it (compiler/usertext.py says why)."""
    return base64.b64decode(value.encode("ascii"), validate=True).decode("utf-8") if value else ""


def _step(argv, origin, resume_step):
    status = _clone(argv, origin, resume_step)
    if status == RERUN_EXIT:
        return argv + ["--clone-run-id", origin]
    return status


def _clone(argv, origin, resume_step):
    """Run ``clone-task`` for the task ``argv`` would run; its exit status."""
    command, at = step_argv.subcommand(argv)
    words = argv[at:]
    call = argv[:at] + [
        "argo-workflows", "clone-task",
        "--origin-run-id", origin,
        "--resume-step", resume_step,
        "--step", PARAMETERS_STEP if command == "init" else words[1],
        "--run-id", step_argv.option(words, "--run-id"),
        "--task-id", step_argv.option(words, "--task-id"),
        "--retry-count", step_argv.option(words, "--retry-count", "0"),
    ]
    paths = step_argv.option(words, "--input-paths-filename")
    if paths is not None:
        call += ["--input-paths-filename", paths]
    for tag in step_argv.tags(words):  # the run's tags, for the run and the task as init and step give them
        call += ["--tag", tag]
    return subprocess.call(call)
