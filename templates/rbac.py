"""A Role + RoleBinding letting the workflow's service account run @parallel gangs.

Exactly what a resource template creating a JobSet needs (shared/schemas/README.md):
``create``/``get`` on jobsets (create, poll the conditions) and the executor's
``create``/``patch`` on workflowtaskresults (Argo >= 3.4); and what the gang failure
report needs: ``get`` on jobsets, ``list`` on jobs, pods and events, and ``delete`` on
jobsets (it deletes its gang's finished JobSets, so ``argo retry`` can create them
again); and for the run's gang watch (templates/queue_watch.py), ``list`` on jobsets and
``create`` on events (why it let a gang go, for the report). Nothing more.

A gang's failure report is an Argo pod of its step: it runs as the step's service account
(else the workflow's), so every such account is bound to that Role too.

Gang pods read their control's pod (``list`` on pods: ``plugins/gang_control.py``) with
their own service account (``@kubernetes(service_account=...)``, else the namespace's
``default``). When the Role above is bound to it already, that covers it; any other gets
a second Role granting that one read only.
"""

from __future__ import annotations

from mfargo.compiler import ir
from mfargo.compiler.constants import Label

from . import gang_report, queue_watch

RULES = (
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["create", "get", "delete"]},
    # The failure report (templates/gang_report.py) reads the failed gang's Jobs and pods, and
    # the pods' Events when a rank never ran (why: a pull or scheduling failure).
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
    {"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"], "verbs": ["create", "patch"]},
)


# What the run's gang watch (templates/queue_watch.py) adds: it lists the run's JobSets (their
# pods: RULES), and records why it deleted one as an Event the failure report reads.
QUEUE_WATCH_RULES = ({"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["list"]},
                     {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]})


# What a gang pod reads: its control's pod, while the control's host name does not resolve.
GANG_POD_RULES = ({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},)
DEFAULT_ACCOUNT = "default"  # a pod's service account when its spec names none


def role_name(wf: ir.Workflow) -> str:
    return "%s-jobset" % wf.name


def gang_pods_role_name(wf: ir.Workflow) -> str:
    return "%s-gang-pods" % wf.name


def gang_pod_accounts(wf: ir.Workflow) -> list[str]:
    """The service accounts every gang pod runs as (the control's own pod included), sorted."""
    accounts = set()
    for step in wf.steps.values():
        if step.gang:
            for compute in (step.compute, step.gang.placement.control or step.compute):
                accounts.add(compute.service_account or DEFAULT_ACCOUNT)
    return sorted(accounts)


def report_accounts(wf: ir.Workflow, workflow_account: str) -> list[str]:
    """The service accounts the gang failure reports run as, sorted (Argo pods: the
    workflow's when their pod names none)."""
    return sorted({gang_report.report_pod(s, wf).compute.service_account or workflow_account
                   for s in wf.steps.values() if s.gang})


def build(wf: ir.Workflow) -> list[dict]:
    if not any(s.gang for s in wf.steps.values()):
        return []
    workflow_account = wf.deployment.bundle.service_account or DEFAULT_ACCOUNT
    rules = RULES + (QUEUE_WATCH_RULES if queue_watch.needed(wf) else ())
    accounts = [workflow_account] + [a for a in report_accounts(wf, workflow_account) if a != workflow_account]
    docs = _role(wf, role_name(wf), rules, accounts)
    others = [a for a in gang_pod_accounts(wf) if a not in accounts]
    if others:
        docs += _role(wf, gang_pods_role_name(wf), GANG_POD_RULES, others)
    return docs


def _role(wf: ir.Workflow, name: str, rules, accounts: list[str]) -> list[dict]:
    """A Role with ``rules`` and the RoleBinding granting it to ``accounts``."""
    labels = {Label.PART_OF: Label.METAFLOW}
    meta = {"name": name, "namespace": wf.namespace, "labels": labels}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": dict(meta),
        "rules": [dict(r) for r in rules],
    }
    subjects = []
    for account in accounts:
        subject = {"kind": "ServiceAccount", "name": account}
        if wf.namespace:
            subject["namespace"] = wf.namespace
        subjects.append(subject)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": dict(meta),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": subjects,
    }
    return [role, binding]

