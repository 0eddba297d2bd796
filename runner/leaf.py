"""Leaf templates: container (one pod), resource (a JobSet manifest).

Each ``run_*`` has the dispatch signature ``(executor, node, template, scope, depth)``
and holds a ``spec.parallelism`` slot while its node runs.
"""
from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

from .model import ERROR, FAILED, SUCCEEDED, WorkflowError, param_str, parse_int
from .nodes import Node, error_text
from .outputs import container_outputs
from .jobset import JobSetError, run_resource
from .pod import PodSpec
from .substitute import Scope

if TYPE_CHECKING:
    from .scheduler import Executor

# not substituted with the pod: inputs/retries are not fields
TEMPLATE_ONLY_KEYS = ("retryStrategy", "inputs", "name", "dag", "steps")


def leaf_fields(tmpl: dict, scope: Scope) -> dict:
    """The template with every run-time field substituted (inputs/retries are not fields)."""
    return scope.substitute_obj({k: v for k, v in tmpl.items() if k not in TEMPLATE_ONLY_KEYS})


def deadline(t: dict) -> float | None:
    """The template's ``activeDeadlineSeconds``."""
    if t.get("activeDeadlineSeconds") is None:
        return None
    return float(parse_int(t["activeDeadlineSeconds"], "activeDeadlineSeconds"))


def pod_metadata(ex: "Executor", node: Node, t: dict) -> tuple[dict[str, str], dict[str, str]]:
    pm = ex.global_scope.substitute_obj(ex.spec.get("podMetadata") or {})
    tm = t.get("metadata") or {}
    labels = {**(pm.get("labels") or {}), **(tm.get("labels") or {}),
              "workflows.argoproj.io/workflow": ex.name, "workflows.argoproj.io/completed": "false"}
    annotations = {**(pm.get("annotations") or {}), **(tm.get("annotations") or {}),
                   "workflows.argoproj.io/node-name": node.name, "workflows.argoproj.io/node-id": node.id}
    return ({k: param_str(v) for k, v in labels.items()}, {k: param_str(v) for k, v in annotations.items()})


async def run_pod(ex: "Executor", node: Node, tmpl: dict, scope: Scope, depth: int) -> Node:
    """A container template: one pod; outputs from its files."""
    t = leaf_fields(tmpl, scope)
    main = dict(t["container"], name="main")
    labels, annotations = pod_metadata(ex, node, t)
    pod = PodSpec(
        name=node.pod_name, namespace=ex.namespace, uid=str(uuid.uuid4()), container=main,
        hostname=node.pod_name[:63], labels=labels, annotations=annotations,
        service_account=t.get("serviceAccountName") or ex.spec.get("serviceAccountName") or "default",
        volumes=list(t.get("volumes") or []), active_deadline=deadline(t),
        extra_env={"ARGO_POD_NAME": node.pod_name, "ARGO_CONTAINER_NAME": "main", "ARGO_NODE_ID": node.id},
        display=node.display_name, daemon=bool(tmpl.get("daemon")))
    async with ex.pod_slot():  # the slot is held until the node is finished
        ex.start(node)
        node.pod_dir = str(ex.pods.work_dir / "pods" / pod.name)  # known before it ends (a stopped daemon)
        res = await ex.pods.run(pod)
        node.pod_dir = str(res.pod_dir)
        node.outputs = {"exitCode": str(res.exit_code) if res.exit_code is not None else "-1",
                        "result": res.stdout, "parameters": {}}
        ok = res.phase == SUCCEEDED
        try:
            node.outputs["parameters"] = container_outputs(t, res, ok)
        except WorkflowError as e:
            if ok:
                return ex.finish(node, ERROR, error_text(e))
        if not ok:
            return ex.finish(node, FAILED, res.message)
        return ex.finish(node, SUCCEEDED)


async def run_resource_template(ex: "Executor", node: Node, tmpl: dict, scope: Scope, depth: int) -> Node:
    """A resource template: the manifest goes to the local JobSet/Job controller."""
    t = leaf_fields(tmpl, scope)
    owner = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": ex.name,
             "uid": ex.uid, "controller": True, "blockOwnerDeletion": True}
    limit = deadline(t)
    async with ex.pod_slot():
        ex.start(node)
        coro = run_resource(t["resource"], ex.jobsets, owner=owner)
        try:
            await (asyncio.wait_for(coro, timeout=limit) if limit is not None else coro)
        except asyncio.TimeoutError:
            message = "Pod was active on the node longer than the specified deadline"
            pending = dict(ex.jobsets.pods.pending)
            if pending:  # say why: its gang never started
                message += " (%d pod(s) never scheduled: %s)" % (len(pending), "; ".join(
                    "%s: %s" % kv for kv in sorted(pending.items())))
            return ex.finish(node, FAILED, message)
        except JobSetError as e:
            return ex.finish(node, FAILED, str(e))
        return ex.finish(node, SUCCEEDED)
