"""Node bookkeeping: Argo's node tree (names, phases, timestamps, children) and events.

One node per template invocation, named like Argo's (``wf.task``, ``wf.task(0:item)``,
``wf[0].step``, ``name(1)`` for retry attempts).  The rules that several walkers
share live here once: the node a task becomes when it never runs
(:meth:`NodeBook.settle`), and what ``tasks.<t>``/``steps.<s>`` expose (:func:`view`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from . import events as ev
from .expr import ExprError
from .model import (DONE_PHASES, FAILED, OMITTED, PENDING, RUNNING, SKIPPED, SUCCEEDED,
                    WorkflowError, node_id)
from .pod import PodError
from .jobset import JobSetError
from .substitute import SubstitutionError

# What a malformed or unsupported spec raises while a node is prepared: the node errors.
NODE_ERRORS = (WorkflowError, SubstitutionError, ExprError, PodError,
               JobSetError, ValueError, KeyError, TypeError, OSError)


def error_text(e: BaseException) -> str:
    """Node message for an exception; malformed specs (KeyError/TypeError) name the type."""
    if isinstance(e, (KeyError, TypeError, AttributeError)):
        return f"malformed template ({type(e).__name__}: {e})"
    return str(e)


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
    v: dict[str, Any] = {"status": node.phase}  # what mfargo's tags and expressions read
    # A node that never ran has no outputs (Argo docs, variables.md "Outputs of Skipped and
    # Omitted Nodes"): mfargo's guard reads them only of a task that Succeeded.
    if node.phase not in (SKIPPED, OMITTED) and (node.outputs or node.type in ("Pod", "TaskGroup")):
        v["outputs"] = {"parameters": dict(node.outputs.get("parameters") or {})}
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
               message: str) -> Node:
        """A task that never runs its template (when false, depends unmet, bad arguments):
        a node of type Skipped, already finished with ``phase``."""
        node = self.new_node(name, display, "Skipped", template)
        parent.children.append(node.name)
        self.start(node, announce=False)
        return self.finish(node, phase, message)

    def cancelled(self, node: Node) -> None:
        """The node's coroutine was cancelled (deadline, Ctrl-C): it failed with the reason."""
        if not node.done:
            if node.started_at is None:
                node.started_at = time.time()
            self.finish(node, FAILED, self.cancel_reason, announce=node.type not in ("Retry", "TaskGroup"))
