"""Run ``flow.py init`` and then ``flow.py step start`` in one Python interpreter.

The start pod must write the run's ``_parameters`` task (``init``) before its step runs.
As two processes, as in Metaflow's own Argo pods, the pair pays Python's start-up and
Metaflow's import twice (about 1 CPU-s on the run's critical path), and the log keeper
must import Metaflow once more to save init's output. Here the flow file is executed
afresh for each command, exactly as ``python flow.py ...`` would execute it (its own
module-level code, flow class and Metaflow CLI state each time); only the modules both
import are shared. The step's output and init's land in the same task logs, as before.

``python -m metaflow_extensions.mfargo.plugins.init_and_start N FLOW INIT_ARG... FLOW STEP_ARG...``
where the first N words after N are init's command line (the flow file and its arguments)
and the rest is the step's. A count, not a separator: no argument value can be mistaken
for it. The exit status is init's when init fails (the step does not run), else the step's.
"""

import os
import runpy
import sys


def run_flow_file(argv):
    """``python FLOW ARG...`` without a new interpreter: the exit status it would have."""
    script = argv[0]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # what `python FLOW` puts first
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as done:
        return exit_status(done.code)
    return 0


def exit_status(code):
    """SystemExit's code as the interpreter turns it into a status (a message means 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def split_commands(argv):
    """(init's words, the step's words) from ``N INIT_WORD*N STEP_WORD...``."""
    if not argv or not argv[0].isdigit() or not 0 < int(argv[0]) < len(argv) - 1:
        raise ValueError("usage: python -m %s N FLOW INIT_ARG... FLOW STEP_ARG..." % __spec__.name)
    count = int(argv[0])
    return argv[1 : 1 + count], argv[1 + count :]


def main(argv):
    try:
        init, step = split_commands(argv)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    status = _check_start_attempt(step) or run_flow_file(init)
    if status:
        return status
    sys.stdout.flush()
    sys.stderr.flush()
    return run_flow_file(step)


def _check_start_attempt(step):
    """A retried start pod must not write the run's ``_parameters`` again: the start
    task's attempt is checked before ``init`` (attempt_guard); its exit status, or 0."""
    from . import attempt_guard, step_argv

    try:
        attempt_guard.check_pod_task(step_argv.step_name(step), step)
    except SystemExit as done:
        return exit_status(done.code)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
