"""Leaf templates: container/script (one pod), resource (a manifest), suspend (a wait).

Each ``run_*`` has the dispatch signature ``(executor, node, template, scope, depth)``
and holds a ``spec.parallelism`` slot while its node runs.
"""
from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

from .model import ERROR, FAILED, SUCCEEDED, WorkflowError, param_str, parse_duration, parse_int
from .nodes import Node, error_text
from .outputs import container_outputs
from .pod import PodSpec
from .resource import ResourceError, run_resource
from .substitute import Scope

if TYPE_CHECKING:
    from .scheduler import Executor

# not substituted with the pod: inputs/retries are not fields
TEMPLATE_ONLY_KEYS = ("retryStrategy", "inputs", "name", "dag", "steps")


def leaf_fields(tmpl: dict, scope: Scope) -> dict:
    """The template with every run-time field substituted (inputs/retries are not fields)."""
    return scope.substitute_obj({k: v for k, v in tmpl.items() if k not in TEMPLATE_ONLY_KEYS})


def deadline(t: dict) -> float | None:
    """The template's ``activeDeadlineSeconds`` / ``timeout``, whichever is shorter."""
    values = []
    if t.get("activeDeadlineSeconds") is not None:
        values.append(float(parse_int(t["activeDeadlineSeconds"], "activeDeadlineSeconds")))
    if t.get("timeout"):
        values.append(parse_duration(t["timeout"]))
    return min(values) if values else None


def pod_metadata(ex: "Executor", node: Node, t: dict) -> tuple[dict[str, str], dict[str, str]]:
    pm = ex.global_scope.substitute_obj(ex.spec.get("podMetadata") or {})
    tm = t.get("metadata") or {}
    labels = {**(pm.get("labels") or {}), **(tm.get("labels") or {}),
              "workflows.argoproj.io/workflow": ex.name, "workflows.argoproj.io/completed": "false"}
    annotations = {**(pm.get("annotations") or {}), **(tm.get("annotations") or {}),
                   "workflows.argoproj.io/node-name": node.name, "workflows.argoproj.io/node-id": node.id}
    return ({k: param_str(v) for k, v in labels.items()}, {k: param_str(v) for k, v in annotations.items()})


def volumes(ex: "Executor", t: dict) -> list[dict]:
    """Workflow volumes (and volumeClaimTemplates as PVCs) overlaid by the template's."""
    vols = list(ex.global_scope.substitute_obj(ex.spec.get("volumes") or []))
    for vct in ex.spec.get("volumeClaimTemplates") or []:
        vname = (vct.get("metadata") or {}).get("name")
        if vname:
            vols.append({"name": vname, "persistentVolumeClaim": {"claimName": f"{ex.name}-{vname}"}})
    names = {v.get("name") for v in t.get("volumes") or []}
    return [v for v in vols if v.get("name") not in names] + list(t.get("volumes") or [])


async def run_pod(ex: "Executor", node: Node, tmpl: dict, scope: Scope, depth: int) -> Node:
    """A container or script template: one pod; outputs from its files and stdout."""
    t = leaf_fields(tmpl, scope)
    if (t.get("outputs") or {}).get("artifacts"):
        raise WorkflowError("output artifacts are not supported by the local runner")
    is_script = t.get("script") is not None
    main = dict(t.get("script") if is_script else t["container"])
    source = main.pop("source", None) if is_script else None
    main["name"] = "main"
    labels, annotations = pod_metadata(ex, node, t)
    pod = PodSpec(
        name=node.pod_name, namespace=ex.namespace, uid=str(uuid.uuid4()), containers=[main],
        hostname=node.pod_name[:63], labels=labels, annotations=annotations,
        service_account=t.get("serviceAccountName") or ex.spec.get("serviceAccountName") or "default",
        init_containers=list(t.get("initContainers") or []), sidecars=list(t.get("sidecars") or []),
        volumes=volumes(ex, t), active_deadline=deadline(t),
        script=source if is_script else None,
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
            node.outputs["parameters"] = container_outputs(t, res, ok, ex.exports)
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
        coro = run_resource(t["resource"], t.get("outputs"), ex.jobsets, owner=owner,
                            on_event=ex.on_event, node=node.display_name, do_validate=ex.validate)
        try:
            params = await (asyncio.wait_for(coro, timeout=limit) if limit is not None else coro)
        except asyncio.TimeoutError:
            message = "Pod was active on the node longer than the specified deadline"
            pending = dict(ex.jobsets.pods.pending)
            if pending:  # say why: its gang never started
                message += " (%d pod(s) never scheduled: %s)" % (len(pending), "; ".join(
                    "%s: %s" % kv for kv in sorted(pending.items())))
            return ex.finish(node, FAILED, message)
        except ResourceError as e:
            return ex.finish(node, FAILED, str(e))
        node.outputs = {"parameters": params}
        for p in (t.get("outputs") or {}).get("parameters") or []:
            if p.get("globalName") and p["name"] in params:
                ex.exports[p["globalName"]] = params[p["name"]]
        return ex.finish(node, SUCCEEDED)


async def run_suspend(ex: "Executor", node: Node, tmpl: dict, scope: Scope, depth: int) -> Node:
    """A suspend template with a duration (an indefinite one could never be resumed here)."""
    t = leaf_fields(tmpl, scope)
    duration = (t.get("suspend") or {}).get("duration")
    if duration is None or duration == "":
        raise WorkflowError("an indefinite suspend cannot be resumed in the local runner")
    ex.start(node)
    await asyncio.sleep(parse_duration(duration))
    return ex.finish(node, SUCCEEDED)
