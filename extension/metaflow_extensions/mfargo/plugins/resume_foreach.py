"""A resumed run's foreach: the splitter's clone clones its splits in bulk.

Cloned one by one, every task of a resumed run costs a pod start and a Python process
importing Metaflow, only to copy metadata: a sweep of 1,000 splits whose join failed would
start 1,000 pods. So when ``resume_clone.py`` clones a foreach's splitter, it also clones
every split whose body succeeded whole in the origin run, here, in one process with
``CLONE_WORKERS`` threads (as Metaflow's own ``resume`` clones), and hands Argo only the
splits left to run as the splitter's ``num-splits`` output, which the fan-out expands. With
none left, Argo skips the fan-out ("Skipped, empty params") and the join, whose ``depends``
takes ``Skipped`` (templates/dag.py), reads the clones. ``split-cardinality`` keeps the
foreach's width, so the join's input paths still name every split.

Only a body of plain steps (linear steps, static branches and their joins) is cloned here: a
body holding a nested foreach, a gang, a switch or a loop runs split by split as before, each
of its pods cloning its own task. The task ids are the template's (``pod_contract``), the
same in every run, so split ``i``'s tasks are found by id.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from . import pod_contract as contract

CLONE_WORKERS = 16  # at most this many clones at once: S3 and metadata calls, not CPU
PLAIN_STEP_TYPES = ("linear", "split", "join")  # Metaflow's node types a bulk-cloned body may hold
SHOWN_SPLITS = 10  # a log line names at most this many split indexes


def body_steps(graph, splitter):
    """The steps of ``splitter``'s foreach body, sorted; None when one of them is not plain."""
    end = graph[splitter].matching_join
    body, todo = set(), list(graph[splitter].out_funcs)
    while todo:
        name = todo.pop()
        if name == end or name in body:
            continue
        if graph[name].type not in PLAIN_STEP_TYPES:
            return None
        body.add(name)
        todo.extend(graph[name].out_funcs)
    return sorted(body)


def split_tasks(body, splitter, splitter_task_id, num_splits):
    """Split index -> the task ids (step, id) of its body, as every run of the template names them."""
    ctx = contract.ctx_of(splitter, splitter_task_id)
    return {i: [(step, contract.task_id(step, contract.child_ctx(ctx, i))) for step in body]
            for i in range(num_splits)}


def splits_to_run(obj, origin_run_id, run_id, splitter, splitter_task_id, num_splits, rerun):
    """Clone every split whose body succeeded whole in the origin (none when a body step is
    in ``rerun``, the resume step and the steps after it); the indexes of the splits left."""
    everything = list(range(num_splits))
    body = body_steps(obj.graph, splitter)
    if body is None or rerun.intersection(body):
        return everything
    from metaflow.datastore.datastore_set import TaskDataStoreSet

    tasks = split_tasks(body, splitter, splitter_task_id, num_splits)
    origin = TaskDataStoreSet(obj.flow_datastore, origin_run_id, prefetch_data_artifacts=["_task_ok"],
                              pathspecs=["%s/%s/%s" % (origin_run_id, s, t) for ts in tasks.values() for s, t in ts])

    def succeeded(step, task):
        found = origin.get_with_pathspec("%s/%s/%s" % (origin_run_id, step, task))
        return found is not None and bool(found["_task_ok"])

    cloned = [i for i in everything if all(succeeded(s, t) for s, t in tasks[i])]
    _clone_all(obj, origin_run_id, run_id, origin, [st for i in cloned for st in tasks[i]])
    left = sorted(set(everything) - set(cloned))
    print("mfargo: resume: foreach %s: %d of %d splits cloned (%d tasks) by its splitter; %s" % (
        splitter, len(cloned), num_splits, len(cloned) * len(body),
        "splits %s run again" % _shown(left) if left else "no split starts"), flush=True)
    return left


def _clone_all(obj, origin_run_id, run_id, origin, tasks):
    """Metaflow's clone of each (step, id) of the origin under the same id; the first
    failure raises ``CloneFailed``."""
    from metaflow.clone_util import clone_task_helper

    def clone(step_task):
        step, task = step_task
        try:
            clone_task_helper(obj.flow.name, origin_run_id, run_id, step, task, task,
                              obj.flow_datastore, obj.metadata, origin_ds_set=origin, attempt_id=0)
        except Exception as e:  # one line in the pod's log, whatever the datastore raised
            raise CloneFailed("cloning %s/%s from %s failed: %s" % (step, task, origin_run_id, e)) from e

    if tasks:
        with ThreadPoolExecutor(max_workers=min(CLONE_WORKERS, len(tasks))) as pool:
            list(pool.map(clone, tasks))


class CloneFailed(Exception):
    """A split's task could not be cloned: the splitter's task fails (its retries clone again)."""


def _shown(indexes):
    shown = ", ".join(str(i) for i in indexes[:SHOWN_SPLITS])
    return shown + (" and %d more" % (len(indexes) - SHOWN_SPLITS) if len(indexes) > SHOWN_SPLITS else "")
