"""@schedule -> a CronWorkflow that runs the WorkflowTemplate by reference.

Field values follow core Metaflow's ``schedule_workflow_template`` (argo_client.py):
history limits 10000, a 3540 s starting deadline, not suspended. Argo >= 3.6 reads the
``schedules`` list (the only form in Argo 4); ``create --argo-version 3.7`` writes the singular
``schedule`` string instead, which every 3.x release reads.
"""

from __future__ import annotations

from . import argo_models as m

from mfargo.compiler import ir
from mfargo.compiler.constants import Api, Label


HISTORY_LIMIT = 10000
STARTING_DEADLINE_SECONDS = 3540


def build(wf: ir.Workflow) -> dict | None:
    sched = wf.deployment.schedule
    if sched is None:
        return None
    cron = m.CronWorkflow(
        api_version=Api.ARGO,
        kind="CronWorkflow",
        metadata=m.ObjectMeta(
            name=wf.name,
            namespace=wf.namespace,
            labels=dict(wf.labels),
            annotations={Label.FLOW_NAME: wf.flow_name},
        ),
        spec=m.CronWorkflowSpec(
            schedules=[sched.cron],
            timezone=sched.timezone,
            suspend=False,
            failed_jobs_history_limit=HISTORY_LIMIT,
            successful_jobs_history_limit=HISTORY_LIMIT,
            starting_deadline_seconds=STARTING_DEADLINE_SECONDS,
            concurrency_policy=wf.deployment.concurrency.schedule_policy,
            workflow_spec=m.WorkflowSpec(
                workflow_template_ref=m.WorkflowTemplateRef(name=wf.name),
                service_account_name=wf.deployment.bundle.service_account,
            ),
        ),
    )
    doc = cron
    if wf.deployment.bundle.argo_version == "3.7":  # before Argo 4: one string (its `schedules` came in 3.6)
        doc["spec"]["schedule"] = doc["spec"].pop("schedules")[0]
    return doc
