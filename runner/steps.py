"""A steps template: groups run in order, a group's steps in parallel; a failed step
fails the template after its group; ``steps.<s>.*`` of earlier groups (mfargo's recursion)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .fanout import gather_all, run_task
from .model import BAD_PHASES, SUCCEEDED
from .nodes import Node, view
from .outputs import composite_outputs
from .substitute import Scope

if TYPE_CHECKING:
    from .scheduler import Executor


async def run_steps(ex: "Executor", node: Node, tmpl: dict, scope: Scope, depth: int) -> Node:
    groups = tmpl.get("steps") or []
    ex.start(node)
    finished: dict[str, Node] = {}
    for gi, group in enumerate(groups):
        gnode = ex.new_node(f"{node.name}[{gi}]", f"[{gi}]", "StepGroup", None)
        node.children.append(gnode.name)
        ex.start(gnode, announce=False)
        sscope = scope.child(steps={n: view(x) for n, x in finished.items()})
        coros = [run_task(ex, gnode, s, sscope, f"{gnode.name}.{s['name']}", s["name"], depth)
                 for s in group]
        results = await gather_all(coros)
        failed = None
        for s, r in zip(group, results):
            finished[s["name"]] = r
            if r.phase in BAD_PHASES:
                failed = failed or r
        if failed is not None:
            ex.finish(gnode, failed.phase, failed.message, announce=False)
            return ex.finish(node, failed.phase,
                             f"child '{failed.display_name}' {failed.phase.lower()}: {failed.message}")
        ex.finish(gnode, SUCCEEDED, announce=False)
    out_scope = scope.child(steps={n: view(x) for n, x in finished.items()})
    node.outputs = {"parameters": composite_outputs(tmpl, out_scope)}
    return ex.finish(node, SUCCEEDED)
