"""A Role + RoleBinding letting the workflow's service account run @parallel gangs.

Exactly what a resource template creating a JobSet needs (shared/schemas/README.md):
``create``/``get`` on jobsets (create, poll the conditions) and the executor's
``create``/``patch`` on workflowtaskresults (Argo >= 3.4); and what the gang failure
report reads: ``get`` on jobsets, ``list`` on jobs and pods. Nothing more.
"""

from __future__ import annotations

from mfargo.compiler import ir
from mfargo.compiler.constants import Label

RULES = (
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["create", "get"]},
    # The failure report (templates/gang_report.py) reads the failed gang's Jobs and pods.
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"], "verbs": ["create", "patch"]},
)


def role_name(wf: ir.Workflow) -> str:
    return "%s-jobset" % wf.name


def build(wf: ir.Workflow) -> list[dict]:
    if not any(s.gang for s in wf.steps.values()):
        return []
    name = role_name(wf)
    labels = {Label.PART_OF: Label.METAFLOW}
    meta = {"name": name, "namespace": wf.namespace, "labels": labels}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": dict(meta),
        "rules": [dict(r) for r in RULES],
    }
    subject = {"kind": "ServiceAccount", "name": wf.deployment.bundle.service_account or "default"}
    if wf.namespace:
        subject["namespace"] = wf.namespace
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": dict(meta),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [subject],
    }
    return [role, binding]

