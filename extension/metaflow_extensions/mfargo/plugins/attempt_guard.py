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
ordinary run the check costs one look-up (an S3 HEAD); only a renumbering lists the task's
attempts (``gang_attempt.next_attempt``).

Standard library only at import: the keeper imports it.
"""

import os
import sys

from . import step_argv

NEXT_ATTEMPT_FILE_ENV = "MFARGO_NEXT_ATTEMPT_FILE"  # set by the keeper for its command only
RENUMBER_EXIT = 76  # with the file written: run me again as the attempt it names
RETRY_COUNT, MAX_RETRIES = "--retry-count", "--max-user-code-retries"

_checked = []


def check_pod_task(step_name):
    """In a step process under the keeper: exit for a renumbering when this task's attempt
    (``MF_PATHSPEC``/``MF_ATTEMPT``, the env naming its logs) was already started. Once."""
    path = os.environ.get(NEXT_ATTEMPT_FILE_ENV)
    pathspec = os.environ.get("MF_PATHSPEC", "").split("/")
    if not path or _checked or len(pathspec) != 4 or pathspec[2] != step_name:
        return
    _checked.append(step_name)
    from .gang_attempt import next_attempt, started

    attempt = int(os.environ.get("MF_ATTEMPT", "0"))
    if started(*pathspec, attempt):
        free = max(next_attempt(*pathspec), attempt + 1)
        with open(path, "w") as f:
            f.write("%d %d\n" % (attempt, free))
        sys.exit(RENUMBER_EXIT)


def renumbered(argv, status, path):
    """(argv of the step as the attempt the step process asked for, that attempt, the
    attempt it was given) after it exited ``status``; None when it did not ask."""
    if status != RENUMBER_EXIT:
        return None
    try:
        with open(path) as f:
            given, free = (int(word) for word in f.read().split())
        os.unlink(path)
    except (OSError, ValueError):
        return None
    words = list(argv)
    from . import init_and_start

    if words[1:3] == ["-m", init_and_start.__name__]:  # init ran in the first attempt: only the step again
        words = words[:1] + init_and_start.split_commands(words[3:])[1]
    shift = free - given
    words = step_argv.with_option(words, RETRY_COUNT, lambda old: free)
    words = step_argv.with_option(words, MAX_RETRIES, lambda old: int(old or 0) + shift)
    return words, free, given
