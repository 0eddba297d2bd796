"""What flows between tasks: each step's input parameters and where their values come from.

The template side (inputs a step's template declares) and the caller side (arguments a
DAG task passes) are derived from the same list here, so they cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from mfargo.compiler import ir, naming
from mfargo.compiler.constants import Param

from . import argo_models as m
from . import expr, gang

RUN_ID = expr.RUN_ID
ROOT_CTX = naming.ROOT_CTX


def ctx_inside(scope: str | None) -> str:
    """The foreach context inside a template of ``scope`` (the foreach step whose body it is):
    fixed outside every foreach (so no input is needed for it), else the caller's `ctx` input."""
    return ROOT_CTX if scope is None else expr.input_param(Param.CTX)


def step_ctx(step: ir.Step, wf: ir.Workflow) -> str:
    """The foreach context inside ``step``'s template."""
    if index_only(step, wf):
        return naming.child_ctx(ROOT_CTX, expr.input_param(Param.SPLIT_INDEX))
    return ctx_inside(step.scope)


def only_step(wf: ir.Workflow, splitter: str) -> ir.Step | None:
    """The step a foreach's body is, when it is one step (not a loop). Its fan-out then runs
    the step's template itself, one Argo node a split where a sub-DAG costs two: a Workflow
    keeps every node's status in one object, so this halves what a wide foreach puts there."""
    body = [s for s in wf.steps.values() if s.scope == splitter]
    return body[0] if len(body) == 1 and not body[0].recursive else None


def index_only(step: ir.Step, wf: ir.Workflow) -> bool:
    """Whether ``step`` is the one step of a top-level foreach's body: its context and input
    paths then follow from the split index, the one input its fan-out passes, and each split's
    Argo nodes (in the Workflow object, a wide foreach's bulk) carry that input alone."""
    return (step.scope is not None and wf.steps[step.scope].scope is None
            and only_step(wf, step.scope) is step)


def fan_out_arguments(wf: ir.Workflow, splitter: str, ctx: str) -> list[Arg]:
    """What a foreach's fan-out passes each split (``expr.ITEM`` its index), in context ``ctx``."""
    step = only_step(wf, splitter)
    if step is not None and index_only(step, wf):
        return [Arg(Param.SPLIT_INDEX, expr.ITEM)]
    return [Arg(Param.CTX, naming.child_ctx(ctx, expr.ITEM)), Arg(Param.SPLIT_INDEX, expr.ITEM),
            Arg(Param.INPUT_PATHS, step_path(splitter, ctx))]


@dataclass(frozen=True, slots=True)
class Arg:
    name: str
    value: str  # as the calling DAG task writes it


def task_name(step: str) -> str:
    return naming.template_name(step)


def step_path(step: str, ctx: str, iteration: str | None = None) -> str:
    """A Metaflow input pathspec run/step/task for a task in context ``ctx``."""
    return naming.pathspec(RUN_ID, step, naming.task_id(step, ctx, iteration))


def arguments(step: ir.Step, scope_ctx: str, wf: ir.Workflow) -> list[Arg]:
    """The parameters a DAG task passes to ``step``'s template, in scope context ``scope_ctx``."""
    if index_only(step, wf):
        return fan_out_arguments(wf, step.scope, ROOT_CTX)
    args = [] if step.scope is None else [Arg(Param.CTX, scope_ctx)]
    if step.foreach_entry:
        args += [
            Arg(Param.SPLIT_INDEX, expr.input_param(Param.SPLIT_INDEX)),
            Arg(Param.INPUT_PATHS, expr.input_param(Param.INPUT_PATHS)),
        ]
    source = step.inputs
    if step.gang:
        args += [Arg(name, value) for name, value in gang.step_arguments(step.gang)]
    elif isinstance(source, ir.FromForeach):
        args.append(
            Arg(Param.SPLIT_CARDINALITY, expr.task_output(task_name(source.splitter), Param.SPLIT_CARDINALITY))
        )
        if len(source.body_last) > 1:  # which step ended each split: the body DAGs' outputs, in split order
            fan_out = naming.fan_out_task_name(source.splitter)
            args.append(Arg(Param.LAST_STEP, expr.task_output(fan_out, Param.LAST_STEP)))
    elif isinstance(source, ir.Gang):
        args += [Arg(name, value) for name, value in gang.join_arguments(source)]
    elif isinstance(source, ir.FromBranches):
        args += [Arg(status_param(p), expr.task_status(task_name(p))) for p in branch_tasks(source)]
    if step.recursive:
        # The loop gets its first input paths ready-made; iterations pass on their own.
        # A foreach body's first step already got its input paths from the fan-out above.
        args.append(Arg(Param.ITERATION, "0"))
        if not isinstance(source, ir.FromCaller):
            caller_ids = {p: expr.task_output(task_name(p), Param.TASK_ID) for p in _looping_parents(step, wf)}
            args.append(Arg(Param.INPUT_PATHS, static_paths(source, scope_ctx, caller_ids)))
    else:
        # A loop that may have been skipped (a switch merge) has no output to read.
        read = expr.output_if_succeeded if isinstance(source, ir.FromBranches) else expr.task_output
        args += [Arg(loop_task_param(p), read(task_name(p), Param.TASK_ID)) for p in _looping_parents(step, wf)]
    return args


def branch_tasks(source: ir.FromBranches) -> list[str]:
    """Steps whose status decides which parents arrived: the parents and their switches' rivals."""
    return list(dict.fromkeys(list(source.parents) + [r for _, rivals in source.rivals for r in rivals]))


def _looping_parents(step: ir.Step, wf: ir.Workflow) -> list[str]:
    """Parents that are recursive: their last iteration's task id is only known at run time."""
    return [p for p in getattr(step.inputs, "parents", ()) if wf.steps[p].recursive]


def loop_task_param(parent: str) -> str:
    return "%s%s" % (Param.LOOP_TASK_PREFIX, naming.template_name(parent))


def parent_task_ids(step: ir.Step, wf: ir.Workflow) -> dict[str, str]:
    """Inside a step's template: the task id of each recursive parent, as an input tag."""
    return {p: expr.input_param(loop_task_param(p)) for p in _looping_parents(step, wf)}


def status_param(parent: str) -> str:
    return Param.STATUS_PREFIX + naming.template_name(parent)


def static_paths(source: ir.InputSource, ctx: str, task_ids: dict[str, str] | None = None) -> str:
    """Input paths known when the YAML is written: every parent ran in context ``ctx``
    (``task_ids`` overrides the id of parents whose id is a run-time value: loops)."""
    if isinstance(source, ir.FromParameters):
        return "%s/%s/%s" % (RUN_ID, naming.PARAMETERS_STEP, naming.PARAMETERS_TASK_ID)
    assert isinstance(source, ir.FromParents), source
    ids = {p: (task_ids or {}).get(p, naming.task_id(p, ctx)) for p in source.parents}
    if len(source.parents) == 1:
        [(parent, task)] = ids.items()
        return "%s/%s/%s" % (RUN_ID, parent, task)
    return "%s/:%s" % (RUN_ID, ",".join("%s/%s" % (p, t) for p, t in ids.items()))


def template_inputs(step: ir.Step, wf: ir.Workflow) -> list[str]:
    """Names of the inputs ``step``'s (container or gang) template declares."""
    names = [a.name for a in arguments(step, "", wf)]  # values unused
    if step.recursive:
        names = [n for n in names if n != Param.ITERATION] + [Param.ITERATION]
    return list(dict.fromkeys(names))


def template_inputs_model(step: ir.Step, wf: ir.Workflow) -> m.Inputs | None:
    """The `inputs` of ``step``'s template (none for a top-level step without any)."""
    names = template_inputs(step, wf)
    return m.Inputs(parameters=[m.Parameter(name=n) for n in names]) if names else None


def clone_chain(step: ir.Step, wf: ir.Workflow) -> list[str]:
    """The plain steps a resumed run's pod of ``step`` clones after its own task, in order
    (compiler/graph.py heads them; plugins/resume_clone.py clones them)."""
    return [s.name for s in wf.steps.values() if s.cloned_by == step.name]


def outputs(step: ir.Step, wf: ir.Workflow) -> list[str]:
    """Output parameters the in-pod decorator writes for this step's successors."""
    names = [naming.cloned_output(s) for s in clone_chain(step, wf)]
    if step.transition is ir.Transition.FOREACH:
        names += [Param.NUM_SPLITS, Param.SPLIT_CARDINALITY]
    elif step.transition is ir.Transition.PARALLEL:
        names += [*gang.SPLITTER_OUTPUTS, gang.CLONED_OUTPUT]
    elif step.transition is ir.Transition.SWITCH:
        names.append(Param.SWITCH_STEP)
    if step.recursive:
        names.append(Param.TASK_ID)
    return names
