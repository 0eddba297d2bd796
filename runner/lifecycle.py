"""The workflow's life: entrypoint under the deadlines, then the workflow hooks.

Workflow ``activeDeadlineSeconds`` (running nodes fail, the hooks still run) and the
runner's hard ``timeout`` (hooks included). mfargo's hooks (@exit_hook, --notify-on-*)
are ``spec.hooks.<name>`` with an ``expression`` over ``workflow.status``, evaluated
once, after the workflow. As in Argo's controller (operator.go, after
``executeWfLifeCycleHook``), a hook that fails leaves the workflow's phase as it was.
"""
from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from . import events as ev
from .model import ERROR, FAILED, SUCCEEDED, parse_int
from .nodes import NODE_ERRORS
from .substitute import Scope

if TYPE_CHECKING:
    from .scheduler import Executor


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
        status, message = await workflow_hooks(ex, status, message, hard_deadline)
    ex.on_event(ev.Event(ev.WORKFLOW_FINISHED, node=ex.name, phase=status,
                         message=status + (f": {message}" if message and status != SUCCEEDED else "")))
    return status, message


async def workflow_hooks(ex: "Executor", status: str, message: str, hard_deadline: float | None) -> tuple[str, str]:
    """Run each ``spec.hooks`` entry whose expression holds now; the run's phase stays."""
    ex.wf_vars["status"] = status
    ex.cancel_reason = "workflow hook exceeded the runner timeout"
    scope = Scope({"workflow": ex.wf_vars})
    try:
        runs = [(hname, hook["template"]) for hname, hook in (ex.spec.get("hooks") or {}).items()
                if scope.evaluate(str(hook["expression"])) is True]
    except NODE_ERRORS as e:
        return (FAILED if status == SUCCEEDED else status), f"{message}; workflow hooks: {e}".lstrip("; ")
    for hname, tmpl in runs:
        await run_bounded(ex, ex.run_template(f"{ex.name}.hooks.{hname}", f"hooks.{hname}", tmpl, {}, 0),
                          hard_deadline, "_exit")
        if ex.terminated:
            break
    return status, message
