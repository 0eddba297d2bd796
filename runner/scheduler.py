"""Walk a workflow the way Argo's controller does: one asyncio coroutine per node.

The :class:`Executor` owns the workflow-wide state (variables, nodes, pod slots) and
runs a template as a node: inputs, retries (:mod:`retry`), then the walker for the
template's kind, chosen from :data:`KINDS`.  Each kind lives in its own module:

* :mod:`leaf` - container pods, resource manifests;
* :mod:`dag` - DAG walk (depends, leaves);  :mod:`steps` - step groups;
* :mod:`fanout` - a task/step: withParam, when, arguments;
* :mod:`nodes` - node bookkeeping and events;  :mod:`outputs` - output parameters;
* :mod:`lifecycle` - workflow deadline, termination, workflow hooks.

``spec.parallelism`` bounds concurrently running pods (container/resource steps).
The preflight (:mod:`preflight`) has refused every field mfargo never writes.
"""
from __future__ import annotations

import asyncio
from typing import Any

from . import dag, leaf, lifecycle, limits, steps
from . import events as ev
from .fanout import NullLock
from .jobset import JobSetController
from .model import ERROR, WorkflowDoc, WorkflowError, parse_int, pod_name, template_type
from .nodes import NODE_ERRORS, Node, NodeBook, error_text
from .pod import PodRunner
from .retry import run_with_retries
from .substitute import Scope

MAX_DEPTH = limits.MAX_CALL_DEPTH
# template kind -> (node type, walker(executor, node, template, scope, depth))
KINDS = {
    "container": ("Pod", leaf.run_pod),
    "resource": ("Pod", leaf.run_resource_template),
    "dag": ("DAG", dag.run_dag),
    "steps": ("Steps", steps.run_steps),
}
POD_KINDS = ("container", "resource")  # these get a pod name

__all__ = ["Executor", "Node"]


class Executor(NodeBook):
    """Runs one workflow object."""

    def __init__(self, doc: WorkflowDoc, *, name: str, namespace: str, uid: str, parameters: dict[str, str],
                 pods: PodRunner, jobsets: JobSetController, on_event: ev.EventCallback,
                 backoff_scale: float = 1.0):
        super().__init__(name, on_event)
        self.doc = doc
        self.spec = doc.spec
        self.namespace = namespace
        self.uid = uid
        self.pods = pods
        self.jobsets = jobsets
        self.backoff_scale = backoff_scale
        par = self.spec.get("parallelism")
        self.pod_slots = asyncio.Semaphore(parse_int(par, "spec.parallelism")) if par else None
        # what mfargo's tags and expressions read of the workflow (preflight.SIMPLE_TAGS);
        # workflow.status is set for the hooks (lifecycle.py)
        self.wf_vars: dict[str, Any] = {"name": name, "namespace": namespace, "parameters": dict(parameters)}
        self.global_scope = Scope({"workflow": self.wf_vars})

    def pod_slot(self):
        """``spec.parallelism``: held while a pod/resource node runs."""
        return self.pod_slots if self.pod_slots is not None else NullLock()

    def is_daemon(self, task: dict) -> bool:
        """Does the DAG task run a daemon template (preflight: a container nothing depends on)?"""
        try:
            return bool(self.doc.template(str(task.get("template"))).get("daemon"))
        except (WorkflowError, KeyError):
            return False

    @staticmethod
    def resolve_inputs(tmpl: dict, args: dict[str, str]) -> dict[str, str]:
        """mfargo's inputs are names only: each comes from the caller's arguments."""
        out: dict[str, str] = {}
        for p in (tmpl.get("inputs") or {}).get("parameters") or []:
            if p.get("name") not in args:
                raise WorkflowError(f"inputs.parameters.{p.get('name')} was not supplied")
            out[p["name"]] = args[p["name"]]
        return out

    async def run_template(self, name: str, display: str, tmpl_name: str, args: dict[str, str],
                           depth: int) -> Node:
        """Execute template ``tmpl_name`` as node ``name`` (with retries if it has any)."""
        node = self.new_node(name, display, "Pod", tmpl_name)
        try:
            if depth > MAX_DEPTH:
                raise WorkflowError(f"maximum recursion depth exceeded ({MAX_DEPTH})")
            tmpl = self.doc.template(tmpl_name)
            kind = template_type(tmpl)
            if kind not in KINDS:
                raise WorkflowError(f"{kind} templates are not supported by the local runner")
            node.type = KINDS[kind][0]
            node.inputs = self.resolve_inputs(tmpl, args)
        except NODE_ERRORS as e:
            self.start(node, announce=False)
            return self.finish(node, ERROR, error_text(e))
        retry = tmpl.get("retryStrategy")
        try:
            if retry is not None:
                return await run_with_retries(self, node, tmpl, kind, retry, depth)
            return await self.run_once(node, tmpl, kind, None, depth)
        except asyncio.CancelledError:
            self.cancelled(node)
            raise

    def leaf_scope(self, node: Node, retries: int | None) -> Scope:
        data: dict[str, Any] = {"workflow": self.wf_vars, "inputs": {"parameters": node.inputs}}
        if retries is not None:
            data["retries"] = str(retries)
        return Scope(data)

    async def run_once(self, node: Node, tmpl: dict, kind: str, retries: int | None, depth: int) -> Node:
        """One attempt of the template as ``node``: the walker for its kind."""
        if kind in POD_KINDS:
            node.pod_name = pod_name(self.name, tmpl["name"], node.name)
        scope = self.leaf_scope(node, retries)
        try:
            await KINDS[kind][1](self, node, tmpl, scope, depth)
        except NODE_ERRORS as e:
            if node.started_at is None:
                self.start(node, announce=False)
            self.finish(node, ERROR, error_text(e))
        except asyncio.CancelledError:
            self.cancelled(node)
            raise
        return node

    def terminate(self, reason: str) -> None:
        """Stop now (Ctrl-C / SIGTERM / runner timeout): kill pods, skip exit handlers."""
        self.terminated = True
        self.cancel_reason = reason
        for t in (getattr(self, "_main", None), getattr(self, "_exit", None)):
            if t is not None and not t.done():
                t.cancel()

    async def execute(self, hard_deadline: float | None = None) -> tuple[str, str]:
        """Run entrypoint then exit hooks; returns (workflow status, message)."""
        return await lifecycle.execute(self, hard_deadline)
