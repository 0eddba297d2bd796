"""A DAG template: tasks start when the tasks they depend on have finished and their
``depends`` holds (else Omitted); ``tasks.<t>.*`` of *ancestor* tasks only (like Argo).

After a failure the DAG keeps starting every task whose dependencies are met and
marks the rest Omitted (workflow/controller/dag.go: executeDAG walks every target on
each pass and assessDAGPhase reports Running while any started node is unfinished), and a task
whose ``depends`` is false is Omitted.  A task whose template is a ``daemon`` (mfargo's
run heartbeat) runs until everything else the DAG started has finished; then, as Argo
does, it is stopped (its pod killed) and Succeeded (runner/preflight.py: nothing may
depend on it).  The final phase follows Argo's target-task rule: a target (a leaf, in
name order) fails the DAG if its branch failed, the first such target giving the phase;
an Omitted task inherits its parents' branch phase.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from .expr import DEPENDS, depends_holds, depends_tasks, parse
from .fanout import run_task
from .model import BAD_PHASES, ERROR, OMITTED, SUCCEEDED
from .nodes import Node, view
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


DAEMON_STOPPED = "daemon stopped: the rest of its DAG has finished"


async def stop_daemons(ex: "Executor", dag_node: Node, running: dict[asyncio.Task, str],
                       by_name: dict[str, dict]) -> dict[str, Node]:
    """The DAG's daemons, once nothing else of it runs: each Succeeded, then its pod killed
    (finished first, so the cancellation does not mark it Failed). A daemon whose task had not
    begun yet (a DAG of nothing else) is settled Succeeded without a pod."""
    stopped = {}
    for n in running.values():
        daemon = ex.nodes.get(f"{dag_node.name}.{n}")
        if daemon is not None:
            stopped[n] = ex.finish(daemon, SUCCEEDED, DAEMON_STOPPED)
            dag_node.children.append(daemon.name)
    for fut in running:
        fut.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    for n in running.values():
        if n not in stopped:
            stopped[n] = ex.settle(dag_node, f"{dag_node.name}.{n}", n, by_name[n].get("template"), SUCCEEDED,
                                   DAEMON_STOPPED)
    running.clear()
    return stopped


async def run_dag(ex: "Executor", node: Node, tmpl: dict, scope: Scope, depth: int) -> Node:
    dag = tmpl["dag"]
    tasks = dag.get("tasks") or []
    by_name = {t["name"]: t for t in tasks}
    # (the preflight refused duplicate names, unknown dependencies and cycles)
    trees = {t["name"]: parse(str(t["depends"]), DEPENDS) if t.get("depends") else None for t in tasks}
    deps = {n: depends_tasks(tr) for n, tr in trees.items()}
    ancestors = {n: ancestors_of(n, deps) for n in by_name}
    # Argo's targets are the leaves in name order (dag.go: findLeafTaskNames sorts them),
    # and assessDAGPhase takes the first failed one's phase.
    depended = {d for ds in deps.values() for d in ds}
    targets = sorted(n for n in by_name if n not in depended)
    ex.start(node)

    outcomes: dict[str, Node] = {}
    running: dict[asyncio.Task, str] = {}

    try:
        while True:
            progressed = True
            while progressed:
                progressed = False
                for t in tasks:
                    n = t["name"]
                    if n in outcomes or n in running.values():
                        continue
                    if any(d not in outcomes for d in deps[n]):
                        continue
                    if depends_holds(trees[n], {d: outcomes[d].phase for d in deps[n]}):
                        tscope = scope.child(tasks={a: view(outcomes[a]) for a in ancestors[n]})
                        coro = run_task(ex, node, t, tscope, f"{node.name}.{n}", n, depth)
                        running[asyncio.ensure_future(coro)] = n
                    else:
                        outcomes[n] = ex.settle(node, f"{node.name}.{n}", n, t.get("template"), OMITTED,
                                                "omitted: depends condition not met")
                        progressed = True
            if not running:
                break
            if all(ex.is_daemon(by_name[n]) for n in running.values()):
                outcomes.update(await stop_daemons(ex, node, running, by_name))
                break
            done, _ = await asyncio.wait(list(running), return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                outcomes[running.pop(fut)] = fut.result()
    finally:
        if running:
            for fut in running:
                fut.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    memo: dict[str, tuple[str, Node] | None] = {}

    def branch(n: str) -> tuple[str, Node] | None:
        """The task's branch phase and the node it comes from: an Omitted task inherits
        a failed parent's (so the message names the task that failed)."""
        if n in memo:
            return memo[n]
        x = outcomes.get(n)
        if x is None:
            result = None
        elif x.phase == OMITTED:
            bad = [b for b in (branch(p) for p in deps[n]) if b is not None and b[0] in BAD_PHASES]
            result = bad[0] if bad else (SUCCEEDED, x)
        else:
            result = (x.phase, x)
        memo[n] = result
        return result

    for target in targets:
        b = branch(target)
        if b is None:
            return ex.finish(node, ERROR, f"task {target!r} never ran (its dependencies did not finish)")
        phase, culprit = b
        if phase in BAD_PHASES:
            return ex.finish(node, phase, f"child '{culprit.display_name}' {phase.lower()}"
                             + (f": {culprit.message}" if culprit.message else ""))
    out_scope = scope.child(tasks={n: view(x) for n, x in outcomes.items()})
    node.outputs = {"parameters": composite_outputs(tmpl, out_scope)}
    return ex.finish(node, SUCCEEDED)
