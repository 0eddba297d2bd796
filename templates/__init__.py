"""Intermediate representation -> hera objects, one module per Argo template kind.

``build`` returns the documents to emit, as plain dicts ready for ``emit``, in a fixed
order: WorkflowTemplate, CronWorkflow, Sensor, Role, RoleBinding, Workflow.
"""

from __future__ import annotations

import json

from mfargo.compiler import ir
from mfargo.compiler.constants import Api, Label

from . import cron, emit, hooks, rbac, sensor, workflow

__all__ = ["build", "emit"]


def build(wf: ir.Workflow) -> list[dict]:
    template = emit.plain(workflow.build(wf))
    _add_deployment(template, wf)
    docs = [template, cron.build(wf), sensor.build(wf), *rbac.build(wf), run_workflow(wf)]
    return [d for d in docs if d is not None]


def _add_deployment(template: dict, wf: ir.Workflow) -> None:
    """What the flow decorators and notify options add to the WorkflowTemplate itself."""
    dep = wf.deployment
    annotations = template["metadata"].setdefault("annotations", {})
    spec = template["spec"]
    if dep.schedule is not None:
        annotations[Label.CRON] = json.dumps({"schedule": dep.schedule.cron, "tz": dep.schedule.timezone or ""})
    if dep.triggers is not None:
        annotations.update(sensor.template_annotations(wf))
        spec.setdefault("arguments", {}).setdefault("parameters", []).extend(sensor.template_arguments(dep.triggers))
    annotations.update(hooks.annotations(wf))
    lifecycle, hook_templates = hooks.build(wf)
    if lifecycle:
        names = {t["name"] for t in spec["templates"]}
        clash = sorted(names & set(lifecycle))
        if clash:
            from mfargo.compiler.errors import CompileError

            raise CompileError("hook template %r has the name of a step template; rename the function" % clash[0])
        spec["hooks"] = lifecycle
        spec["templates"].extend(hook_templates)


def run_workflow(wf: ir.Workflow) -> dict | None:
    """--workflow: one run of the template, for `argo submit` / `kubectl create`."""
    if not wf.deployment.bundle.workflow:
        return None
    return {
        "apiVersion": Api.ARGO,
        "kind": "Workflow",
        "metadata": {"generateName": "%s-" % wf.name, "namespace": wf.namespace,
                     "labels": {Label.PART_OF: Label.METAFLOW}},
        "spec": {
            "serviceAccountName": wf.deployment.bundle.service_account,
            "workflowTemplateRef": {"name": wf.name},
        },
    }
