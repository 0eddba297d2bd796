"""Metaflow's own graph checks, with its loop check made linear.

Why: Metaflow's `check_for_acyclicity` walks every path from every step, copying the path
at each hop: its cost grows with steps³ on a chain and doubles with each static split
(4.3 CPU-s of a 900-step compile, more than everything mfargo does). Core's compiler pays
it too; mfargo runs the same checks in the same order, with that one replaced by a
depth-first search that visits each step and transition once. When the search finds a
loop, Metaflow's own check runs, so the error is Metaflow's message, word for word.
"""

from __future__ import annotations

import contextlib

from metaflow import lint


def has_loop(graph) -> bool:
    """A cycle of `self.next` transitions, ignoring a recursive switch's edge to itself
    (the one loop Metaflow allows: a `split-switch` step naming itself)."""
    nodes = {node.name: node for node in graph}
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for root in nodes:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(_successors(nodes[root])))]
        while stack:
            name, successors = stack[-1]
            nxt = next(successors, None)
            if nxt is None:
                state[name] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return True
            elif nxt not in state and nxt in nodes:
                state[nxt] = 1
                stack.append((nxt, iter(_successors(nodes[nxt]))))
    return False


def _successors(node) -> list[str]:
    return [n for n in node.out_funcs if not (node.type == "split-switch" and n == node.name)]


def _linear_acyclicity_check(original):
    def check(graph):
        if has_loop(graph):
            original(graph)  # raises LintWarn with Metaflow's message and line
    check.attrs = original.attrs
    check.__name__ = original.__name__
    return check


@contextlib.contextmanager
def linear_loop_check():
    """While active, Metaflow's linter runs the linear loop check in place of its own."""
    checks = getattr(lint.linter, "_checks", None)
    original = getattr(lint, "check_for_acyclicity", None)
    if checks is None or original is None or original not in checks:
        yield  # another Metaflow version: its own checks, unchanged
        return
    index = checks.index(original)
    checks[index] = _linear_acyclicity_check(original)
    try:
        yield
    finally:
        checks[index] = original
