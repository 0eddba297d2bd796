"""retryStrategy: attempts as child nodes ``name(0)``, ``name(1)``... of a Retry node.

Argo's rules (docs: "Retries", fields.md#retrystrategy): ``limit`` (none = unlimited,
capped here at 1000 attempts), ``retryPolicy`` Always/OnFailure/OnError/OnTransientError
(default OnFailure), back-off ``duration * factor^n`` bounded by ``cap`` and
``maxDuration``.  Every wait is multiplied by the runner's ``backoff_scale``.  mfargo writes
no ``expression`` (the preflight refuses one).
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import events as ev
from .model import BAD_PHASES, ERROR, FAILED, WorkflowError, parse_duration, parse_int
from .nodes import NODE_ERRORS, Node, error_text
from .substitute import Scope

if TYPE_CHECKING:
    from .scheduler import Executor

UNLIMITED_RETRY_CAP = 1000
POLICIES = ("Always", "OnFailure", "OnError", "OnTransientError")


@dataclass
class RetryPolicy:
    limit: int | None
    policy: str
    duration: float
    factor: int | None
    cap: float | None
    max_duration: float | None

    @classmethod
    def parse(cls, retry: dict, scope: Scope) -> "RetryPolicy":
        retry = scope.substitute_obj(retry)
        limit = parse_int(retry["limit"], "retryStrategy.limit") if retry.get("limit") is not None else None
        policy = retry.get("retryPolicy") or "OnFailure"
        if policy not in POLICIES:
            raise WorkflowError(f"retryStrategy.retryPolicy {policy!r} is not valid")
        backoff = retry.get("backoff") or {}
        return cls(
            limit=limit, policy=policy,
            duration=parse_duration(backoff.get("duration")) if backoff.get("duration") else 0.0,
            factor=parse_int(backoff["factor"], "backoff.factor") if backoff.get("factor") is not None else None,
            cap=parse_duration(backoff["cap"]) if backoff.get("cap") else None,
            max_duration=parse_duration(backoff["maxDuration"]) if backoff.get("maxDuration") else None)

    def matches(self, phase: str) -> bool:
        return (self.policy == "Always" or (self.policy == "OnFailure" and phase == FAILED)
                or (self.policy in ("OnError", "OnTransientError") and phase == ERROR))

    def wait(self, attempt: int) -> float:
        wait = self.duration
        if self.factor and self.factor > 0:
            wait = self.duration * self.factor ** attempt
        return wait if self.cap is None else min(wait, self.cap)


async def run_with_retries(ex: "Executor", node: Node, tmpl: dict, ttype: str, retry: dict, depth: int) -> Node:
    inner_type = node.type
    node.type = "Retry"
    ex.start(node, announce=False)
    scope_data = {"workflow": ex.wf_vars, "inputs": {"parameters": node.inputs}}
    try:
        policy = RetryPolicy.parse(retry, Scope(scope_data))
    except NODE_ERRORS as e:
        return ex.finish(node, ERROR, error_text(e))
    first_start = time.time()
    attempt = 0
    while True:
        child = ex.new_node(f"{node.name}({attempt})", f"{node.display_name}({attempt})",
                            inner_type, node.template_name)
        child.inputs = node.inputs
        node.children.append(child.name)
        await ex.run_once(child, tmpl, ttype, attempt, depth)
        node.pod_name, node.pod_dir, node.outputs = child.pod_name, child.pod_dir, child.outputs
        if child.phase not in BAD_PHASES:
            break
        message = child.message
        retryable = policy.matches(child.phase)
        if not retryable:
            return ex.finish(node, child.phase, message, announce=False)
        if attempt >= (policy.limit if policy.limit is not None else UNLIMITED_RETRY_CAP):
            return ex.finish(node, child.phase, f"{message} (no more retries left)", announce=False)
        wait = policy.wait(attempt)
        if policy.max_duration is not None and time.time() + wait > first_start + policy.max_duration:
            return ex.finish(node, child.phase, f"{message} (Max duration limit exceeded)", announce=False)
        attempt += 1
        ex.on_event(ev.Event(ev.NODE_RETRY, node=node.display_name, attempt=attempt,
                             message=f"after {child.phase.lower()} ({message}); "
                                     f"backoff {wait * ex.backoff_scale:.2f}s"))
        await asyncio.sleep(wait * ex.backoff_scale)
    return ex.finish(node, child.phase, child.message, announce=False)
