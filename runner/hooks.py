"""Step/task-level lifecycle hooks: ``hooks.<name>`` (with ``expression``) and
``hooks.exit`` / the deprecated ``onExit``.

Argo (docs/lifecyclehook.md, "Template-level Lifecycle-Hook"): a hook runs at most
once per step or task (once per item of an expanded one), in parallel to it once its
expression holds; the exit hook starts when the step/task has finished and its
lifecycle hooks that started have finished; the steps/tasks that depend on it wait
for all its hooks.  A hook that ends ``Error`` fails the enclosing DAG/Steps template
(``continueOn`` does not cover it); one that ends ``Failed`` is ignored.

Here an expression hook is evaluated twice: when the step/task starts (its
``status`` is ``Running``) and when it has finished; it fires the first time it holds.
Hook nodes are named ``<node>.hooks.<name>`` and ``<node>.onExit``, as in Argo.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from .model import ERROR, RUNNING, WorkflowError, param_str
from .nodes import NODE_ERRORS, Node, error_text, view
from .substitute import Scope

if TYPE_CHECKING:
    from .scheduler import Executor

EXIT = "exit"


def task_hooks(task: dict) -> dict[str, dict]:
    """The step/task's hooks by name (``onExit: t`` is ``hooks.exit.template: t``)."""
    hooks = {k: v for k, v in (task.get("hooks") or {}).items() if isinstance(v, dict)}
    if task.get("onExit") and EXIT not in hooks:
        hooks[EXIT] = {"template": task["onExit"]}
    for name, hook in hooks.items():
        if hook.get("templateRef"):
            raise WorkflowError(f"hook {name!r}: templateRef is not supported by the local runner")
        if name != EXIT and not hook.get("expression"):
            raise WorkflowError(f"hook {name!r} needs an expression (only 'exit' runs unconditionally)")
    return hooks


def _scope_with(scope: Scope, task_name: str, node_view: dict[str, Any]) -> Scope:
    """``scope`` where ``tasks.<task>`` (DAG) or ``steps.<step>`` (steps) is this node."""
    key = "tasks" if "tasks" in scope.data else "steps"
    return scope.child(**{key: {**(scope.data.get(key) or {}), task_name: node_view}})


def _arguments(hook: dict, scope: Scope) -> dict[str, str]:
    return {p["name"]: scope.substitute(param_str(p.get("value")))
            for p in ((hook.get("arguments") or {}).get("parameters") or [])}


async def run_with_hooks(ex: "Executor", parent: Node, task: dict, hooks: dict[str, dict], scope: Scope,
                         name: str, display: str, tmpl_name: str, args: dict[str, str], depth: int) -> tuple[Node, Node | None]:
    """Run the step/task with its hooks; returns (its node, a hook node that errored or None)."""
    fired: dict[str, asyncio.Task] = {}
    pending = {k: h for k, h in hooks.items() if k != EXIT}

    def fire(hook_scope: Scope) -> None:
        for hname, hook in list(pending.items()):
            if hook_scope.evaluate(str(hook["expression"])) is True:
                del pending[hname]
                fired[hname] = asyncio.ensure_future(ex.run_template(
                    f"{name}.hooks.{hname}", f"{display}.hooks.{hname}", hook["template"],
                    _arguments(hook, hook_scope), depth + 1))

    starting = {"id": "", "status": RUNNING, "startedAt": "", "finishedAt": ""}
    errored: Node | None = None
    main = asyncio.ensure_future(ex.run_template(name, display, tmpl_name, args, depth + 1))
    try:
        try:
            fire(_scope_with(scope, task["name"], starting))
        except NODE_ERRORS as e:
            pending.clear()
            errored = ex.settle(parent, f"{name}.hooks", f"{display}.hooks", None, ERROR, error_text(e))
        node = await main
        final = _scope_with(scope, task["name"], view(node))
        try:
            fire(final)
            hook_nodes = list(await asyncio.gather(*fired.values())) if fired else []
            if EXIT in hooks:
                hook_nodes.append(await ex.run_template(f"{name}.onExit", f"{display}.onExit",
                                                        hooks[EXIT]["template"], _arguments(hooks[EXIT], final),
                                                        depth + 1))
        except NODE_ERRORS as e:
            return node, ex.settle(parent, f"{name}.hooks", f"{display}.hooks", None, ERROR, error_text(e))
    except asyncio.CancelledError:
        for t in [main, *fired.values()]:
            t.cancel()
        await asyncio.gather(main, *fired.values(), return_exceptions=True)
        raise
    parent.children.extend(n.name for n in hook_nodes)
    errored = errored or next((n for n in hook_nodes if n.phase == ERROR), None)
    return node, errored
