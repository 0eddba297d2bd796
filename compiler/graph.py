"""The only reader of Metaflow's FlowGraph: shapes, scopes and input sources.

Turns each DAGNode into the graph half of an ``ir.Step`` (transition, scope, where
its inputs come from, the switch choices it depends on). The CLI has run Metaflow's
own graph checks before this (as core does), so only mfargo's own limits live here.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from pathlib import Path

from . import ir, rules
from .errors import CompileError

Condition = frozenset  # of (switch step, chosen successor) pairs that must hold


@dataclass(frozen=True, kw_only=True, slots=True)
class StepShape:
    """Graph facts about one step, before decorators are read."""

    name: str
    transition: ir.Transition
    successors: tuple[str, ...]
    inputs: ir.InputSource
    scope: str | None
    foreach_entry: bool
    gang: bool  # a @parallel step (its join's ``inputs`` is the ir.Gang)
    recursive: bool
    switch_cases: tuple[str, ...]
    condition: tuple[tuple[str, str], ...]  # sorted: the switch choices this step needs
    switch_parent: str | None  # the switch step whose choice gates this step
    cloned_by: str | None = None  # in a resumed run, the step whose pod clones this one (_cloned_by)


def analyse(graph) -> dict[str, StepShape]:
    """Shapes of all steps reachable from start, in Metaflow's topological order."""
    order = [n for n in graph.sorted_nodes if n in graph]
    if not order or graph.start_step is None:
        raise CompileError("the flow has no start step")
    for name in order:
        _check_supported(graph, graph[name])
    scopes = {name: _scope(graph, graph[name]) for name in order}
    conditions = _conditions(graph, order)
    shapes = {}
    for name in order:
        node = graph[name]
        shapes[name] = StepShape(
            name=name,
            transition=_transition(node),
            successors=tuple(dict.fromkeys(node.out_funcs)),
            inputs=_inputs(graph, node, conditions),
            scope=scopes[name],
            foreach_entry=_is_foreach_entry(graph, node),
            gang=node.parallel_step,
            recursive=node.type == "split-switch" and name in node.out_funcs,
            switch_cases=tuple(dict.fromkeys(node.out_funcs)) if node.type == "split-switch" else (),
            condition=tuple(sorted(conditions[name])),
            switch_parent=_switch_parent(graph, node),
        )
    heads = _cloned_by(shapes)
    return {name: replace(shape, cloned_by=heads.get(name)) for name, shape in shapes.items()}


def _cloned_by(shapes: dict[str, StepShape]) -> dict[str, str]:
    """Step -> the step whose pod clones it in a resumed run (plugins/resume_clone.py).

    Plain top-level steps after a step need no pod of their own to be cloned: the pod of the
    step heading them clones them after its own task, in order, and says which through one
    output each, which skips their DAG tasks. A plain step is one whose Argo node nobody reads:
    no outputs (not a foreach, switch or gang splitter, not a loop), no switch gating it,
    successors that take it as a plain parent, and parents that are its head or plain steps
    of the same head (a chain, a static split's branches, their join). A head is any
    top-level step that runs as a pod of its own (not a gang, not a loop); inside a foreach,
    the splitter's pod clones whole splits (resume_foreach.py)."""
    def plain(shape: StepShape) -> bool:
        return (shape.scope is None and not shape.gang and not shape.recursive and not shape.condition
                and shape.transition in (ir.Transition.LINEAR, ir.Transition.SPLIT, ir.Transition.END)
                and type(shape.inputs) is ir.FromParents
                and all(type(shapes[s].inputs) is ir.FromParents and not shapes[s].condition
                        for s in shape.successors))

    heads: dict[str, str] = {}
    for name, shape in shapes.items():  # topological: a parent's head is known before its child's
        if not plain(shape):
            continue
        parents = [shapes[p] for p in shape.inputs.parents]
        if any(p.scope is not None or p.gang or p.recursive for p in parents):
            continue
        parent_heads = {heads.get(p.name, p.name) for p in parents}
        if len(parent_heads) == 1:
            heads[name] = parent_heads.pop()
    return heads


def _transition(node) -> ir.Transition:
    if node.type == "split":
        return ir.Transition.SPLIT
    if node.type == "foreach":
        return ir.Transition.PARALLEL if node.parallel_foreach else ir.Transition.FOREACH
    if node.type == "split-switch":
        return ir.Transition.SWITCH
    if not node.out_funcs:
        return ir.Transition.END
    return ir.Transition.LINEAR


def _parents(node) -> list[str]:
    """In-edges, without a recursive step's edge to itself."""
    return [p for p in node.in_funcs if p != node.name]


def _is_foreach_entry(graph, node) -> bool:
    parents = _parents(node)
    return (
        len(parents) == 1
        and graph[parents[0]].type == "foreach"
        and not graph[parents[0]].parallel_foreach
    )


def _scope(graph, node) -> str | None:
    """The innermost (non-parallel) foreach whose body contains this step."""
    for parent in reversed(node.split_parents):
        split = graph[parent]
        if split.type == "foreach" and not split.parallel_foreach and split.matching_join != node.name:
            return parent
    return None


def _switch_parent(graph, node) -> str | None:
    """The switch that is this step's only parent (its choice alone gates the step)."""
    parents = _parents(node)
    if len(parents) == 1 and graph[parents[0]].type == "split-switch":
        return parents[0]
    return None


def _conditions(graph, order: list[str]) -> dict[str, Condition]:
    """Which switch choices must hold for each step to run (in its own scope).

    A switch's successor adds (switch, successor); a step with several parents runs
    when any of them did, so it keeps only the choices all its parents share.
    """
    conditions: dict[str, Condition] = {}
    for name in order:
        node = graph[name]
        parents = [p for p in _parents(node) if p in conditions]
        if not parents or _is_foreach_entry(graph, node):
            conditions[name] = frozenset()
            continue
        inherited = []
        for parent in parents:
            cond = conditions[parent]
            if graph[parent].type == "split-switch":
                cond = cond | {(parent, name)}
            inherited.append(cond)
        conditions[name] = frozenset.intersection(*inherited)
    return conditions


def _inputs(graph, node, conditions) -> ir.InputSource:
    parents = _parents(node)
    if node.name == graph.start_step:
        return ir.FromParameters()
    if _is_foreach_entry(graph, node):
        return ir.FromCaller()
    if len(parents) == 1 and graph[parents[0]].parallel_step:
        gang = graph[parents[0]]
        return ir.Gang(splitter=_parents(gang)[0], step=gang.name, join=node.name)
    foreach = _closed_foreach(graph, node)
    if foreach is not None:
        return ir.FromForeach(splitter=foreach, body_last=tuple(parents))
    own = conditions[node.name]
    if any(_condition_seen_by(graph, p, node.name, conditions) != own for p in parents):
        return ir.FromBranches(parents=tuple(parents), rivals=_rivals(graph, node, parents))
    return ir.FromParents(parents=tuple(parents))


def _rivals(graph, node, parents) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """For each switch parent, its other successors: if one of them ran, the switch did
    not choose this step. This step waits for them, so none may come after it."""
    out = []
    for parent in parents:
        if graph[parent].type != "split-switch":
            continue
        others = tuple(s for s in dict.fromkeys(graph[parent].out_funcs) if s not in (parent, node.name))
        for other in others:
            if _is_ancestor(graph, node.name, other):
                raise CompileError(
                    "switch *%s* can choose this step or *%s*, which comes after it; mfargo cannot "
                    "tell which ran: add a step between *%s* and this step" % (parent, other, parent),
                    step=node.name,
                )
        if others:
            out.append((parent, others))
    return tuple(out)


def _condition_seen_by(graph, parent: str, child: str, conditions) -> Condition:
    cond = conditions[parent]
    if graph[parent].type == "split-switch":
        cond = cond | {(parent, child)}
    return cond


def _closed_foreach(graph, node) -> str | None:
    """The (non-parallel) foreach this step joins, if any."""
    for parent in reversed(node.split_parents):
        split = graph[parent]
        if split.type == "foreach" and split.matching_join == node.name:
            return None if split.parallel_foreach else parent
    return None


def _num_parallel(node):
    """``num_parallel`` as Metaflow's graph read it (an int), else its expression from the
    flow's source (Metaflow keeps only literals), else None."""
    if node.num_parallel:
        return node.num_parallel
    try:
        tree = ast.parse(Path(node.source_file).read_text())
    except (OSError, SyntaxError, ValueError, TypeError):
        return None
    for call in ast.walk(tree):
        if (isinstance(call, ast.Call) and call.lineno == node.tail_next_lineno
                and getattr(call.func, "attr", "") == "next"):
            for keyword in call.keywords:
                if keyword.arg == "num_parallel":
                    return keyword.value
    return None


def _check_supported(graph, node) -> None:
    """mfargo's own limits; Metaflow's linter has already checked the graph itself."""
    if node.type == "foreach" and node.parallel_foreach:
        rules.gang_size(node.name, _num_parallel(node))
    if node.type == "split-switch" and node.name in node.out_funcs and len(_parents(node)) != 1:
        raise CompileError(
            "a switch step that can choose itself needs exactly one parent (it has %s); "
            "add a step before it" % ", ".join(_parents(node)),
            step=node.name,
        )


def _is_ancestor(graph, candidate: str, of: str) -> bool:
    """Whether ``of`` is reachable from ``candidate`` (a switch's edge to itself aside)."""
    seen, stack = set(), [candidate]
    while stack:
        name = stack.pop()
        if name == of:
            return True
        if name in seen:
            continue
        seen.add(name)
        stack.extend(n for n in graph[name].out_funcs if n != name)
    return False
