"""retryStrategy: attempts as child nodes ``name(0)``, ``name(1)``... of a Retry node.

mfargo writes ``limit``, a constant ``backoff.duration``, and either ``retryPolicy: Always``
or an ``expression`` naming one exit code not to retry (with which Argo's default policy is
Always) (templates/common.py retry_strategy; the preflight refuses any other field, policy or
expression): a Failed or Errored attempt is
retried after the back-off, at most ``limit`` times, unless its main container exited with
that code. Every wait is multiplied by the runner's ``backoff_scale``.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from . import events as ev
from .model import BAD_PHASES, ERROR, parse_duration, parse_int
from .nodes import NODE_ERRORS, Node, error_text

if TYPE_CHECKING:
    from .scheduler import Executor


async def run_with_retries(ex: "Executor", node: Node, tmpl: dict, ttype: str, retry: dict, depth: int) -> Node:
    inner_type = node.type
    node.type = "Retry"
    ex.start(node, announce=False)
    try:
        limit = parse_int(retry.get("limit", 0), "retryStrategy.limit")
        final_code = retry["expression"].split('"')[1] if retry.get("expression") else None
        wait = parse_duration((retry.get("backoff") or {}).get("duration"))
    except NODE_ERRORS as e:
        return ex.finish(node, ERROR, error_text(e))
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
        if attempt >= limit:
            return ex.finish(node, child.phase, f"{child.message} (no more retries left)", announce=False)
        if final_code is not None and (child.outputs or {}).get("exitCode") == final_code:
            return ex.finish(node, child.phase, f"{child.message} (retryStrategy.expression: not retried)",
                             announce=False)
        attempt += 1
        ex.on_event(ev.Event(ev.NODE_RETRY, node=node.display_name, attempt=attempt,
                             message=f"after {child.phase.lower()} ({child.message}); "
                                     f"backoff {wait * ex.backoff_scale:.2f}s"))
        await asyncio.sleep(wait * ex.backoff_scale)
    return ex.finish(node, child.phase, child.message, announce=False)
