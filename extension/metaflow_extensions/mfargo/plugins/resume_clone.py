"""`python flow.py argo-workflows clone-task ...`: one task of a resumed run, cloned from
its origin run when Metaflow's rule for ``resume`` allows it (see ``resume.py``).

Exit 0: cloned (Metaflow's own clone: the origin's artifacts, ``origin-run-id`` and
``origin-task-id`` metadata, no user code), and the outputs Argo reads written from the
origin's artifacts; a foreach's splitter also clones the splits that succeeded whole
(``resume_foreach.py``) and tells Argo to run only the others. Exit ``resume.RERUN_EXIT``: the
task must run, the reason said on one line. Anything else: the resume cannot go on (a resume
step that is not a step, an origin run with no ``_parameters`` task of this flow).
"""

from __future__ import annotations

import json
import os
import sys

from metaflow._vendor import click

from . import pod_contract as contract
from . import pod_hooks, resume, resume_foreach


@click.command(name="clone-task", hidden=True, help="Clone a task of a resumed run from its origin run.")
@click.option("--origin-run-id", required=True)
@click.option("--resume-step", default="", help="Run this step and every step after it again.")
@click.option("--step", "step_name", required=True)
@click.option("--run-id", required=True)
@click.option("--task-id", required=True)
@click.option("--retry-count", default=0, type=int)
@click.option("--input-paths-filename", default=None)
@click.option("--tag", "tags", multiple=True, default=None, help="The run's tags (as `init` registers them).")
@click.pass_obj
def clone_task(obj, origin_run_id, resume_step, step_name, run_id, task_id, retry_count, input_paths_filename, tags):
    from metaflow.clone_util import clone_task_helper

    task = "%s/%s" % (step_name, task_id)
    obj.metadata.add_sticky_tags(tags=tags)
    if resume_step and resume_step not in obj.graph:
        _fail("the resume step %r is not a step of %s" % (resume_step, obj.flow.name))
    origin = _finished_origin(obj, origin_run_id, step_name, task_id)
    if step_name == resume.PARAMETERS_STEP:
        if origin is None or not origin["_task_ok"]:
            _fail("run %s has no parameters of %s to resume from: not a run of this flow"
                  % (origin_run_id, obj.flow.name))
        obj.metadata.register_run_id(run_id, list(tags) or None)
    else:
        reason = _rerun_reason(obj, origin_run_id, origin, step_name, resume_step, input_paths_filename)
        if reason:
            print("mfargo: resume: %s runs again: %s" % (task, reason), flush=True)
            sys.exit(resume.RERUN_EXIT)
    clone_task_helper(obj.flow.name, origin_run_id, run_id, step_name, task_id, task_id,
                      obj.flow_datastore, obj.metadata, attempt_id=retry_count)
    print("mfargo: resume: %s cloned from %s/%s" % (task, origin_run_id, task), flush=True)
    out_dir = os.environ.get(contract.OUTPUT_DIR_ENV)
    if out_dir and step_name != resume.PARAMETERS_STEP:
        outputs = pod_hooks.output_files(task_id, obj.graph[step_name], OriginArtifacts(origin))
        if contract.GANG_CLONED_FILE in outputs and _clone_gang(obj, origin_run_id, resume_step, run_id, step_name, origin):
            outputs[contract.GANG_CLONED_FILE] = "true"
        if contract.NUM_SPLITS_FILE in outputs:  # Argo runs only the splits not cloned here
            outputs[contract.NUM_SPLITS_FILE] = json.dumps(_splits_to_run(
                obj, origin_run_id, run_id, step_name, task_id, int(outputs[contract.SPLIT_CARDINALITY_FILE]),
                steps_to_rerun(obj.graph, resume_step)))
        for cloned in _clone_chain(obj, origin_run_id, resume_step, run_id, step_name):
            outputs[contract.cloned_step_file(cloned)] = "true"
        for name, value in outputs.items():
            with open(os.path.join(out_dir, name), "w") as f:
                f.write(value)


def _splits_to_run(obj, origin_run_id, run_id, splitter, task_id, num_splits, rerun):
    try:
        return resume_foreach.splits_to_run(obj, origin_run_id, run_id, splitter, task_id, num_splits, rerun)
    except resume_foreach.CloneFailed as e:
        _fail("foreach %s: %s" % (splitter, e))


def _clone_chain(obj, origin_run_id, resume_step, run_id, head):
    """Clone the plain top-level steps this cloned task heads (pod_hooks.clone_chain), in
    order: each one whose parents were all cloned here and whose own rule allows it. Returns
    the steps cloned; their DAG tasks are then skipped, and start no pod."""
    from metaflow.clone_util import clone_task_helper

    cloned = [head]
    for step_name in pod_hooks.clone_chain():
        task_id = contract.task_id(step_name, contract.ROOT_CTX)  # top-level steps only
        ran = [p for p in obj.graph[step_name].in_funcs if p not in cloned]
        origin = _finished_origin(obj, origin_run_id, step_name, task_id)
        reason = ("its input %s/%s runs again" % (ran[0], contract.task_id(ran[0], contract.ROOT_CTX)) if ran
                  else _rerun_reason(obj, origin_run_id, origin, step_name, resume_step, None))
        if reason:
            print("mfargo: resume: %s/%s runs again: %s" % (step_name, task_id, reason), flush=True)
            continue
        clone_task_helper(obj.flow.name, origin_run_id, run_id, step_name, task_id, task_id,
                          obj.flow_datastore, obj.metadata, attempt_id=0)
        print("mfargo: resume: %s/%s cloned from %s/%s/%s: it does not start" % (
            step_name, task_id, origin_run_id, step_name, task_id), flush=True)
        cloned.append(step_name)
    return cloned[1:]


def _clone_gang(obj, origin_run_id, resume_step, run_id, splitter, origin):
    """Clone every rank's task of the gang after the cloned ``splitter`` when each succeeded
    in the origin and the gang is not to run again; True if it did (its DAG task is then
    skipped: no JobSet). The ids are the origin's: E is an artifact of the splitter."""
    from metaflow.clone_util import clone_task_helper

    gang = obj.graph[splitter].out_funcs[0]
    if gang in steps_to_rerun(obj.graph, resume_step):
        return False
    artifacts = OriginArtifacts(origin)
    ranks = contract.splitter_gang_task_ids(lambda name: getattr(artifacts, name))
    failed = _failed_rank(obj, origin_run_id, gang, ranks)
    if failed:
        print("mfargo: resume: gang %s runs again: task %s did not succeed in the origin run" % (gang, failed),
              flush=True)
        return False
    for rank_task in ranks:
        clone_task_helper(obj.flow.name, origin_run_id, run_id, gang, rank_task, rank_task,
                          obj.flow_datastore, obj.metadata, attempt_id=0)
    print("mfargo: resume: gang %s cloned whole from %s (%d tasks): it does not start" % (
        gang, origin_run_id, len(ranks)), flush=True)
    return True


class OriginArtifacts:
    """The origin task's artifacts as attributes, where pod_hooks reads a flow's."""

    def __init__(self, datastore):
        self._datastore = datastore

    def __getattr__(self, name):
        if name.startswith("__") or name not in self._datastore:
            raise AttributeError(name)
        return self._datastore[name]


def steps_to_rerun(graph, resume_step):
    """The resume step and every step after it (Metaflow's resume rule)."""
    rerun = {resume_step} if resume_step else set()
    for name in graph.sorted_nodes:
        if name in rerun:
            rerun.update(graph[name].out_funcs)
    return rerun


def _finished_origin(obj, origin_run_id, step_name, task_id):
    """The origin task's datastore (its last finished attempt), or None."""
    from metaflow.exception import MetaflowException

    try:
        return obj.flow_datastore.get_task_datastore(origin_run_id, step_name, task_id)
    except MetaflowException:
        return None


def _failed_rank(obj, origin_run_id, gang, rank_tasks):
    """The first of the gang's ``rank_tasks`` that did not succeed in the origin, or None."""
    for rank_task in rank_tasks:
        rank = _finished_origin(obj, origin_run_id, gang, rank_task)
        if rank is None or not rank["_task_ok"]:
            return rank_task
    return None


def _rerun_reason(obj, origin_run_id, origin, step_name, resume_step, input_paths_filename):
    if step_name in steps_to_rerun(obj.graph, resume_step):
        return "it is the resume step %s or after it" % resume_step
    if origin is None:
        return "the origin run has no finished task of the same id"
    if not origin["_task_ok"]:
        return "it failed in the origin run"
    node = obj.graph[step_name]
    if node.parallel_step:  # a gang is cloned whole or runs whole
        failed = _failed_rank(obj, origin_run_id, step_name, pod_hooks.gang_task_ids_from_env())
        if failed:
            return "task %s of its gang did not succeed in the origin run" % failed
    if node.type == "foreach" and node.parallel_foreach and contract.ENTROPY_ARTIFACT not in origin:
        return "the origin run did not record its gang's task ids"
    for path in _input_paths(input_paths_filename):
        if not _was_cloned(obj.flow.name, path):
            return "its input %s ran again" % path
    return None


def _input_paths(filename):
    from metaflow.util import decompress_list

    if not filename:
        return []
    with open(filename, encoding="utf-8") as f:
        text = f.read().strip(" \n\"'")
    return [p for p in decompress_list(text) if p.split("/")[1] != resume.PARAMETERS_STEP] if text else []


def _was_cloned(flow_name, path):
    """Whether task ``run/step/id`` of this run is a clone (Metaflow's clone records
    ``origin-task-id``; a task that ran records only ``origin-run-id``)."""
    from metaflow import Task

    return "origin-task-id" in Task("%s/%s" % (flow_name, path), _namespace_check=False).metadata_dict


def _fail(message):
    print("mfargo: resume: %s" % message, file=sys.stderr, flush=True)
    sys.exit(1)
