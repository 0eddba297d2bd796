"""Intermediate representation -> hera objects, one module per Argo template kind.

``build`` returns the documents to emit, as plain dicts ready for ``emit``, in a fixed
order: WorkflowTemplate, CronWorkflow, Sensor, ConfigMap, Role, RoleBinding, Workflow.
"""

from __future__ import annotations

from mfargo.compiler import ir
from mfargo.compiler.constants import Api, Label

from . import concurrency, cron, emit, rbac, sensor, workflow

__all__ = ["build", "emit"]


def build(wf: ir.Workflow) -> list[dict]:
    docs = [workflow.build(wf), cron.build(wf), sensor.build(wf), concurrency.config_map(wf), *rbac.build(wf),
            run_workflow(wf)]
    return [d for d in docs if d is not None]


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
