"""Walk a workflow the way Argo's controller does: one asyncio coroutine per node.

The :class:`Executor` owns the workflow-wide state (variables, nodes, pod slots) and
runs a template as a node: inputs, retries (:mod:`retry`), then the walker for the
template's kind, chosen from :data:`KINDS`.  Each kind lives in its own module:

* :mod:`leaf` - container/script pods, resource manifests, suspend;
* :mod:`dag` - DAG walk (depends, failFast, targets);  :mod:`steps` - step groups;
* :mod:`fanout` - a task/step: withItems/withParam, when, arguments;
* :mod:`nodes` - node bookkeeping and events;  :mod:`outputs` - output parameters;
* :mod:`lifecycle` - workflow deadline, termination, exit hooks.

``spec.parallelism`` bounds concurrently running pods (container/script/resource
steps); a dag/steps template's ``parallelism`` bounds its running children.
"""
from __future__ import annotations

import asyncio
from typing import Any

from . import dag, leaf, lifecycle, limits, steps
from . import events as ev
from .fanout import NullLock
from .jobset_controller import JobSetController
from .model import ERROR, WorkflowDoc, WorkflowError, param_str, parse_int, pod_name, rfc3339, template_type
from .nodes import NODE_ERRORS, Node, NodeBook, error_text
from .pod import PodRunner
from .retry import run_with_retries
from .substitute import Scope

MAX_DEPTH = limits.MAX_CALL_DEPTH
# template kind -> (node type, walker(executor, node, template, scope, depth))
KINDS = {
    "container": ("Pod", leaf.run_pod),
    "script": ("Pod", leaf.run_pod),
    "resource": ("Pod", leaf.run_resource_template),
    "suspend": ("Suspend", leaf.run_suspend),
    "dag": ("DAG", dag.run_dag),
    "steps": ("Steps", steps.run_steps),
}
POD_KINDS = ("container", "script", "resource")  # these get a pod name
LEAF_KINDS = ("container", "script", "resource", "suspend")  # spec.retryStrategy applies

__all__ = ["Executor", "Node"]


class Executor(NodeBook):
    """Runs one workflow object."""

    def __init__(self, doc: WorkflowDoc, *, name: str, namespace: str, uid: str, created: float,
                 parameters: dict[str, str], labels: dict[str, str], annotations: dict[str, str],
                 pods: PodRunner, jobsets: JobSetController, on_event: ev.EventCallback,
                 backoff_scale: float = 1.0, validate: bool = True):
        super().__init__(name, on_event)
        self.doc = doc
        self.spec = doc.spec
        self.namespace = namespace
        self.uid = uid
        self.pods = pods
        self.jobsets = jobsets
        self.backoff_scale = backoff_scale
        self.validate = validate
        par = self.spec.get("parallelism")
        self.pod_slots = asyncio.Semaphore(parse_int(par, "spec.parallelism")) if par else None
        self.wf_vars: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "creationTimestamp": rfc3339(created),
            "serviceAccountName": self.spec.get("serviceAccountName") or "default",
            "mainEntrypoint": self.spec["entrypoint"],
            "parameters": dict(parameters),
            "labels": dict(labels),
            "annotations": dict(annotations),
            "outputs": {"parameters": {}},
        }
        self.exports: dict[str, str] = self.wf_vars["outputs"]["parameters"]  # globalName -> value
        self.global_scope = Scope({"workflow": self.wf_vars})

    def pod_slot(self):
        """``spec.parallelism``: held while a pod/resource node runs."""
        return self.pod_slots if self.pod_slots is not None else NullLock()

    def default_outputs(self, template_name: str | None) -> dict[str, str]:
        """The ``valueFrom.default`` outputs a task that never ran exposes (Argo docs,
        variables.md "Outputs of Skipped and Omitted Nodes", v3.7.16/v4.0.7 and after)."""
        try:
            tmpl = self.doc.template(str(template_name))
        except (WorkflowError, KeyError, TypeError):
            return {}
        out = {}
        for p in (tmpl.get("outputs") or {}).get("parameters") or []:
            vf = p.get("valueFrom") or {}
            if vf.get("default") is not None:
                out[p["name"]] = param_str(vf["default"])
        return out

    def is_daemon(self, task: dict) -> bool:
        """Does the DAG task run a daemon template (preflight: a container nothing depends on)?"""
        try:
            return bool(self.doc.template(str(task.get("template"))).get("daemon"))
        except (WorkflowError, KeyError):
            return False

    def input_has_default(self, template_name: str, input_name: str) -> bool:
        try:
            tmpl = self.doc.template(template_name)
        except WorkflowError:
            return False
        return any(p.get("name") == input_name and (p.get("default") is not None or p.get("value") is not None)
                   for p in (tmpl.get("inputs") or {}).get("parameters") or [])

    def resolve_inputs(self, tmpl: dict, args: dict[str, str]) -> dict[str, str]:
        inputs = tmpl.get("inputs") or {}
        if inputs.get("artifacts"):
            raise WorkflowError("input artifacts are not supported by the local runner")
        out: dict[str, str] = {}
        for p in inputs.get("parameters") or []:
            name = p.get("name")
            if name in args:
                value = args[name]
            elif p.get("value") is not None:
                value = self.global_scope.substitute(param_str(p["value"]))
            elif p.get("default") is not None:
                value = self.global_scope.substitute(param_str(p["default"]))
            elif p.get("valueFrom"):
                raise WorkflowError(f"inputs.parameters.{name}: valueFrom is not supported by the local runner")
            else:
                raise WorkflowError(f"inputs.parameters.{name} was not supplied")
            enum = p.get("enum")
            if enum and value not in [param_str(e) for e in enum]:
                raise WorkflowError(f"inputs.parameters.{name}: {value!r} is not one of {enum}")
            out[name] = value
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
        if retry is None and kind in LEAF_KINDS:
            retry = self.spec.get("retryStrategy")
        try:
            if retry is not None:
                return await run_with_retries(self, node, tmpl, kind, retry, depth)
            return await self.run_once(node, tmpl, kind, None, depth)
        except asyncio.CancelledError:
            self.cancelled(node)
            raise

    def leaf_scope(self, node: Node, retries: int | None) -> Scope:
        data: dict[str, Any] = {"workflow": self.wf_vars, "inputs": {"parameters": node.inputs},
                                "node": {"name": node.name}}
        if retries is not None:
            data["retries"] = str(retries)
        if node.pod_name:
            data["pod"] = {"name": node.pod_name}
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
