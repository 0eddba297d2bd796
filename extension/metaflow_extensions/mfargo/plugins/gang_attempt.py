"""``python -m ...gang_attempt FLOW RUN STEP TASK``: the next Metaflow attempt of a gang task.

With JobSet restarts (``@jobset(max_restarts=R)``) a gang runs several generations per
Argo attempt, and a user-code failure ends the JobSet early (FailJobSet). Metaflow reads a
task's attempts as a contiguous 0, 1, 2 ... (a join loading its inputs stops at the first
missing attempt), so the attempt is counted here, from the task's own attempt markers in
the datastore, instead of computed from Argo's retry and the JobSet's restart counters
(which would leave gaps). Prints one integer.
"""

import sys

ATTEMPT_SUFFIX = ".attempt.json"  # TaskDataStore.METADATA_ATTEMPT_SUFFIX, one per started attempt


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


def next_attempt(flow, run, step, task):
    storage = _storage()
    listing = storage.list_content([storage.path_join(flow, run, step, task)])
    started = []
    for entry in listing:
        name = storage.basename(entry.path)
        head, _, tail = name.partition(".")
        if entry.is_file and "." + tail == ATTEMPT_SUFFIX and head.isdigit():
            started.append(int(head))
    return max(started) + 1 if started else 0


if __name__ == "__main__":
    print(next_attempt(*sys.argv[1:5]))
