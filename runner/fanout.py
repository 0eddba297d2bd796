"""A DAG task or a step: ``withItems``/``withParam`` fan-out into a
TaskGroup, ``when``, arguments, then the template.  Shared by :mod:`dag` and :mod:`steps`.
"""
from __future__ import annotations

import asyncio
import json
import re
from typing import TYPE_CHECKING, Any

from . import limits
from .expr import evaluate_when, format_value
from .hooks import run_with_hooks, task_hooks
from .model import BAD_PHASES, ERROR, FAILED, OMITTED, SKIPPED, SUCCEEDED, WorkflowError, param_str, parse_int
from .nodes import NODE_ERRORS, Node, error_text
from .outputs import fan_out_outputs
from .substitute import Scope, SubstitutionError

if TYPE_CHECKING:
    from .scheduler import Executor


FAIL_FAST_MESSAGE = "template has failed or errored children and failFast enabled"


class NullLock:
    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


class Boundary:
    """A dag/steps template's hold on its children: ``parallelism`` bounds how many run at
    once; with the template's ``failFast`` too, no child starts after one has failed and
    the template fails (Argo: operator.go checkParallelism; e2e test
    expectedfailures/parallelism-step-fail-fast.yaml)."""

    def __init__(self, tmpl: dict):
        value = tmpl.get("parallelism")
        bounded = value not in (None, "", 0, "0")
        self.slots = asyncio.Semaphore(parse_int(value, "parallelism")) if bounded else NullLock()
        self.fail_fast = bounded and str(tmpl.get("failFast", "")).lower() == "true"
        self.stopped = False
        self.hook_error: Node | None = None  # a child's hook that ended Error fails the template

    def failure(self) -> tuple[str, str] | None:
        """(phase, message) if the template fails whatever its children did."""
        if self.stopped:
            return FAILED, FAIL_FAST_MESSAGE
        if self.hook_error is not None:
            n = self.hook_error
            return FAILED, f"hook '{n.display_name}' errored: {n.message}"
        return None

    def observe(self, node: Node) -> None:
        if self.fail_fast and node.phase in BAD_PHASES:
            self.stopped = True


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


def _bounded(field: str, items: list) -> list:
    if len(items) > limits.MAX_FANOUT:
        raise WorkflowError(limits.over(field, len(items), limits.MAX_FANOUT, "items"))
    return items


def expand_items(task: dict, scope: Scope) -> list[Any] | None:
    """The task's fan-out items (at most limits.MAX_FANOUT), or None if it does not fan out."""
    if task.get("withItems") is not None:
        items = scope.substitute_obj(task["withItems"])
        if not isinstance(items, list):
            raise WorkflowError("withItems must be a list")
        return _bounded("withItems", items)
    if task.get("withParam") is not None:
        raw = scope.substitute(param_str(task["withParam"]))
        try:
            items = json.loads(raw)
        except ValueError:
            raise WorkflowError(f"withParam value could not be parsed as a JSON list: {raw.strip()}") from None
        if not isinstance(items, list):
            raise WorkflowError(f"withParam value could not be parsed as a JSON list: {raw.strip()}")
        return _bounded("withParam", items)
    return None


def item_label(item: Any) -> str:
    if isinstance(item, (dict, list)):
        return json.dumps(item, separators=(",", ":"), sort_keys=True)
    return format_value(item)


async def run_task(ex: "Executor", parent: Node, task: dict, scope: Scope, base_name: str, display: str,
                   depth: int, boundary: Boundary) -> Node:
    """A DAG task or a step: expansion, then one instance per item (or one)."""
    try:
        items = expand_items(task, scope)
    except NODE_ERRORS as e:
        return ex.settle(parent, base_name, display, task.get("template"), ERROR, error_text(e))
    if items is None:
        return await run_instance(ex, parent, task, scope, base_name, display, depth, boundary)
    group = ex.new_node(base_name, display, "TaskGroup", task.get("template"))
    parent.children.append(group.name)
    ex.start(group, announce=False)
    if not items:
        return ex.finish(group, SKIPPED, "Skipped, empty params")
    coros = [run_instance(ex, group, task, scope.with_item(item), f"{base_name}({i}:{item_label(item)})",
                          f"{display}({i}:{item_label(item)})", depth, boundary)
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


_OUTPUT_REF = re.compile(r"\{\{\s*(tasks|steps)\.([^.}\s]+)\.outputs\.[^}]*\}\}")


def _absent_output(scope: Scope, text: str) -> bool:
    """Is ``text`` exactly one reference to an output of a Skipped/Omitted task/step?"""
    m = _OUTPUT_REF.fullmatch(text.strip())
    node = ((scope.data.get(m.group(1)) or {}).get(m.group(2)) or {}) if m else {}
    return node.get("status") in (SKIPPED, OMITTED)


def task_arguments(ex: "Executor", task: dict, scope: Scope, tmpl_name: str) -> dict[str, str]:
    """The task's argument values.  An argument that is solely a reference to an absent
    output (its producer was skipped) is left out when the consuming input has a default,
    so the default applies (Argo docs, variables.md "Outputs of Skipped and Omitted Nodes")."""
    arguments = task.get("arguments") or {}
    if arguments.get("artifacts"):
        raise WorkflowError("artifact arguments are not supported by the local runner")
    args: dict[str, str] = {}
    for p in arguments.get("parameters") or []:
        if p.get("value") is None:
            if p.get("valueFrom"):
                raise WorkflowError(f"argument {p.get('name')!r}: valueFrom is not supported locally")
            raise WorkflowError(f"argument {p.get('name')!r} has no value")
        try:
            args[p["name"]] = scope.substitute(param_str(p["value"]))
        except SubstitutionError:
            if not (_absent_output(scope, param_str(p["value"])) and ex.input_has_default(tmpl_name, p["name"])):
                raise
    return args


async def run_instance(ex: "Executor", parent: Node, task: dict, scope: Scope, name: str, display: str,
                       depth: int, boundary: Boundary) -> Node:
    """One (possibly fanned-out) instance: ``when``, arguments, then the template."""
    try:
        when = task.get("when")
        if when is not None and str(when).strip():
            text = scope.substitute(str(when))
            if not evaluate_when(text):
                return ex.settle(parent, name, display, task.get("template"), SKIPPED,
                                 f"when '{text}' evaluated false", ex.default_outputs(task.get("template")))
        if task.get("templateRef"):
            raise WorkflowError("templateRef is not supported by the local runner")
        hooks = task_hooks(task)
        if task.get("inline"):
            raise WorkflowError("inline templates are not supported by the local runner")
        tmpl_name = scope.substitute(str(task.get("template") or ""))
        args = task_arguments(ex, task, scope, tmpl_name)
    except NODE_ERRORS as e:
        return ex.settle(parent, name, display, task.get("template"), ERROR, error_text(e))
    async with boundary.slots:
        if boundary.stopped:
            return ex.settle(parent, name, display, tmpl_name, OMITTED, f"not started: {FAIL_FAST_MESSAGE}")
        if hooks:
            node, hook_error = await run_with_hooks(ex, parent, task, hooks, scope, name, display, tmpl_name,
                                                    args, depth)
            boundary.hook_error = boundary.hook_error or hook_error
        else:
            node = await ex.run_template(name, display, tmpl_name, args, depth + 1)
    parent.children.append(node.name)
    boundary.observe(node)
    return node
