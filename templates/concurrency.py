"""--max-concurrent-runs: at most N runs of the deployed flow run at once.

Argo's workflow-level synchronization: the WorkflowTemplate holds a semaphore whose limit is a
key of a ConfigMap the bundle brings (Argo reads it from the workflow's namespace; editing the
ConfigMap changes the limit without a redeploy). A run started while N run waits, Pending,
and starts when one ends: triggers, the CronWorkflow and the Sensor all queue the same way.
The list form (``semaphores``) is the one Argo 4 reads and Argo 3.7 reads too (from 3.6).
"""

from __future__ import annotations

from mfargo.compiler import ir, naming
from mfargo.compiler.constants import Label


def synchronization(wf: ir.Workflow) -> dict | None:
    """The WorkflowTemplate's ``spec.synchronization``, or None without a limit."""
    if wf.deployment.concurrency.max_runs is None:
        return None
    ref = {"name": naming.concurrency_config_map_name(wf.name), "key": naming.CONCURRENCY_KEY}
    return {"semaphores": [{"configMapKeyRef": ref}]}


def config_map(wf: ir.Workflow) -> dict | None:
    """The ConfigMap holding the limit, or None without one."""
    limit = wf.deployment.concurrency.max_runs
    if limit is None:
        return None
    meta = {"name": naming.concurrency_config_map_name(wf.name), "labels": {Label.PART_OF: Label.METAFLOW},
            "annotations": {Label.FLOW_NAME: wf.flow_name}}
    if wf.namespace:
        meta["namespace"] = wf.namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {naming.CONCURRENCY_KEY: str(limit)}}
