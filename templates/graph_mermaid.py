"""The compiled DAG as a Mermaid flowchart, from the IR (what `create --graph` prints).

One node per step; a foreach body is a subgraph (nested bodies nest); a @parallel step is
one node standing for its JobSet gang (control x1, worker xN-1); switch edges are dotted
and labelled with the case; a recursive switch step has a self edge.
"""

from __future__ import annotations

from mfargo.compiler import ir


def node_id(step: str) -> str:
    # Mermaid reserves words such as `end`: prefix every id.
    return "s_" + step


def _label(text: str) -> str:
    return text.replace('"', "#quot;")


def _node(step: ir.Step) -> str:
    if step.gang:
        return '%s[["%s<br/>JobSet: control x1 / worker xN-1"]]' % (node_id(step.name), _label(step.name))
    if step.transition is ir.Transition.SWITCH:
        return '%s{"%s"}' % (node_id(step.name), _label(step.name))
    if step.transition is ir.Transition.END or isinstance(step.inputs, ir.FromParameters):
        return '%s(["%s"])' % (node_id(step.name), _label(step.name))
    return '%s["%s"]' % (node_id(step.name), _label(step.name))


def _edges(step: ir.Step) -> list[str]:
    src = node_id(step.name)
    out = []
    for succ in step.successors:
        dst = node_id(succ)
        if step.transition is ir.Transition.FOREACH:
            out.append('%s -->|"foreach"| %s' % (src, dst))
        elif step.transition is ir.Transition.PARALLEL:
            out.append('%s -->|"gang of N"| %s' % (src, dst))
        elif step.transition is ir.Transition.SWITCH:
            out.append('%s -.->|"%s"| %s' % (src, "again" if succ == step.name else "case", dst))
        else:
            out.append("%s --> %s" % (src, dst))
    return out


def render(wf: ir.Workflow) -> str:
    steps = list(wf.steps.values())
    # Foreach bodies become subgraphs; a gang's "scope" is the gang itself: one node.
    foreach_scopes = {s.name for s in steps if s.transition is ir.Transition.FOREACH}
    members: dict[str | None, list[ir.Step]] = {}
    for s in steps:
        scope = s.scope if s.scope in foreach_scopes else _outer_foreach(s.scope, wf, foreach_scopes)
        members.setdefault(scope, []).append(s)
    lines = ["flowchart TD"]

    def emit_scope(scope: str | None, indent: str) -> None:
        for s in members.get(scope, []):
            lines.append(indent + _node(s))
            if s.name in foreach_scopes and s.name in members:
                lines.append('%ssubgraph f_%s ["foreach: %s"]' % (indent, s.name, _label(s.name)))
                emit_scope(s.name, indent + "  ")
                lines.append(indent + "end")

    emit_scope(None, "  ")
    for s in steps:
        lines += ["  " + e for e in _edges(s)]
    return "\n".join(lines) + "\n"


def _outer_foreach(scope: str | None, wf: ir.Workflow, foreach_scopes: set[str]) -> str | None:
    while scope is not None and scope not in foreach_scopes:
        scope = wf.steps[scope].scope
    return scope
