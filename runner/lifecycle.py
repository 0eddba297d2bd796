"""The workflow's life: entrypoint under the deadlines, then exit hooks.

Workflow ``activeDeadlineSeconds`` (running nodes fail, the exit handler still runs)
and the runner's hard ``timeout`` (exit handlers included); ``spec.hooks.exit`` /
``spec.onExit`` and expression hooks ``spec.hooks.<name>.expression`` (evaluated once,
after the workflow) with ``workflow.status``/``failures``/``duration``. As in Argo's
controller (operator.go, after ``executeWfLifeCycleHook``), only the exit handler's
outcome can turn a succeeded workflow Failed (or Error); an expression hook that fails
leaves the workflow's phase as it was.
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING

from . import events as ev
from .expr import format_value
from .model import BAD_PHASES, ERROR, FAILED, SUCCEEDED, WorkflowError, param_str, parse_int
from .model import rfc3339
from .nodes import NODE_ERRORS
from .substitute import Scope

if TYPE_CHECKING:
    from .scheduler import Executor


def failures_json(ex: "Executor") -> str:
    """``{{workflow.failures}}``: the failed pods, as Argo lists them."""
    out = []
    for n in ex.nodes.values():
        if n.phase in BAD_PHASES and n.type in ("Pod",):
            out.append({"displayName": n.display_name, "message": n.message,
                        "templateName": n.template_name, "phase": n.phase,
                        "podName": n.pod_name or "", "finishedAt": rfc3339(n.finished_at)})
    return json.dumps(out, separators=(",", ":"))


async def run_bounded(ex: "Executor", coro, until: float | None, attr: str):
    """Run ``coro`` as ``ex.<attr>`` (so terminate() can cancel it) until ``until``."""
    task = asyncio.ensure_future(coro)
    setattr(ex, attr, task)
    timeout = None if until is None else max(until - time.time(), 0.0)
    done, _ = await asyncio.wait({task}, timeout=timeout)
    expired = task not in done
    if expired:
        task.cancel()
    try:
        return await task, expired
    except asyncio.CancelledError:
        return None, expired


def hook_arguments(hook: dict, scope: Scope) -> dict[str, str]:
    return {p["name"]: scope.substitute(param_str(p.get("value")))
            for p in ((hook.get("arguments") or {}).get("parameters") or [])}


async def execute(ex: "Executor", hard_deadline: float | None = None) -> tuple[str, str]:
    """Run entrypoint then exit hooks; returns (workflow status, message)."""
    ex.terminated = False
    started = ex.started = time.time()
    ex.on_event(ev.Event(ev.WORKFLOW_STARTED, node=ex.name, message="Running",
                         data={"run_id": f"argo-{ex.name}"}))
    wf_deadline = ex.spec.get("activeDeadlineSeconds")
    until = started + float(parse_int(wf_deadline, "spec.activeDeadlineSeconds")) if wf_deadline else None
    if hard_deadline is not None:
        until = hard_deadline if until is None else min(until, hard_deadline)
    ex.cancel_reason = "Step exceeded its deadline"
    args = dict(ex.wf_vars["parameters"])
    entry, expired = await run_bounded(
        ex, ex.run_template(ex.name, ex.name, ex.spec["entrypoint"], args, 0), until, "_main")
    entry = entry or ex.nodes.get(ex.name)
    if ex.terminated:
        status, message = FAILED, ex.cancel_reason
    elif expired:
        status = FAILED
        message = ("Workflow timed out (runner --timeout)" if hard_deadline is not None and until == hard_deadline
                   else "Max duration limit exceeded (spec.activeDeadlineSeconds)")
    elif entry is None:
        status, message = ERROR, "entrypoint did not run"
    else:
        status, message = entry.phase, entry.message
    if status not in (SUCCEEDED, FAILED, ERROR):
        status = FAILED
    if not ex.terminated:
        status, message = await exit_hooks(ex, status, message, hard_deadline)
    ex.on_event(ev.Event(ev.WORKFLOW_FINISHED, node=ex.name, phase=status,
                         message=status + (f": {message}" if message and status != SUCCEEDED else "")))
    return status, message


# The exit handler's node (Argo names it <workflow>.onExit): the only hook whose outcome is the run's.
ON_EXIT = "onExit"


async def exit_hooks(ex: "Executor", status: str, message: str, hard_deadline: float | None) -> tuple[str, str]:
    ex.wf_vars["status"] = status
    ex.wf_vars["failures"] = failures_json(ex)
    ex.wf_vars["duration"] = format_value(round(time.time() - ex.started, 3))
    ex.cancel_reason = "exit handler exceeded the runner timeout"
    hooks = ex.spec.get("hooks") or {}
    runs: list[tuple[str, str, str, dict]] = []
    scope = Scope({"workflow": ex.wf_vars})
    try:
        exit_hook = hooks.get("exit")
        if exit_hook:
            if exit_hook.get("templateRef"):
                raise WorkflowError("hooks.exit.templateRef is not supported by the local runner")
            runs.append((f"{ex.name}.{ON_EXIT}", ON_EXIT, exit_hook["template"], hook_arguments(exit_hook, scope)))
        elif ex.spec.get("onExit"):
            runs.append((f"{ex.name}.{ON_EXIT}", ON_EXIT, ex.spec["onExit"], {}))
        for hname, hook in hooks.items():
            if hname == "exit" or not hook.get("expression"):
                continue
            if scope.evaluate(str(hook["expression"])) is True:
                runs.append((f"{ex.name}.hooks.{hname}", f"hooks.{hname}", hook["template"],
                             hook_arguments(hook, scope)))
    except NODE_ERRORS as e:
        return (FAILED if status == SUCCEEDED else status), f"{message}; exit hooks: {e}".lstrip("; ")
    for name, display, tmpl, args in runs:
        node, _ = await run_bounded(ex, ex.run_template(name, display, tmpl, args, 0), hard_deadline, "_exit")
        node = node or ex.nodes.get(name)
        if display == ON_EXIT and node is not None and node.phase in BAD_PHASES and status == SUCCEEDED:
            status, message = node.phase, f"{display} failed: {node.message}"
        if ex.terminated:
            break
    return status, message
