"""A DAG task or a step: ``withParam`` fan-out into a TaskGroup, ``when``, arguments,
then the template.  Shared by :mod:`dag` and :mod:`steps`.
"""
from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from . import limits
from .expr import evaluate_when, format_value
from .model import BAD_PHASES, ERROR, SKIPPED, SUCCEEDED, WorkflowError, param_str
from .nodes import NODE_ERRORS, Node, error_text
from .outputs import fan_out_outputs
from .substitute import Scope

if TYPE_CHECKING:
    from .scheduler import Executor


class NullLock:
    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


async def gather_all(coros: list) -> list:
    """Run coroutines concurrently; if we are cancelled, cancel and await them all."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return await asyncio.gather(*tasks)
    finally:
        pending = [t for t in tasks if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


def expand_items(task: dict, scope: Scope) -> list[Any] | None:
    """The task's ``withParam`` items (at most limits.MAX_FANOUT), or None if it does not fan out."""
    if task.get("withParam") is None:
        return None
    raw = scope.substitute(param_str(task["withParam"]))
    try:
        items = json.loads(raw)
    except ValueError:
        items = None
    if not isinstance(items, list):
        raise WorkflowError(f"withParam value could not be parsed as a JSON list: {raw.strip()}")
    if len(items) > limits.MAX_FANOUT:
        raise WorkflowError(limits.over("withParam", len(items), limits.MAX_FANOUT, "items"))
    return items


def item_label(item: Any) -> str:
    if isinstance(item, (dict, list)):
        return json.dumps(item, separators=(",", ":"), sort_keys=True)
    return format_value(item)


async def run_task(ex: "Executor", parent: Node, task: dict, scope: Scope, base_name: str, display: str,
                   depth: int) -> Node:
    """A DAG task or a step: expansion, then one instance per item (or one)."""
    try:
        items = expand_items(task, scope)
    except NODE_ERRORS as e:
        return ex.settle(parent, base_name, display, task.get("template"), ERROR, error_text(e))
    if items is None:
        return await run_instance(ex, parent, task, scope, base_name, display, depth)
    group = ex.new_node(base_name, display, "TaskGroup", task.get("template"))
    parent.children.append(group.name)
    ex.start(group, announce=False)
    if not items:
        return ex.finish(group, SKIPPED, "Skipped, empty params")
    coros = [run_instance(ex, group, task, scope.with_item(item), f"{base_name}({i}:{item_label(item)})",
                          f"{display}({i}:{item_label(item)})", depth)
             for i, item in enumerate(items)]
    try:
        children = await gather_all(coros)
    except asyncio.CancelledError:
        ex.cancelled(group)
        raise
    phase = SUCCEEDED
    msg = ""
    for c in children:
        if c.phase in BAD_PHASES:
            phase, msg = c.phase, f"child '{c.display_name}' {c.phase.lower()}: {c.message}"
    group.outputs = fan_out_outputs([c.outputs for c in children])
    group.children = [c.name for c in children]
    return ex.finish(group, phase, msg)


def task_arguments(task: dict, scope: Scope) -> dict[str, str]:
    """The task's argument values (mfargo writes each as a ``value``)."""
    args: dict[str, str] = {}
    for p in (task.get("arguments") or {}).get("parameters") or []:
        if p.get("value") is None:
            raise WorkflowError(f"argument {p.get('name')!r} has no value")
        args[p["name"]] = scope.substitute(param_str(p["value"]))
    return args


async def run_instance(ex: "Executor", parent: Node, task: dict, scope: Scope, name: str, display: str,
                       depth: int) -> Node:
    """One (possibly fanned-out) instance: ``when``, arguments, then the template."""
    try:
        when = task.get("when")
        if when is not None and str(when).strip():
            text = scope.substitute(str(when))
            if not evaluate_when(text):
                return ex.settle(parent, name, display, task.get("template"), SKIPPED,
                                 f"when '{text}' evaluated false")
        tmpl_name = scope.substitute(str(task.get("template") or ""))
        args = task_arguments(task, scope)
    except NODE_ERRORS as e:
        return ex.settle(parent, name, display, task.get("template"), ERROR, error_text(e))
    node = await ex.run_template(name, display, tmpl_name, args, depth + 1)
    parent.children.append(node.name)
    return node
