"""A DAG template: tasks start when the tasks they depend on have finished and their
``depends`` holds (else Omitted); ``tasks.<t>.*`` of *ancestor* tasks only (like Argo).

``failFast`` (default true): after an *unhandled* failure (no continueOn and no
dependant naming ``.Failed``/``.Errored``/``.AllFailed``/``.AnySucceeded`` or negating
the task) no new task starts; running ones finish; the DAG fails.  The final phase
follows Argo's target-task rule: a target (leaf, or ``dag.target``) fails the DAG if
its branch failed; an Omitted task inherits its parents' branch phase.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from . import depends as dep
from .fanout import limiter, run_task
from .model import BAD_PHASES, ERROR, OMITTED, SUCCEEDED, WorkflowError
from .nodes import Node, continues, view
from .outputs import composite_outputs
from .substitute import Scope

if TYPE_CHECKING:
    from .scheduler import Executor


def ancestors_of(name: str, deps: dict[str, list[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(deps[name])
    while stack:
        d = stack.pop()
        if d not in seen:
            seen.add(d)
            stack.extend(deps[d])
    return seen


def check_acyclic(deps: dict[str, list[str]]) -> None:
    state: dict[str, int] = {}

    def visit(n: str, path: list[str]) -> None:
        if state.get(n) == 2:
            return
        if state.get(n) == 1:
            raise WorkflowError("dependency cycle: " + " -> ".join(path + [n]))
        state[n] = 1
        for d in deps[n]:
            visit(d, path + [n])
        state[n] = 2

    for n in deps:
        visit(n, [])


def depends_trees(tasks: list[dict], by_name: dict[str, dict]) -> dict[str, Any]:
    """Each task's parsed ``depends`` (or legacy ``dependencies``); unknown names refused."""
    trees: dict[str, Any] = {}
    for t in tasks:
        d = t.get("depends")
        if d not in (None, "") and t.get("dependencies"):
            raise WorkflowError(f"task {t['name']!r}: cannot use both 'depends' and 'dependencies'")
        if d not in (None, ""):
            tree = dep.parse(str(d))
        elif t.get("dependencies"):
            tree = dep.from_dependencies(list(t["dependencies"]),
                                         {x: (by_name.get(x) or {}).get("continueOn") for x in t["dependencies"]})
        else:
            tree = None
        for ref in dep.task_names(tree):
            if ref not in by_name:
                raise WorkflowError(f"task {t['name']!r} depends on unknown task {ref!r}")
        trees[t["name"]] = tree
    return trees


async def run_dag(ex: "Executor", node: Node, tmpl: dict, scope: Scope, depth: int) -> Node:
    dag = tmpl["dag"]
    tasks = dag.get("tasks") or []
    by_name = {t["name"]: t for t in tasks}
    if len(by_name) != len(tasks):
        raise WorkflowError("duplicate task names in DAG")
    trees = depends_trees(tasks, by_name)
    deps = {n: dep.task_names(tr) for n, tr in trees.items()}
    check_acyclic(deps)
    ancestors = {n: ancestors_of(n, deps) for n in by_name}
    fail_fast = dag.get("failFast")
    fail_fast = True if fail_fast is None else str(fail_fast).lower() != "false"
    if dag.get("target"):
        targets = [x for x in str(scope.substitute(str(dag["target"]))).replace(",", " ").split() if x]
        for x in targets:
            if x not in by_name:
                raise WorkflowError(f"dag.target {x!r} is not a task")
    else:
        depended = {d for ds in deps.values() for d in ds}
        targets = [n for n in by_name if n not in depended]
    needed = set(by_name)
    if dag.get("target"):
        needed = set(targets)
        for x in targets:
            needed |= ancestors[x]
    slots = limiter(tmpl.get("parallelism"))
    ex.start(node)

    outcomes: dict[str, Node] = {}
    running: dict[asyncio.Task, str] = {}
    stopped: Node | None = None

    def handled(name: str, phase: str) -> bool:
        if continues(by_name[name], phase):
            return True
        return any(dep.handles_failure(trees[o], name) for o in by_name if o != name)

    def outcome(n: str) -> dep.TaskOutcome:
        x = outcomes[n]
        return dep.TaskOutcome(x.phase, x.children_phases)

    try:
        while True:
            progressed = True
            while progressed and stopped is None:
                progressed = False
                for t in tasks:
                    n = t["name"]
                    if n in outcomes or n in running.values() or n not in needed:
                        continue
                    if any(d not in outcomes for d in deps[n]):
                        continue
                    if dep.evaluate(trees[n], {d: outcome(d) for d in deps[n]}):
                        tscope = scope.child(tasks={a: view(outcomes[a]) for a in ancestors[n]})
                        coro = run_task(ex, node, t, tscope, f"{node.name}.{n}", n, depth, slots)
                        running[asyncio.ensure_future(coro)] = n
                    else:
                        outcomes[n] = ex.settle(node, f"{node.name}.{n}", n, t.get("template"), OMITTED,
                                                "omitted: depends condition not met")
                        progressed = True
            if not running:
                break
            done, _ = await asyncio.wait(list(running), return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                n = running.pop(fut)
                child = fut.result()
                outcomes[n] = child
                if (fail_fast and stopped is None and child.phase in BAD_PHASES
                        and not handled(n, child.phase)):
                    stopped = child
    finally:
        if running:
            for fut in running:
                fut.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    if stopped is not None:
        return ex.finish(node, stopped.phase,
                         f"child '{stopped.display_name}' {stopped.phase.lower()}: {stopped.message}")

    memo: dict[str, str | None] = {}

    def branch(n: str) -> str | None:
        if n in memo:
            return memo[n]
        x = outcomes.get(n)
        if x is None:
            result = None
        elif x.phase == OMITTED:
            parents = [branch(p) for p in deps[n]]
            bad = [p for p in parents if p in BAD_PHASES]
            result = bad[0] if bad else SUCCEEDED
        else:
            result = x.phase
        memo[n] = result
        return result

    for target in targets:
        bp = branch(target)
        if bp is None:
            return ex.finish(node, ERROR, f"task {target!r} never ran (its dependencies did not finish)")
        if bp in BAD_PHASES:
            if continues(by_name[target], bp):
                continue
            culprit = outcomes[target]
            return ex.finish(node, bp, f"child '{culprit.display_name}' {bp.lower()}"
                             + (f": {culprit.message}" if culprit.message else ""))
    out_scope = scope.child(tasks={n: view(x) for n, x in outcomes.items()})
    node.outputs = {"parameters": composite_outputs(tmpl, out_scope, ex.exports)}
    return ex.finish(node, SUCCEEDED)
