"""Walk a workflow the way Argo's controller does: templates, DAGs, steps, retries.

One asyncio coroutine per node.  Nodes are named like Argo's (``wf.task``,
``wf.task(0:item)``, ``wf[0].step``, ``name(1)`` for retry attempts), and pod names
derive from them, so retries and fan-out children get distinct pods.

Semantics implemented (see the Argo docs on variables, enhanced depends, retries):

* DAG: ``depends`` / ``dependencies``; a task starts when every task it names has
  finished and its depends is true, else it is Omitted; ``when`` false -> Skipped;
  ``withItems`` / ``withParam`` / ``withSequence`` fan-out into a TaskGroup whose phase
  aggregates its children and whose output parameters are JSON lists;
  ``tasks.<t>.*`` variables of *ancestor* tasks only (like Argo).
  ``failFast`` (default true): after an *unhandled* failure (no continueOn and no
  dependant naming ``.Failed``/``.Errored``/``.AllFailed``/``.AnySucceeded`` or negating
  the task) no new task starts; running ones finish; the DAG fails.  The final phase
  follows Argo's target-task rule: a target (leaf, or ``dag.target``) fails the DAG if
  its branch failed; an Omitted task inherits its parents' branch phase.
* steps: groups run in order, a group's steps in parallel; a failed step without
  continueOn fails the template after its group; ``steps.<s>.*`` of earlier groups.
* retryStrategy: limit (none = unlimited, capped at 1000 attempts), retryPolicy
  Always/OnFailure/OnError (default OnFailure), backoff duration*factor^n with cap,
  maxDuration; every wait is multiplied by ``backoff_scale``; ``{{retries}}``.
* ``activeDeadlineSeconds`` on container/script/resource templates (and ``timeout``);
  workflow ``activeDeadlineSeconds`` (running nodes fail, exit handler still runs).
* ``spec.parallelism`` bounds concurrently running pods (container/script/resource
  steps); a dag/steps template's ``parallelism`` bounds its running children.
"""
from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from . import depends as dep
from . import events as ev
from .expr import ExprError, format_value
from .jobset import JobSetController
from .model import (BAD_PHASES, DONE_PHASES, ERROR, FAILED, OMITTED, PENDING, RUNNING, SKIPPED,
                    SUCCEEDED, WorkflowDoc, WorkflowError, node_id, param_str, parse_duration,
                    parse_int, pod_name, template_type)
from .pod import PodError, PodRunner, PodSpec
from .resource import ResourceError, run_resource
from .substitute import Scope, SubstitutionError
from .when import WhenError, evaluate_when

MAX_DEPTH = 200
UNLIMITED_RETRY_CAP = 1000
LEAF_TYPES = ("container", "script", "resource", "suspend")
NODE_ERRORS = (WorkflowError, SubstitutionError, ExprError, WhenError, dep.DependsError, PodError,
               ResourceError, ValueError, KeyError, TypeError, OSError)


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
    children_phases: list[str] | None = None  # TaskGroup: for .AnySucceeded / .AllFailed
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def done(self) -> bool:
        return self.phase in DONE_PHASES

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in (
            "id", "name", "display_name", "type", "template_name", "phase", "message", "inputs",
            "outputs", "pod_name", "pod_dir", "children", "started_at", "finished_at")}


def _now_rfc3339(t: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if t else ""


def aggregate_json(values: list[str]) -> str:
    """Argo's aggregation of fanned-out outputs: nested JSON if every value is a JSON
    list/object, otherwise a JSON list of strings."""
    parsed = []
    for v in values:
        try:
            x = json.loads(v)
        except (ValueError, TypeError):
            return json.dumps(values, separators=(",", ":"))
        if not isinstance(x, (list, dict)):
            return json.dumps(values, separators=(",", ":"))
        parsed.append(x)
    return json.dumps(parsed, separators=(",", ":"))


class Executor:
    """Runs one workflow object."""

    def __init__(self, doc: WorkflowDoc, *, name: str, namespace: str, uid: str, created: float,
                 parameters: dict[str, str], labels: dict[str, str], annotations: dict[str, str],
                 pods: PodRunner, jobsets: JobSetController, on_event: ev.EventCallback,
                 backoff_scale: float = 1.0, validate: bool = True):
        self.doc = doc
        self.spec = doc.spec
        self.name = name
        self.namespace = namespace
        self.uid = uid
        self.pods = pods
        self.jobsets = jobsets
        self.on_event = on_event
        self.backoff_scale = backoff_scale
        self.validate = validate
        self.nodes: dict[str, Node] = {}
        self.cancel_reason = "terminated"
        par = self.spec.get("parallelism")
        self.pod_slots = asyncio.Semaphore(parse_int(par, "spec.parallelism")) if par else None
        self.wf_vars: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created)),
            "serviceAccountName": self.spec.get("serviceAccountName") or "default",
            "mainEntrypoint": self.spec["entrypoint"],
            "parameters": dict(parameters),
            "labels": dict(labels),
            "annotations": dict(annotations),
            "outputs": {"parameters": {}},
        }
        self.global_scope = Scope({"workflow": self.wf_vars})

    # ------------------------------------------------------------------ nodes
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

    @staticmethod
    def view(node: Node) -> dict[str, Any]:
        """What ``tasks.<name>`` / ``steps.<name>`` expose to later nodes."""
        v: dict[str, Any] = {"id": node.id, "status": node.phase,
                             "startedAt": _now_rfc3339(node.started_at),
                             "finishedAt": _now_rfc3339(node.finished_at)}
        if node.phase not in (SKIPPED, OMITTED) and (node.outputs or node.type in ("Pod", "TaskGroup")):
            out = node.outputs
            v["outputs"] = {"parameters": dict(out.get("parameters") or {})}
            if "result" in out:
                v["outputs"]["result"] = out["result"]
            if "exitCode" in out:
                v["exitCode"] = out["exitCode"]
                v["outputs"]["exitCode"] = out["exitCode"]
        return v

    # ------------------------------------------------------------------ templates
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
            ttype = template_type(tmpl)
            node.type = {"dag": "DAG", "steps": "Steps", "suspend": "Suspend"}.get(ttype, "Pod")
            node.inputs = self.resolve_inputs(tmpl, args)
        except NODE_ERRORS as e:
            self.start(node, announce=False)
            return self.finish(node, ERROR, error_text(e))
        retry = tmpl.get("retryStrategy")
        if retry is None and ttype in LEAF_TYPES:
            retry = self.spec.get("retryStrategy")
        try:
            if retry is not None:
                return await self.run_with_retries(node, tmpl, ttype, retry, depth)
            return await self.run_once(node, tmpl, ttype, None, depth)
        except asyncio.CancelledError:
            self._cancelled(node)
            raise

    def _cancelled(self, node: Node) -> None:
        if not node.done:
            if node.started_at is None:
                node.started_at = time.time()
            self.finish(node, FAILED, self.cancel_reason, announce=node.type not in ("Retry", "TaskGroup"))

    async def run_with_retries(self, node: Node, tmpl: dict, ttype: str, retry: dict, depth: int) -> Node:
        inner_type = node.type
        node.type = "Retry"
        self.start(node, announce=False)
        try:
            retry = Scope({"workflow": self.wf_vars, "inputs": {"parameters": node.inputs}}).substitute_obj(
                retry, skip=("expression",))
            limit = parse_int(retry["limit"], "retryStrategy.limit") if retry.get("limit") is not None else None
            policy = retry.get("retryPolicy") or ("Always" if retry.get("expression") else "OnFailure")
            if policy not in ("Always", "OnFailure", "OnError", "OnTransientError"):
                raise WorkflowError(f"retryStrategy.retryPolicy {policy!r} is not valid")
            backoff = retry.get("backoff") or {}
            duration = parse_duration(backoff.get("duration")) if backoff.get("duration") else 0.0
            factor = parse_int(backoff["factor"], "backoff.factor") if backoff.get("factor") is not None else None
            cap = parse_duration(backoff["cap"]) if backoff.get("cap") else None
            max_duration = parse_duration(backoff["maxDuration"]) if backoff.get("maxDuration") else None
        except NODE_ERRORS as e:
            return self.finish(node, ERROR, error_text(e))
        first_start = time.time()
        attempt = 0
        while True:
            child = self.new_node(f"{node.name}({attempt})", f"{node.display_name}({attempt})",
                                  inner_type, node.template_name)
            child.inputs = node.inputs
            node.children.append(child.name)
            await self.run_once(child, tmpl, ttype, attempt, depth)
            node.pod_name, node.pod_dir, node.outputs = child.pod_name, child.pod_dir, child.outputs
            if child.phase not in BAD_PHASES:
                break
            message = child.message
            retryable = (policy == "Always" or (policy == "OnFailure" and child.phase == FAILED)
                         or (policy in ("OnError", "OnTransientError") and child.phase == ERROR))
            if retryable and retry.get("expression"):
                env = {"lastRetry": {"exitCode": str(child.outputs.get("exitCode", "-1")),
                                     "status": child.phase, "message": child.message,
                                     "duration": str(int((child.finished_at or 0) - (child.started_at or 0)))},
                       "workflow": self.wf_vars, "inputs": {"parameters": node.inputs}}
                expression = str(retry["expression"]).strip()
                if expression.startswith("{{=") and expression.endswith("}}"):
                    expression = expression[3:-2]
                try:
                    retryable = Scope(env).evaluate(expression) is True
                except SubstitutionError as e:
                    return self.finish(node, ERROR, error_text(e))
            if not retryable:
                return self.finish(node, child.phase, message, announce=False)
            if attempt >= (limit if limit is not None else UNLIMITED_RETRY_CAP):
                return self.finish(node, child.phase, f"{message} (no more retries left)", announce=False)
            wait = duration
            if factor and factor > 0:
                wait = duration * factor ** attempt
            if cap is not None:
                wait = min(wait, cap)
            if max_duration is not None and time.time() + wait > first_start + max_duration:
                return self.finish(node, child.phase, f"{message} (Max duration limit exceeded)", announce=False)
            attempt += 1
            self.on_event(ev.Event(ev.NODE_RETRY, node=node.display_name, attempt=attempt,
                                   message=f"after {child.phase.lower()} ({message}); "
                                           f"backoff {wait * self.backoff_scale:.2f}s"))
            await asyncio.sleep(wait * self.backoff_scale)
        return self.finish(node, child.phase, child.message, announce=False)

    def leaf_scope(self, node: Node, tmpl: dict, retries: int | None) -> Scope:
        data: dict[str, Any] = {"workflow": self.wf_vars, "inputs": {"parameters": node.inputs},
                                "node": {"name": node.name}}
        if retries is not None:
            data["retries"] = str(retries)
        if node.pod_name:
            data["pod"] = {"name": node.pod_name}
        return Scope(data)

    async def run_once(self, node: Node, tmpl: dict, ttype: str, retries: int | None, depth: int) -> Node:
        if ttype in ("container", "script", "resource"):
            node.pod_name = pod_name(self.name, tmpl["name"], node.name)
        scope = self.leaf_scope(node, tmpl, retries)
        try:
            if ttype in ("container", "script"):
                return await self.run_pod_template(node, tmpl, scope)
            if ttype == "resource":
                return await self.run_resource_template(node, tmpl, scope)
            if ttype == "dag":
                return await self.run_dag(node, tmpl, scope, depth)
            if ttype == "steps":
                return await self.run_steps(node, tmpl, scope, depth)
            if ttype == "suspend":
                return await self.run_suspend(node, tmpl, scope)
            raise WorkflowError(f"{ttype} templates are not supported by the local runner")
        except NODE_ERRORS as e:
            if node.started_at is None:
                self.start(node, announce=False)
            return self.finish(node, ERROR, error_text(e))
        except asyncio.CancelledError:
            self._cancelled(node)
            raise

    # ------------------------------------------------------------------ leaf templates
    def _leaf_fields(self, tmpl: dict, scope: Scope) -> dict:
        return scope.substitute_obj({k: v for k, v in tmpl.items()
                                     if k not in ("retryStrategy", "inputs", "name", "dag", "steps")})

    @staticmethod
    def _deadline(t: dict) -> float | None:
        values = []
        if t.get("activeDeadlineSeconds") is not None:
            values.append(float(parse_int(t["activeDeadlineSeconds"], "activeDeadlineSeconds")))
        if t.get("timeout"):
            values.append(parse_duration(t["timeout"]))
        return min(values) if values else None

    def _pod_metadata(self, node: Node, t: dict) -> tuple[dict[str, str], dict[str, str]]:
        pm = self.global_scope.substitute_obj(self.spec.get("podMetadata") or {})
        tm = t.get("metadata") or {}
        labels = {**(pm.get("labels") or {}), **(tm.get("labels") or {}),
                  "workflows.argoproj.io/workflow": self.name, "workflows.argoproj.io/completed": "false"}
        annotations = {**(pm.get("annotations") or {}), **(tm.get("annotations") or {}),
                       "workflows.argoproj.io/node-name": node.name, "workflows.argoproj.io/node-id": node.id}
        return ({k: param_str(v) for k, v in labels.items()}, {k: param_str(v) for k, v in annotations.items()})

    def _volumes(self, t: dict) -> list[dict]:
        vols = list(self.global_scope.substitute_obj(self.spec.get("volumes") or []))
        for vct in self.spec.get("volumeClaimTemplates") or []:
            vname = (vct.get("metadata") or {}).get("name")
            if vname:
                vols.append({"name": vname, "persistentVolumeClaim": {"claimName": f"{self.name}-{vname}"}})
        names = {v.get("name") for v in t.get("volumes") or []}
        return [v for v in vols if v.get("name") not in names] + list(t.get("volumes") or [])

    async def _slot(self):
        if self.pod_slots is None:
            return _NullLock()
        return self.pod_slots

    async def run_pod_template(self, node: Node, tmpl: dict, scope: Scope) -> Node:
        for unsupported in ("daemon", "podSpecPatch"):
            if tmpl.get(unsupported):
                raise WorkflowError(f"{unsupported} is not supported by the local runner")
        t = self._leaf_fields(tmpl, scope)
        if (t.get("outputs") or {}).get("artifacts"):
            raise WorkflowError("output artifacts are not supported by the local runner")
        is_script = t.get("script") is not None
        main = dict(t.get("script") if is_script else t["container"])
        source = main.pop("source", None) if is_script else None
        main["name"] = "main"
        labels, annotations = self._pod_metadata(node, t)
        pod = PodSpec(
            name=node.pod_name, namespace=self.namespace, uid=str(uuid.uuid4()), containers=[main],
            hostname=node.pod_name[:63], labels=labels, annotations=annotations,
            service_account=t.get("serviceAccountName") or self.spec.get("serviceAccountName") or "default",
            init_containers=list(t.get("initContainers") or []), sidecars=list(t.get("sidecars") or []),
            volumes=self._volumes(t), active_deadline=self._deadline(t),
            script=source if is_script else None,
            extra_env={"ARGO_POD_NAME": node.pod_name, "ARGO_CONTAINER_NAME": "main", "ARGO_NODE_ID": node.id},
            display=node.display_name)
        async with await self._slot():  # the slot is held until the node is finished
            self.start(node)
            res = await self.pods.run(pod)
            node.pod_dir = str(res.pod_dir)
            node.outputs = {"exitCode": str(res.exit_code) if res.exit_code is not None else "-1",
                            "result": res.stdout, "parameters": {}}
            ok = res.phase == SUCCEEDED
            try:
                node.outputs["parameters"] = self._container_outputs(t, res, strict=ok)
            except WorkflowError as e:
                if ok:
                    return self.finish(node, ERROR, error_text(e))
            if not ok:
                return self.finish(node, FAILED, res.message)
            return self.finish(node, SUCCEEDED)

    def _container_outputs(self, t: dict, res, strict: bool) -> dict[str, str]:
        params: dict[str, str] = {}
        for p in (t.get("outputs") or {}).get("parameters") or []:
            name = p["name"]
            vf = p.get("valueFrom") or {}
            if vf.get("path"):
                host = res.host_path(vf["path"])
                if host is not None and host.is_file():
                    value = host.read_text(errors="replace")
                    if value.endswith("\n"):
                        value = value[:-1]
                elif vf.get("default") is not None:
                    value = param_str(vf["default"])
                elif not strict:
                    continue
                else:
                    where = "" if host is not None else (
                        " (the path is not under a volumeMount or /tmp, so the local runner cannot see it)")
                    raise WorkflowError(f"failed to save output parameter {name!r}: open {vf['path']}: "
                                        f"no such file or directory{where}")
            elif vf.get("default") is not None:
                value = param_str(vf["default"])
            elif p.get("value") is not None:
                value = param_str(p["value"])
            elif strict:
                raise WorkflowError(f"output parameter {name!r}: container templates need valueFrom.path")
            else:
                continue
            params[name] = value
            if p.get("globalName"):
                self.wf_vars["outputs"]["parameters"][p["globalName"]] = value
        return params

    async def run_resource_template(self, node: Node, tmpl: dict, scope: Scope) -> Node:
        t = self._leaf_fields(tmpl, scope)
        owner = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": self.name,
                 "uid": self.uid, "controller": True, "blockOwnerDeletion": True}
        deadline = self._deadline(t)
        async with await self._slot():
            self.start(node)
            coro = run_resource(t["resource"], t.get("outputs"), self.jobsets, owner=owner,
                                on_event=self.on_event, node=node.display_name, do_validate=self.validate)
            try:
                if deadline is not None:
                    params = await asyncio.wait_for(coro, timeout=deadline)
                else:
                    params = await coro
            except asyncio.TimeoutError:
                message = "Pod was active on the node longer than the specified deadline"
                pending = dict(self.jobsets.pods.pending)
                if pending:  # say why: its gang never started
                    message += " (%d pod(s) never scheduled: %s)" % (len(pending), "; ".join(
                        "%s: %s" % kv for kv in sorted(pending.items())))
                return self.finish(node, FAILED, message)
            except ResourceError as e:
                return self.finish(node, FAILED, str(e))
            node.outputs = {"parameters": params}
            for p in (t.get("outputs") or {}).get("parameters") or []:
                if p.get("globalName") and p["name"] in params:
                    self.wf_vars["outputs"]["parameters"][p["globalName"]] = params[p["name"]]
            return self.finish(node, SUCCEEDED)

    async def run_suspend(self, node: Node, tmpl: dict, scope: Scope) -> Node:
        t = self._leaf_fields(tmpl, scope)
        duration = (t.get("suspend") or {}).get("duration")
        if duration is None or duration == "":
            raise WorkflowError("an indefinite suspend cannot be resumed in the local runner")
        self.start(node)
        await asyncio.sleep(parse_duration(duration))
        return self.finish(node, SUCCEEDED)

    # ------------------------------------------------------------------ shared task logic
    def _expand_items(self, task: dict, scope: Scope) -> list[Any] | None:
        if task.get("withItems") is not None:
            items = scope.substitute_obj(task["withItems"])
            if not isinstance(items, list):
                raise WorkflowError("withItems must be a list")
            return items
        if task.get("withParam") is not None:
            raw = scope.substitute(param_str(task["withParam"]))
            try:
                items = json.loads(raw)
            except ValueError:
                raise WorkflowError(f"withParam value could not be parsed as a JSON list: {raw.strip()}") from None
            if not isinstance(items, list):
                raise WorkflowError(f"withParam value could not be parsed as a JSON list: {raw.strip()}")
            return items
        if task.get("withSequence") is not None:
            seq = scope.substitute_obj(task["withSequence"])
            start = int(seq.get("start", 0) or 0)
            if seq.get("count") is not None:
                end = start + int(seq["count"]) - 1
            else:
                end = int(seq.get("end", 0) or 0)
            step = 1 if end >= start else -1
            fmt = seq.get("format")
            return [(fmt % i if fmt else str(i)) for i in range(start, end + step, step)]
        return None

    @staticmethod
    def _item_label(item: Any) -> str:
        if isinstance(item, (dict, list)):
            return json.dumps(item, separators=(",", ":"), sort_keys=True)
        return format_value(item)

    async def run_task(self, parent: Node, task: dict, scope: Scope, base_name: str, display: str,
                       depth: int, limiter) -> Node:
        """A DAG task or a step: expansion, when, arguments, then the template."""
        try:
            items = self._expand_items(task, scope)
        except NODE_ERRORS as e:
            node = self.new_node(base_name, display, "Skipped", task.get("template"))
            parent.children.append(node.name)
            self.start(node, announce=False)
            return self.finish(node, ERROR, error_text(e))
        if items is None:
            node = await self.run_instance(parent, task, scope, base_name, display, depth, limiter)
            return node
        group = self.new_node(base_name, display, "TaskGroup", task.get("template"))
        parent.children.append(group.name)
        self.start(group, announce=False)
        if not items:
            return self.finish(group, SKIPPED, "Skipped, empty params")
        coros = [self.run_instance(group, task, scope.with_item(item), f"{base_name}({i}:{self._item_label(item)})",
                                   f"{display}({i}:{self._item_label(item)})", depth, limiter)
                 for i, item in enumerate(items)]
        try:
            children = await gather_all(coros)
        except asyncio.CancelledError:
            self._cancelled(group)
            raise
        phase = SUCCEEDED
        msg = ""
        for c in children:
            if c.phase in BAD_PHASES:
                phase, msg = c.phase, f"child '{c.display_name}' {c.phase.lower()}: {c.message}"
        names: list[str] = []
        for c in children:
            for k in (c.outputs.get("parameters") or {}):
                if k not in names:
                    names.append(k)
        group.outputs = {"parameters": {
            k: aggregate_json([c.outputs["parameters"][k] for c in children
                               if k in (c.outputs.get("parameters") or {})]) for k in names},
            "result": aggregate_json([c.outputs["result"] for c in children if "result" in c.outputs])}
        group.children = [c.name for c in children]
        group.children_phases = [c.phase for c in children]
        return self.finish(group, phase, msg)

    async def run_instance(self, parent: Node, task: dict, scope: Scope, name: str, display: str,
                           depth: int, limiter) -> Node:
        try:
            when = task.get("when")
            if when is not None and str(when).strip():
                text = scope.substitute(str(when))
                if not evaluate_when(text):
                    node = self.new_node(name, display, "Skipped", task.get("template"))
                    parent.children.append(node.name)
                    self.start(node, announce=False)
                    return self.finish(node, SKIPPED, f"when '{text}' evaluated false")
            if task.get("templateRef"):
                raise WorkflowError("templateRef is not supported by the local runner")
            if task.get("onExit") or task.get("hooks"):
                raise WorkflowError("task-level onExit/hooks are not supported by the local runner")
            if task.get("inline"):
                raise WorkflowError("inline templates are not supported by the local runner")
            arguments = task.get("arguments") or {}
            if arguments.get("artifacts"):
                raise WorkflowError("artifact arguments are not supported by the local runner")
            args: dict[str, str] = {}
            for p in arguments.get("parameters") or []:
                if p.get("value") is None:
                    if p.get("valueFrom"):
                        raise WorkflowError(f"argument {p.get('name')!r}: valueFrom is not supported locally")
                    raise WorkflowError(f"argument {p.get('name')!r} has no value")
                args[p["name"]] = scope.substitute(param_str(p["value"]))
            tmpl_name = scope.substitute(str(task.get("template") or ""))
        except NODE_ERRORS as e:
            node = self.new_node(name, display, "Skipped", task.get("template"))
            parent.children.append(node.name)
            self.start(node, announce=False)
            return self.finish(node, ERROR, error_text(e))
        async with limiter:
            node_task = self.run_template(name, display, tmpl_name, args, depth + 1)
            node = await node_task
        parent.children.append(node.name)
        return node

    # ------------------------------------------------------------------ DAG
    async def run_dag(self, node: Node, tmpl: dict, scope: Scope, depth: int) -> Node:
        dag = tmpl["dag"]
        tasks = dag.get("tasks") or []
        by_name = {t["name"]: t for t in tasks}
        if len(by_name) != len(tasks):
            raise WorkflowError("duplicate task names in DAG")
        trees: dict[str, Any] = {}
        for t in tasks:
            d = t.get("depends")
            if d not in (None, "") and t.get("dependencies"):
                raise WorkflowError(f"task {t['name']!r}: cannot use both 'depends' and 'dependencies'")
            if d not in (None, ""):
                tree = dep.parse(str(d))
            elif t.get("dependencies"):
                tree = dep.from_dependencies(list(t["dependencies"]),
                                             {x: (by_name.get(x) or {}).get("continueOn") for x in t["dependencies"]})
            else:
                tree = None
            for ref in dep.task_names(tree):
                if ref not in by_name:
                    raise WorkflowError(f"task {t['name']!r} depends on unknown task {ref!r}")
            trees[t["name"]] = tree
        deps = {n: dep.task_names(tr) for n, tr in trees.items()}
        _check_acyclic(deps)
        ancestors = {n: _ancestors(n, deps) for n in by_name}
        fail_fast = dag.get("failFast")
        fail_fast = True if fail_fast is None else str(fail_fast).lower() != "false"
        if dag.get("target"):
            targets = [x for x in str(scope.substitute(str(dag["target"]))).replace(",", " ").split() if x]
            for x in targets:
                if x not in by_name:
                    raise WorkflowError(f"dag.target {x!r} is not a task")
        else:
            depended = {d for ds in deps.values() for d in ds}
            targets = [n for n in by_name if n not in depended]
        needed = set(by_name)
        if dag.get("target"):
            needed = set(targets)
            for x in targets:
                needed |= ancestors[x]
        limiter = _limiter(tmpl.get("parallelism"))
        self.start(node)

        outcomes: dict[str, Node] = {}
        running: dict[asyncio.Task, str] = {}
        stopped: Node | None = None

        def handled(name: str, phase: str) -> bool:
            co = by_name[name].get("continueOn") or {}
            if (phase == FAILED and co.get("failed")) or (phase == ERROR and co.get("error")):
                return True
            return any(dep.handles_failure(trees[o], name) for o in by_name if o != name)

        def outcome(n: str) -> dep.TaskOutcome:
            x = outcomes[n]
            return dep.TaskOutcome(x.phase, x.children_phases)

        try:
            while True:
                progressed = True
                while progressed and stopped is None:
                    progressed = False
                    for t in tasks:
                        n = t["name"]
                        if n in outcomes or n in running.values() or n not in needed:
                            continue
                        if any(d not in outcomes for d in deps[n]):
                            continue
                        if dep.evaluate(trees[n], {d: outcome(d) for d in deps[n]}):
                            tscope = scope.child(tasks={a: self.view(outcomes[a]) for a in ancestors[n]})
                            coro = self.run_task(node, t, tscope, f"{node.name}.{n}", n, depth, limiter)
                            running[asyncio.ensure_future(coro)] = n
                        else:
                            om = self.new_node(f"{node.name}.{n}", n, "Skipped", t.get("template"))
                            node.children.append(om.name)
                            self.start(om, announce=False)
                            outcomes[n] = self.finish(om, OMITTED, "omitted: depends condition not met")
                            progressed = True
                if not running:
                    break
                done, _ = await asyncio.wait(list(running), return_when=asyncio.FIRST_COMPLETED)
                for fut in done:
                    n = running.pop(fut)
                    child = fut.result()
                    outcomes[n] = child
                    if (fail_fast and stopped is None and child.phase in BAD_PHASES
                            and not handled(n, child.phase)):
                        stopped = child
        finally:
            if running:
                for fut in running:
                    fut.cancel()
                await asyncio.gather(*running, return_exceptions=True)

        if stopped is not None:
            return self.finish(node, stopped.phase,
                               f"child '{stopped.display_name}' {stopped.phase.lower()}: {stopped.message}")

        memo: dict[str, str | None] = {}

        def branch(n: str) -> str | None:
            if n in memo:
                return memo[n]
            x = outcomes.get(n)
            if x is None:
                result = None
            elif x.phase == OMITTED:
                parents = [branch(p) for p in deps[n]]
                bad = [p for p in parents if p in BAD_PHASES]
                result = bad[0] if bad else SUCCEEDED
            else:
                result = x.phase
            memo[n] = result
            return result

        for target in targets:
            bp = branch(target)
            if bp is None:
                return self.finish(node, ERROR, f"task {target!r} never ran (its dependencies did not finish)")
            if bp in BAD_PHASES:
                co = by_name[target].get("continueOn") or {}
                if (bp == FAILED and co.get("failed")) or (bp == ERROR and co.get("error")):
                    continue
                culprit = outcomes[target]
                return self.finish(node, bp, f"child '{culprit.display_name}' {bp.lower()}"
                                   + (f": {culprit.message}" if culprit.message else ""))
        out_scope = scope.child(tasks={n: self.view(x) for n, x in outcomes.items()})
        node.outputs = {"parameters": self._composite_outputs(tmpl, out_scope)}
        return self.finish(node, SUCCEEDED)

    def _composite_outputs(self, tmpl: dict, scope: Scope) -> dict[str, str]:
        params: dict[str, str] = {}
        for p in (tmpl.get("outputs") or {}).get("parameters") or []:
            vf = p.get("valueFrom") or {}
            try:
                if vf.get("parameter") is not None:
                    value = scope.substitute(param_str(vf["parameter"]))
                elif vf.get("expression") is not None:
                    value = format_value(scope.evaluate(str(vf["expression"])))
                elif p.get("value") is not None:
                    value = scope.substitute(param_str(p["value"]))
                elif vf.get("default") is not None:
                    value = param_str(vf["default"])
                else:
                    raise WorkflowError(f"output parameter {p['name']!r}: dag/steps templates need "
                                        "valueFrom.parameter or valueFrom.expression")
            except SubstitutionError:
                if vf.get("default") is None:
                    raise
                value = param_str(vf["default"])
            params[p["name"]] = value
            if p.get("globalName"):
                self.wf_vars["outputs"]["parameters"][p["globalName"]] = value
        return params

    # ------------------------------------------------------------------ steps
    async def run_steps(self, node: Node, tmpl: dict, scope: Scope, depth: int) -> Node:
        groups = tmpl.get("steps") or []
        limiter = _limiter(tmpl.get("parallelism"))
        self.start(node)
        finished: dict[str, Node] = {}
        for gi, group in enumerate(groups):
            if isinstance(group, dict):
                group = [group]
            gnode = self.new_node(f"{node.name}[{gi}]", f"[{gi}]", "StepGroup", None)
            node.children.append(gnode.name)
            self.start(gnode, announce=False)
            sscope = scope.child(steps={n: self.view(x) for n, x in finished.items()})
            coros = [self.run_task(gnode, s, sscope, f"{gnode.name}.{s['name']}", s["name"], depth, limiter)
                     for s in group]
            results = await gather_all(coros)
            failed = None
            for s, r in zip(group, results):
                finished[s["name"]] = r
                co = s.get("continueOn") or {}
                if r.phase in BAD_PHASES and not ((r.phase == FAILED and co.get("failed"))
                                                  or (r.phase == ERROR and co.get("error"))):
                    failed = failed or r
            if failed is not None:
                self.finish(gnode, failed.phase, failed.message, announce=False)
                return self.finish(node, failed.phase,
                                   f"child '{failed.display_name}' {failed.phase.lower()}: {failed.message}")
            self.finish(gnode, SUCCEEDED, announce=False)
        out_scope = scope.child(steps={n: self.view(x) for n, x in finished.items()})
        node.outputs = {"parameters": self._composite_outputs(tmpl, out_scope)}
        return self.finish(node, SUCCEEDED)

    # ------------------------------------------------------------------ workflow
    def failures_json(self) -> str:
        out = []
        for n in self.nodes.values():
            if n.phase in BAD_PHASES and n.type in ("Pod",):
                out.append({"displayName": n.display_name, "message": n.message,
                            "templateName": n.template_name, "phase": n.phase,
                            "podName": n.pod_name or "", "finishedAt": _now_rfc3339(n.finished_at)})
        return json.dumps(out, separators=(",", ":"))

    def terminate(self, reason: str) -> None:
        """Stop now (Ctrl-C / SIGTERM / runner timeout): kill pods, skip exit handlers."""
        self.terminated = True
        self.cancel_reason = reason
        for t in (getattr(self, "_main", None), getattr(self, "_exit", None)):
            if t is not None and not t.done():
                t.cancel()

    async def _run_bounded(self, coro, until: float | None, attr: str):
        task = asyncio.ensure_future(coro)
        setattr(self, attr, task)
        timeout = None if until is None else max(until - time.time(), 0.0)
        done, _ = await asyncio.wait({task}, timeout=timeout)
        expired = task not in done
        if expired:
            task.cancel()
        try:
            return await task, expired
        except asyncio.CancelledError:
            return None, expired

    async def execute(self, hard_deadline: float | None = None) -> tuple[str, str]:
        """Run entrypoint then exit hooks; returns (workflow status, message)."""
        self.terminated = False
        started = self.started = time.time()
        self.on_event(ev.Event(ev.WORKFLOW_STARTED, node=self.name, message="Running",
                               data={"run_id": f"argo-{self.name}"}))
        wf_deadline = self.spec.get("activeDeadlineSeconds")
        until = started + float(parse_int(wf_deadline, "spec.activeDeadlineSeconds")) if wf_deadline else None
        if hard_deadline is not None:
            until = hard_deadline if until is None else min(until, hard_deadline)
        deadline_reason = "Step exceeded its deadline"
        self.cancel_reason = deadline_reason
        args = dict(self.wf_vars["parameters"])
        entry, expired = await self._run_bounded(
            self.run_template(self.name, self.name, self.spec["entrypoint"], args, 0), until, "_main")
        entry = entry or self.nodes.get(self.name)
        if self.terminated:
            status, message = FAILED, self.cancel_reason
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
        if not self.terminated:
            status, message = await self._exit_hooks(status, message, hard_deadline)
        self.on_event(ev.Event(ev.WORKFLOW_FINISHED, node=self.name, phase=status,
                               message=status + (f": {message}" if message and status != SUCCEEDED else "")))
        return status, message

    async def _exit_hooks(self, status: str, message: str, hard_deadline: float | None) -> tuple[str, str]:
        self.wf_vars["status"] = status
        self.wf_vars["failures"] = self.failures_json()
        self.wf_vars["duration"] = format_value(round(time.time() - self.started, 3))
        self.cancel_reason = "exit handler exceeded the runner timeout"
        hooks = self.spec.get("hooks") or {}
        runs: list[tuple[str, str, str, dict]] = []
        scope = Scope({"workflow": self.wf_vars})
        try:
            exit_hook = hooks.get("exit")
            if exit_hook:
                if exit_hook.get("templateRef"):
                    raise WorkflowError("hooks.exit.templateRef is not supported by the local runner")
                args = {p["name"]: scope.substitute(param_str(p.get("value")))
                        for p in ((exit_hook.get("arguments") or {}).get("parameters") or [])}
                runs.append((f"{self.name}.onExit", "onExit", exit_hook["template"], args))
            elif self.spec.get("onExit"):
                runs.append((f"{self.name}.onExit", "onExit", self.spec["onExit"], {}))
            for hname, hook in hooks.items():
                if hname == "exit" or not hook.get("expression"):
                    continue
                if scope.evaluate(str(hook["expression"])) is True:
                    args = {p["name"]: scope.substitute(param_str(p.get("value")))
                            for p in ((hook.get("arguments") or {}).get("parameters") or [])}
                    runs.append((f"{self.name}.hooks.{hname}", f"hooks.{hname}", hook["template"], args))
        except NODE_ERRORS as e:
            return (FAILED if status == SUCCEEDED else status), f"{message}; exit hooks: {e}".lstrip("; ")
        for name, display, tmpl, args in runs:
            node, _ = await self._run_bounded(self.run_template(name, display, tmpl, args, 0), hard_deadline, "_exit")
            node = node or self.nodes.get(name)
            if node is not None and node.phase in BAD_PHASES and status == SUCCEEDED:
                status, message = FAILED, f"{display} failed: {node.message}"
            if self.terminated:
                break
        return status, message


class _NullLock:
    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


def _limiter(value: Any):
    if value in (None, "", 0, "0"):
        return _NullLock()
    return asyncio.Semaphore(parse_int(value, "parallelism"))


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


def _ancestors(name: str, deps: dict[str, list[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(deps[name])
    while stack:
        d = stack.pop()
        if d not in seen:
            seen.add(d)
            stack.extend(deps[d])
    return seen


def _check_acyclic(deps: dict[str, list[str]]) -> None:
    state: dict[str, int] = {}

    def visit(n: str, path: list[str]) -> None:
        if state.get(n) == 2:
            return
        if state.get(n) == 1:
            raise WorkflowError("dependency cycle: " + " -> ".join(path + [n]))
        state[n] = 1
        for d in deps[n]:
            visit(d, path + [n])
        state[n] = 2

    for n in deps:
        visit(n, [])
