"""A task's attempts as the datastore records them; ``python -m ...gang_attempt FLOW RUN
STEP TASK`` prints the next Metaflow attempt of a gang task.

With JobSet restarts (``@jobset(max_restarts=R)``) a gang runs several generations per
Argo attempt, and a user-code failure ends the JobSet early (FailJobSet). Metaflow reads a
task's attempts as a contiguous 0, 1, 2 ... (a join loading its inputs stops at the first
missing attempt), so the attempt is counted here, from the task's own attempt markers in
the datastore, instead of computed from Argo's retry and the JobSet's restart counters
(which would leave gaps). Prints one integer. ``attempts`` also tells which attempts the
step itself ended, for attempt_guard's count of a plain step's infrastructure failures.
"""

import sys

ATTEMPT_SUFFIX = ".attempt.json"  # TaskDataStore.METADATA_ATTEMPT_SUFFIX, one per started attempt
DONE_SUFFIX = ".DONE.lock"  # TaskDataStore.METADATA_DONE_SUFFIX: Metaflow finished the attempt
STEP_EXIT_SUFFIX = ".mfargo-step-exit"  # the keeper saw the step process end without Metaflow's DONE


def _storage():
    """The configured datastore's storage (the pod's: its env configures Metaflow)."""
    from metaflow.metaflow_config import DEFAULT_DATASTORE
    from metaflow.plugins import DATASTORES

    impl = next(d for d in DATASTORES if d.TYPE == DEFAULT_DATASTORE)
    return impl(impl.get_datastore_root_from_config(lambda *args, **kwargs: None))


def started(flow, run, step, task, attempt):
    """Whether the task's attempt ``attempt`` was started: one look-up of its marker (on S3
    a HEAD in this process, where a listing runs a helper process)."""
    storage = _storage()
    [found] = storage.is_file([storage.path_join(flow, run, step, task, "%d%s" % (attempt, ATTEMPT_SUFFIX))])
    return found


def attempts(flow, run, step, task):
    """(started, ended by the step) attempt numbers of the task, from one listing: an attempt
    the step ended has Metaflow's DONE marker (it finished it, failed or not) or the keeper's
    STEP_EXIT_SUFFIX (the step process died while its pod lived: the OOM killer, a crash)."""
    storage = _storage()
    started, by_step = set(), set()
    for entry in storage.list_content([storage.path_join(flow, run, step, task)]):
        head, _, tail = storage.basename(entry.path).partition(".")
        if entry.is_file and head.isdigit():
            if "." + tail == ATTEMPT_SUFFIX:
                started.add(int(head))
            elif "." + tail in (DONE_SUFFIX, STEP_EXIT_SUFFIX):
                by_step.add(int(head))
    return started, by_step


def next_attempt(flow, run, step, task):
    started, _ = attempts(flow, run, step, task)
    return max(started) + 1 if started else 0


def mark_step_exit(flow, run, step, task, attempt, status):
    """Record that the attempt's step process ended (``status``) while its pod lived."""
    import io

    storage = _storage()
    path = storage.path_join(flow, run, step, task, "%d%s" % (attempt, STEP_EXIT_SUFFIX))
    storage.save_bytes([(path, io.BytesIO(b"%d\n" % status))], overwrite=True)


if __name__ == "__main__":
    print(next_attempt(*sys.argv[1:5]))
