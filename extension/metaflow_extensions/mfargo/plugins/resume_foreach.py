"""A resumed run's foreach: the splitter's clone clones its splits in bulk.

Cloned one by one, every task of a resumed run costs a pod start and a Python process
importing Metaflow, only to copy metadata: a sweep of 1,000 splits whose join failed would
start 1,000 pods. So when ``resume_clone.py`` clones a foreach's splitter, it also clones
every split whose tasks all succeeded in the origin run, here, in one process with
``CLONE_WORKERS`` threads (as Metaflow's own ``resume`` clones), and hands Argo only the
splits left to run as the splitter's ``num-splits`` output, which the fan-out expands. With
none left, Argo skips the fan-out ("Skipped, empty params") and the join, whose ``depends``
takes ``Skipped`` (templates/dag.py), reads the clones. ``split-cardinality`` keeps the
foreach's width, so the join's input paths still name every split.

A split's tasks are found by id, the template's ids being the same in every run
(``pod_contract``): its steps', and within them a nested foreach's splits (as many as its
splitter's origin task made) and a gang's ranks (from its splitter's origin artifacts), to
any depth. A body holding a switch or a loop (whose tasks depend on choices made at run time)
runs split by split as before, each of its pods cloning its own task.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from . import pod_contract as contract

CLONE_WORKERS = 16  # at most this many clones at once: S3 and metadata calls, not CPU
PLAIN_STEP_TYPES = ("linear", "split", "join")  # Metaflow's node types a bulk-cloned body may hold
GANG = "gang"  # in a body: a gang's splitter
SHOWN_SPLITS = 10  # a log line names at most this many split indexes


def body(graph, splitter):
    """``splitter``'s foreach body as sorted (step, inner): inner is None for a plain step, the
    body of a nested foreach, or GANG for a gang's splitter (its gang step is not listed). None
    when the body (or a nested one) holds a switch or a loop."""
    end = graph[splitter].matching_join
    steps, seen, todo = [], set(), list(graph[splitter].out_funcs)
    while todo:
        name = todo.pop()
        if name == end or name in seen:
            continue
        seen.add(name)
        node = graph[name]
        if node.type == "foreach":
            inner = GANG if node.parallel_foreach else body(graph, name)
            if inner is None:
                return None
            steps.append((name, inner))
            todo.append(node.matching_join)
        elif node.type in PLAIN_STEP_TYPES:
            steps.append((name, None))
            todo.extend(node.out_funcs)
        else:
            return None
    return sorted(steps)


def step_names(graph, tree):
    """Every step a body holds, nested bodies and gang steps included."""
    names = set()
    for name, inner in tree:
        names.add(name)
        if inner == GANG:
            names.update(graph[name].out_funcs)
        elif inner:
            names |= step_names(graph, inner)
    return names


def splits_to_run(obj, origin_run_id, run_id, splitter, splitter_task_id, num_splits, rerun):
    """Clone every split whose tasks all succeeded in the origin (none when a step of the body
    is in ``rerun``, the resume step and the steps after it); the indexes of the splits left."""
    everything = list(range(num_splits))
    tree = body(obj.graph, splitter)
    if tree is None or rerun & step_names(obj.graph, tree):
        return everything
    ctx = contract.ctx_of(splitter, splitter_task_id)
    origin = OriginTasks(obj.flow_datastore, origin_run_id)
    tasks, broken = _split_tasks(obj.graph, origin, {i: contract.child_ctx(ctx, i) for i in everything}, tree)
    cloned = [i for i in everything if i not in broken]
    _clone_all(obj, origin_run_id, run_id, origin, [task for i in cloned for task in tasks[i]])
    left = sorted(broken)
    print("mfargo: resume: foreach %s: %d of %d splits cloned (%d tasks) by its splitter; %s" % (
        splitter, len(cloned), num_splits, sum(len(tasks[i]) for i in cloned),
        "splits %s run again" % _shown(left) if left else "no split starts"), flush=True)
    return left


def _split_tasks(graph, origin, ctxs, tree):
    """Split -> its origin tasks (step, id), and the splits with a task missing or failed.
    Read level by level (a nested foreach's width and a gang's ranks are its splitter's
    artifacts), each level's tasks in one bulk read."""
    tasks = {split: [] for split in ctxs}
    broken = set()
    wanted = [(split, name, inner, contract.task_id(name, ctx), ctx) for split, ctx in ctxs.items()
              for name, inner in tree]
    while wanted:
        origin.load([(name, task) for _, name, _, task, _ in wanted])
        deeper = []
        for split, name, inner, task, ctx in wanted:
            found = origin.get(name, task)
            if split in broken or found is None or not found["_task_ok"]:
                broken.add(split)
                continue
            tasks[split].append((name, task))
            if inner == GANG:
                [gang_step] = graph[name].out_funcs
                ranks = contract.splitter_gang_task_ids(found.__getitem__)
                deeper += [(split, gang_step, None, rank, None) for rank in ranks]
            elif inner:
                deeper += [(split, inner_name, inner_inner, contract.task_id(inner_name, child), child)
                           for child in (contract.child_ctx(ctx, j) for j in range(int(found["_foreach_num_splits"])))
                           for inner_name, inner_inner in inner]
        wanted = deeper
    return tasks, broken


class OriginTasks:
    """The origin run's finished tasks, read in bulk (Metaflow's TaskDataStoreSet, each task's
    ``_task_ok`` prefetched); what ``clone_task_helper`` takes as its ``origin_ds_set``."""

    def __init__(self, flow_datastore, run_id):
        self._flow_datastore, self._run_id, self._found = flow_datastore, run_id, {}

    def load(self, tasks):
        from metaflow.datastore.datastore_set import TaskDataStoreSet

        pathspecs = [self._pathspec(step, task) for step, task in tasks]
        found = TaskDataStoreSet(self._flow_datastore, self._run_id, pathspecs=pathspecs,
                                 prefetch_data_artifacts=["_task_ok"])
        for pathspec in pathspecs:
            self._found[pathspec] = found.get_with_pathspec(pathspec)

    def get(self, step, task):
        return self._found.get(self._pathspec(step, task))

    def get_with_pathspec(self, pathspec):
        return self._found.get(pathspec)

    def _pathspec(self, step, task):
        return "%s/%s/%s" % (self._run_id, step, task)


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
