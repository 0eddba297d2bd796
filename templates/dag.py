"""DAG templates: the top-level DAG and one sub-DAG per foreach body.

Each scope (top level, or one split of a foreach) is a DAG whose tasks are its steps
plus one fan-out task per nested foreach; a foreach whose body is one step has no DAG of
its own: its fan-out runs the step's template. Dependencies always name the outcome
(``a.Succeeded``), never a bare task name (argo-workflows#12037).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import argo_models as m

from mfargo.compiler import ir, naming
from mfargo.compiler.constants import Param

from . import expr, gang, gang_report, heartbeat, queue_watch, wiring


@dataclass(frozen=True, slots=True)
class Node:
    """A task of a scope's DAG: a step, or the fan-out of a nested foreach."""

    task: str
    condition: tuple
    cloned: bool = False  # a resumed run may skip it: its chain's head cloned it (graph.py)


def build_all(wf: ir.Workflow, entrypoint: str) -> list[m.Template]:
    """The top-level DAG (named ``entrypoint``) and every foreach sub-DAG, inner first (none
    for a body of one step: its fan-out runs the step's template)."""
    templates = []
    for splitter in _foreach_splitters(wf):
        if wiring.only_step(wf, splitter) is None:
            templates.append(_scope_template(wf, splitter, naming.foreach_template_name(splitter)))
    templates.append(_scope_template(wf, None, entrypoint))
    return templates


def _foreach_splitters(wf: ir.Workflow) -> list[str]:
    """Foreach steps, innermost bodies first (deeper scopes before the ones holding them)."""
    splitters = [s.name for s in wf.steps.values() if s.transition is ir.Transition.FOREACH]
    return sorted(splitters, key=lambda s: -_depth(wf, s))


def fan_out(wf: ir.Workflow, splitter: str) -> tuple[str, str]:
    """(task, template) of a foreach's fan-out: the body's one step's own, or the body's DAG."""
    step = wiring.only_step(wf, splitter)
    if step is not None:
        return wiring.task_name(step.name), wiring.task_name(step.name)
    return naming.fan_out_task_name(splitter), naming.foreach_template_name(splitter)


def _depth(wf: ir.Workflow, name: str) -> int:
    depth, scope = 0, wf.steps[name].scope
    while scope is not None:
        depth, scope = depth + 1, wf.steps[scope].scope
    return depth


def _scope_template(wf: ir.Workflow, scope: str | None, name: str) -> m.Template:
    ctx = wiring.ctx_inside(scope)
    steps = [s for s in wf.steps.values() if s.scope == scope]
    tasks = [heartbeat.task()] if scope is None and wf.run_heartbeat else []
    if scope is None and queue_watch.needed(wf):
        tasks.append(queue_watch.task())
    for step in steps:
        tasks.append(_step_task(wf, step, ctx))
        if step.gang:
            tasks.append(gang_report.task(step))
        if step.transition is ir.Transition.FOREACH:
            tasks.append(_fan_out_task(wf, step, ctx))
    inputs = outputs = None
    if scope is not None:
        inputs = m.Inputs(parameters=[m.Parameter(name=n) for n in (Param.CTX, Param.SPLIT_INDEX, Param.INPUT_PATHS)])
        outputs = _last_step_output(wf, scope)
    return m.Template(name=name, inputs=inputs, outputs=outputs, dag=m.DAGTemplate(tasks=tasks))


def _last_step_output(wf: ir.Workflow, splitter: str) -> m.Outputs | None:
    """When a foreach body can end in several steps, which one ran (for the join's paths)."""
    for step in wf.steps.values():
        source = step.inputs
        if isinstance(source, ir.FromForeach) and source.splitter == splitter and len(source.body_last) > 1:
            *first, last = source.body_last
            value = "'%s'" % last
            for name in reversed(first):
                value = "tasks['%s'].status == 'Succeeded' ? '%s' : %s" % (wiring.task_name(name), name, value)
            return m.Outputs(parameters=[m.Parameter(name=Param.LAST_STEP, value_from=m.ValueFrom(expression=value))])
    return None


def _step_task(wf: ir.Workflow, step: ir.Step, ctx: str) -> m.DAGTask:
    template = naming.recursion_template_name(step.name) if step.recursive else wiring.task_name(step.name)
    when = None
    if step.switch_parent is not None:
        when = expr.equals(expr.task_output(wiring.task_name(step.switch_parent), Param.SWITCH_STEP), step.name)
    elif isinstance(step.inputs, ir.FromBranches) and step.inputs.rivals:
        when = _arrived_from_any(step.inputs)
    elif step.gang is not None and gang.skippable(step):
        when = gang.skip_unless_needed(step)
    elif step.cloned_by is not None:  # a resumed run's pod of cloned_by may have cloned it
        when = expr.not_equals(expr.task_output(wiring.task_name(step.cloned_by), naming.cloned_output(step.name)),
                               "true")
    return m.DAGTask(
        name=wiring.task_name(step.name),
        template=template,
        depends=_depends(wf, step),
        when=when,
        arguments=_arguments(wiring.arguments(step, ctx, wf)),
    )


def _fan_out_task(wf: ir.Workflow, splitter: ir.Step, ctx: str) -> m.DAGTask:
    """Runs the foreach body once per split: withParam reads the splitter's [0..K-1] (in a
    resumed run, the splits its clone did not clone: plugins/resume_foreach.py)."""
    task = wiring.task_name(splitter.name)
    name, template = fan_out(wf, splitter.name)
    return m.DAGTask(
        name=name,
        template=template,
        depends=expr.succeeded(task),
        with_param=expr.task_output(task, Param.NUM_SPLITS),
        arguments=_arguments(wiring.fan_out_arguments(wf, splitter.name, ctx)),
    )


def _arrived_from_any(source: ir.FromBranches) -> str:
    """Some parent arrived: it succeeded and, if a switch, none of its rivals did."""
    rivals = dict(source.rivals)
    terms = []
    for parent in source.parents:
        term = "%s == Succeeded" % expr.task_status(wiring.task_name(parent))
        for rival in rivals.get(parent, ()):
            term += " && %s != Succeeded" % expr.task_status(wiring.task_name(rival))
        terms.append("(%s)" % term)
    return " || ".join(terms)


def _depends(wf: ir.Workflow, step: ir.Step) -> str | None:
    parents = _dag_parents(wf, step)
    if not parents:
        return None
    if isinstance(step.inputs, ir.FromBranches):
        # Wait for the switches' rivals too: whether they ran says what the switch chose.
        rivals = [r for r in wiring.branch_tasks(step.inputs) if r not in step.inputs.parents]
        waits = [expr.done(wiring.task_name(r)) for r in rivals]
        return " && ".join([expr.any_branch([p.task for p in parents])] + waits)
    if isinstance(step.inputs, ir.Gang) and gang.skippable(wf.steps[step.inputs.step]):
        return expr.succeeded_or_skipped(parents[0].task)  # a resumed run may skip the gang it joins
    if isinstance(step.inputs, ir.FromForeach):
        # A resumed run's splitter may clone every split (plugins/resume_foreach.py): the
        # fan-out then has no split to run and Argo skips it.
        return expr.succeeded_or_skipped(parents[0].task)
    if all(p.condition == step.condition for p in parents) or len(parents) == 1:
        # A parent its chain's head cloned (in a resumed run) was skipped: it arrived all the same.
        return " && ".join(expr.succeeded_or_skipped(p.task) if p.cloned else expr.succeeded(p.task)
                           for p in parents)
    assert not any(p.cloned for p in parents), step.name  # graph.py: a chain step's successors share its condition
    return expr.any_branch([p.task for p in parents])


def _dag_parents(wf: ir.Workflow, step: ir.Step) -> list[Node]:
    source = step.inputs
    if isinstance(source, (ir.FromParameters, ir.FromCaller)):
        return []
    if isinstance(source, ir.FromForeach):
        splitter = wf.steps[source.splitter]
        return [Node(fan_out(wf, splitter.name)[0], splitter.condition)]
    if isinstance(source, ir.Gang):
        return [_node(wf.steps[source.step])]
    return [_node(wf.steps[p]) for p in source.parents]


def _node(step: ir.Step) -> Node:
    return Node(wiring.task_name(step.name), step.condition, cloned=step.cloned_by is not None)


def _arguments(args: list[wiring.Arg]) -> m.Arguments | None:
    if not args:
        return None
    return m.Arguments(parameters=[m.Parameter(name=a.name, value=a.value) for a in args])
