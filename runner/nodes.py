"""Node bookkeeping: Argo's node tree (names, phases, timestamps, children) and events.

One node per template invocation, named like Argo's (``wf.task``, ``wf.task(0:item)``,
``wf[0].step``, ``name(1)`` for retry attempts).  The rules that several walkers
share live here once: continueOn, the node a task becomes when it never runs
(:meth:`NodeBook.settle`), and what ``tasks.<t>``/``steps.<s>`` expose (:func:`view`).
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

from . import events as ev
from .expr import ExprError
from .model import (DONE_PHASES, ERROR, FAILED, OMITTED, PENDING, RUNNING, SKIPPED, SUCCEEDED,
                    WorkflowError, node_id, rfc3339)
from .pod import PodError
from .resource import ResourceError
from .substitute import SubstitutionError

# What a malformed or unsupported spec raises while a node is prepared: the node errors.
NODE_ERRORS = (WorkflowError, SubstitutionError, ExprError, PodError,
               ResourceError, ValueError, KeyError, TypeError, OSError)


def error_text(e: BaseException) -> str:
    """Node message for an exception; malformed specs (KeyError/TypeError) name the type."""
    if isinstance(e, (KeyError, TypeError, AttributeError)):
        return f"malformed template ({type(e).__name__}: {e})"
    return str(e)


def continues(task: dict, phase: str) -> bool:
    """Argo's ``continueOn``: a Failed/Errored task that does not fail its parent."""
    co = task.get("continueOn") or {}
    return bool((phase == FAILED and co.get("failed")) or (phase == ERROR and co.get("error")))


@dataclass
class Node:
    id: str
    name: str
    display_name: str
    type: str
    template_name: str | None = None
    phase: str = PENDING
    message: str = ""
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    pod_name: str | None = None
    pod_dir: str | None = None
    children: list[str] = field(default_factory=list)
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def done(self) -> bool:
        return self.phase in DONE_PHASES

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in (
            "id", "name", "display_name", "type", "template_name", "phase", "message", "inputs",
            "outputs", "pod_name", "pod_dir", "children", "started_at", "finished_at")}


def view(node: Node) -> dict[str, Any]:
    """What ``tasks.<name>`` / ``steps.<name>`` expose to later nodes."""
    v: dict[str, Any] = {"id": node.id, "status": node.phase,
                         "startedAt": rfc3339(node.started_at), "finishedAt": rfc3339(node.finished_at)}
    if node.phase in (SKIPPED, OMITTED):
        # A node that never ran exposes its template's ``valueFrom.default`` outputs; others
        # are absent (Argo docs, variables.md "Outputs of Skipped and Omitted Nodes").
        if node.outputs.get("parameters"):
            v["outputs"] = {"parameters": dict(node.outputs["parameters"])}
    elif node.outputs or node.type in ("Pod", "TaskGroup"):
        out = node.outputs
        v["outputs"] = {"parameters": copy.copy(out.get("parameters") or {})}
        if "result" in out:
            v["outputs"]["result"] = out["result"]
        if "exitCode" in out:
            v["exitCode"] = out["exitCode"]
            v["outputs"]["exitCode"] = out["exitCode"]
    return v


class NodeBook:
    """The workflow's nodes by name, and the events their changes emit."""

    def __init__(self, workflow_name: str, on_event: ev.EventCallback):
        self.name = workflow_name
        self.on_event = on_event
        self.nodes: dict[str, Node] = {}
        self.cancel_reason = "terminated"

    def new_node(self, name: str, display: str, ntype: str, template: str | None = None) -> Node:
        node = Node(node_id(self.name, name), name, display, ntype, template)
        if name in self.nodes:  # cannot happen with Argo naming; keep both visible
            node.name = f"{name}#{len(self.nodes)}"
        self.nodes[node.name] = node
        return node

    def start(self, node: Node, announce: bool = True) -> None:
        node.phase = RUNNING
        node.started_at = time.time()
        if announce:
            self.on_event(ev.Event(ev.NODE_STARTED, node=node.display_name, pod=node.pod_name or "",
                                   data={"template": node.template_name, "type": node.type}))

    def finish(self, node: Node, phase: str, message: str = "", announce: bool = True) -> Node:
        node.phase = phase
        node.message = message
        node.finished_at = time.time()
        if node.started_at is None:
            node.started_at = node.finished_at
        if announce:
            if phase == SUCCEEDED:
                kind = ev.NODE_SUCCEEDED
            elif phase in (SKIPPED, OMITTED):
                kind = ev.NODE_SKIPPED
            else:
                kind = ev.NODE_FAILED
            self.on_event(ev.Event(kind, node=node.display_name, phase=phase, message=message,
                                   pod=node.pod_name or "", data={"type": node.type}))
        return node

    def settle(self, parent: Node, name: str, display: str, template: str | None, phase: str,
               message: str, outputs: dict[str, str] | None = None) -> Node:
        """A task that never runs its template (when false, depends unmet, bad arguments):
        a node of type Skipped, already finished with ``phase`` (``outputs``: its defaults)."""
        node = self.new_node(name, display, "Skipped", template)
        if outputs:
            node.outputs = {"parameters": dict(outputs)}
        parent.children.append(node.name)
        self.start(node, announce=False)
        return self.finish(node, phase, message)

    def cancelled(self, node: Node) -> None:
        """The node's coroutine was cancelled (deadline, Ctrl-C): it failed with the reason."""
        if not node.done:
            if node.started_at is None:
                node.started_at = time.time()
            self.finish(node, FAILED, self.cancel_reason, announce=node.type not in ("Retry", "TaskGroup"))
