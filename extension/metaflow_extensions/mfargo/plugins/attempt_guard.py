"""A task never runs twice as the same Metaflow attempt, whatever Argo re-runs.

Metaflow numbers a task's attempts 0, 1, 2 ... with no repeat: its client, UI and a join
loading its inputs take the latest by number, and an attempt's artifacts, logs and
metadata are stored under it. A pod gets its attempt from Argo's ``{{retries}}``, which
starts at 0 again when ``argo retry`` re-runs a failed node (Argo deletes the node and its
pod and makes them again under the same names), so the retried task would be a second
attempt 0 overwriting the first (Netflix/metaflow#2278).

So before Metaflow records anything, the step process looks at the attempts its task
already started (the ``<n>.attempt.json`` markers) from ``pod_hooks.step_init`` (or
``init_and_start``, before the run's ``init``). If its own attempt's marker is there
(``gang_attempt.started``) it writes the next free number to the file the task keeper named
in ``NEXT_ATTEMPT_FILE_ENV`` and exits with ``RENUMBER_EXIT``; the keeper
(``task_logs``) runs the step again as that attempt, with ``--max-user-code-retries``
moved up by as much, so @retry and @catch count as they did in the first run. In an
ordinary run the check costs one look-up (an S3 HEAD); only a renumbering or a retry lists
the task's attempts (``gang_attempt.attempts``).

Infrastructure failures do not spend @retry. On a step pod that carries
``ERROR_RETRIES_ENV`` (every Argo pod: templates/step.py ``budget_env_default``, in
templateDefaults; a gang's JobSet pods do not), Argo retries any end of the pod but one (the
keeper's ``FINAL_FAILURE_EXIT``), within @retry's attempts plus an infrastructure budget
(templates/common.py ``retry_strategy``). Each retried attempt reads the attempts Argo
made of this node before it (the latest ``{{retries}}`` started ones): one the step ended
(Metaflow's DONE marker, or the keeper's mark of a step process that died while its pod
lived) spent @retry; one without either was ended from outside (its pod evicted,
preempted, deleted or lost with its node) and did not. ``--max-user-code-retries`` moves up
by the latter, so @retry and @catch see only the step's own failures, and the attempt is
the next free number (attempts stay contiguous, as Metaflow reads them). After a failure
the keeper (``final``) ends the pod with ``FINAL_FAILURE_EXIT`` when no attempt is left for
the step's code or @catch's fallback, so Argo does not retry a user failure on the
infrastructure budget.

Standard library only at import: the keeper imports it.
"""

import os
import sys

from . import pod_contract as contract
from . import step_argv

NEXT_ATTEMPT_FILE_ENV = "MFARGO_NEXT_ATTEMPT_FILE"  # set by the keeper for its command only
RENUMBER_EXIT = 76  # with the file written: run me again as the attempt it names
RETRY_COUNT, MAX_RETRIES = "--retry-count", "--max-user-code-retries"

_checked = []


def plan(given, user_retries, started, by_step):
    """(attempt, --max-user-code-retries, the attempts ended from outside) for a task Argo
    starts as its attempt ``given`` with @retry's ``user_retries``, the task's ``started``
    attempts and those its step ended (``by_step``). Only the latest ``given`` attempts are
    this Argo node's: those of an earlier node of the task (an ``argo retry``; Argo 3.7 also
    makes an evicted pod again under its number) do not count, @retry starts afresh."""
    attempt = max(started) + 1 if started else given  # a gap before the first attempt is no gap
    mine = sorted(started)[-given:] if given else []
    spent = sum(1 for n in mine if n in by_step)
    return attempt, user_retries + attempt - spent, sorted(set(started) - set(by_step))


def budgeted():
    """Whether this pod's infrastructure failures are kept off @retry (ERROR_RETRIES_ENV)."""
    return contract.ERROR_RETRIES_ENV in os.environ


def check_pod_task(step_name, argv):
    """In a step process under the keeper, whose step command is ``argv``: exit for a
    renumbering when this task's attempt (``MF_PATHSPEC``/``MF_ATTEMPT``, the env naming its
    logs) was already started, or, on a budgeted pod, when Argo's earlier attempts of it were
    not all the step's own failures. Once."""
    path = os.environ.get(NEXT_ATTEMPT_FILE_ENV)
    pathspec = os.environ.get("MF_PATHSPEC", "").split("/")
    if not path or _checked or len(pathspec) != 4 or pathspec[2] != step_name:
        return
    _checked.append(step_name)
    from .gang_attempt import attempts, started

    given = int(os.environ.get("MF_ATTEMPT", "0"))
    if not (budgeted() and given > 0 or started(*pathspec, given)):  # one look-up: not taken
        return
    user = int(step_argv.option(argv, MAX_RETRIES) or 0)
    seen, by_step = attempts(*pathspec)
    if not budgeted():  # a gang's pod: its restarts are counted by gang_attempt and JobSet
        by_step = seen
    attempt, max_retries, outside = plan(given, user, seen, by_step)
    if (attempt, max_retries) != (given, user):
        with open(path, "w") as f:
            f.write("%d %d %d %s %d\n" % (given, attempt, max_retries, ",".join(map(str, outside)) or "-",
                                         not seen))  # no attempt started: the start pod's init again too
        sys.exit(RENUMBER_EXIT)


def final(argv, status, stopped):
    """The keeper's exit for a step that ended ``status`` (``stopped``: the pod was being
    stopped, by Kubernetes or the run): ``FINAL_FAILURE_EXIT`` when the step itself failed
    and neither @retry nor @catch has an attempt left, else ``status``. A step process that
    died while its pod lived, without Metaflow finishing the attempt, is marked as the
    step's own failure for the next attempt's count."""
    if status == 0 or stopped or not budgeted():
        return status
    words = step_words(argv)
    pathspec = os.environ.get("MF_PATHSPEC", "").split("/")
    if step_argv.step_name(words) is None or len(pathspec) != 4:
        return status
    try:
        attempt = int(step_argv.option(words, RETRY_COUNT) or 0)
        left = int(step_argv.option(words, MAX_RETRIES) or 0) + int(os.environ[contract.ERROR_RETRIES_ENV]) - attempt
    except ValueError:  # not a command mfargo wrote: Argo's limit alone ends it
        return status
    try:
        from .gang_attempt import mark_step_exit

        mark_step_exit(*pathspec, attempt, status)
    except Exception as error:  # the count of the next attempt is then the conservative one
        print("[mfargo] could not record attempt %d's end: %r" % (attempt, error), file=sys.stderr)
    return contract.FINAL_FAILURE_EXIT if left <= 0 else status


def step_words(argv):
    """The step's own command in the keeper's ``argv`` (the start pod runs init, then it)."""
    return argv[:1] + _split(argv)[1]


def _split(argv):
    """(init's words, the step's words, the interpreter left out) of the keeper's ``argv``:
    no init but in the start pod's ``python -m init_and_start N ...``."""
    from . import init_and_start

    if argv[1:3] == ["-m", init_and_start.__name__]:
        return init_and_start.split_commands(argv[3:])
    return [], list(argv[1:])


def renumbered(argv, status, path):
    """(argv of the step as the attempt the step process asked for, that attempt, the
    attempt it was given, the attempts ended from outside) after it exited ``status``; None
    when it did not ask. The start pod runs only its step again, unless no attempt of it
    had started (its init may not have run either)."""
    if status != RENUMBER_EXIT:
        return None
    try:
        with open(path) as f:
            given, attempt, max_retries, outside, init_again = f.read().split()
        given, attempt, max_retries, init_again = int(given), int(attempt), int(max_retries), int(init_again)
        outside = [] if outside == "-" else [int(n) for n in outside.split(",")]
        os.unlink(path)
    except (OSError, ValueError):
        return None
    init, step = _split(argv)
    step = step_argv.with_option(step, RETRY_COUNT, lambda old: attempt)
    step = step_argv.with_option(step, MAX_RETRIES, lambda old: max_retries)
    if init and init_again:
        return argv[:3] + [str(len(init))] + init + step, attempt, given, outside
    return argv[:1] + step, attempt, given, outside
