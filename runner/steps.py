"""A steps template: groups run in order, a group's steps in parallel; a failed step
without continueOn fails the template after its group; ``steps.<s>.*`` of earlier groups."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .fanout import Boundary, gather_all, run_task
from .model import BAD_PHASES, SUCCEEDED
from .nodes import Node, continues, view
from .outputs import composite_outputs
from .substitute import Scope

if TYPE_CHECKING:
    from .scheduler import Executor


async def run_steps(ex: "Executor", node: Node, tmpl: dict, scope: Scope, depth: int) -> Node:
    groups = tmpl.get("steps") or []
    boundary = Boundary(tmpl)
    ex.start(node)
    finished: dict[str, Node] = {}
    for gi, group in enumerate(groups):
        if isinstance(group, dict):
            group = [group]
        gnode = ex.new_node(f"{node.name}[{gi}]", f"[{gi}]", "StepGroup", None)
        node.children.append(gnode.name)
        ex.start(gnode, announce=False)
        sscope = scope.child(steps={n: view(x) for n, x in finished.items()})
        coros = [run_task(ex, gnode, s, sscope, f"{gnode.name}.{s['name']}", s["name"], depth, boundary)
                 for s in group]
        results = await gather_all(coros)
        failed = None
        for s, r in zip(group, results):
            finished[s["name"]] = r
            if r.phase in BAD_PHASES and not continues(s, r.phase):
                failed = failed or r
        if boundary.failure():
            ex.finish(gnode, *boundary.failure(), announce=False)
            return ex.finish(node, *boundary.failure())
        if failed is not None:
            ex.finish(gnode, failed.phase, failed.message, announce=False)
            return ex.finish(node, failed.phase,
                             f"child '{failed.display_name}' {failed.phase.lower()}: {failed.message}")
        ex.finish(gnode, SUCCEEDED, announce=False)
    out_scope = scope.child(steps={n: view(x) for n, x in finished.items()})
    node.outputs = {"parameters": composite_outputs(tmpl, out_scope, ex.exports)}
    return ex.finish(node, SUCCEEDED)
