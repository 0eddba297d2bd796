"""The WorkflowTemplate: spec-level settings, templateDefaults and every template."""

from __future__ import annotations

import json

from . import argo_models as m

from metaflow_extensions.mfargo.plugins import pod_contract as contract
from mfargo.compiler import ir, naming
from mfargo.compiler.constants import RUN_USER, Api, Label

from . import common, concurrency, dag, expr, gang_report, heartbeat, hooks, jobset, pod_command, queue_watch, recursion, sensor, step


def build(wf: ir.Workflow) -> m.WorkflowTemplate:
    default_image = _most_common_image(wf)
    entrypoint = naming.entrypoint_name()
    templates = dag.build_all(wf, entrypoint)
    for s in wf.steps.values():
        if s.gang:
            templates.append(jobset.template(s, wf))
            templates.append(gang_report.template(s, wf))
        else:
            templates.append(step.build(s, wf))
        if s.recursive:
            templates.append(recursion.build(s, wf))
    if wf.run_heartbeat:
        templates.append(heartbeat.template(wf))
    if queue_watch.needed(wf):
        templates.append(queue_watch.template(wf))
    lifecycle, hook_templates = hooks.build(wf)
    templates += hook_templates
    return m.WorkflowTemplate(
        api_version=Api.ARGO,
        kind="WorkflowTemplate",
        metadata=m.ObjectMeta(
            name=wf.name,
            namespace=wf.namespace,
            labels=dict(wf.labels),
            annotations=dict(wf.annotations) | _deployment_annotations(wf),
        ),
        spec=m.WorkflowSpec(
            entrypoint=entrypoint,
            arguments=_arguments(wf),
            parallelism=wf.max_workers + wf.run_heartbeat + queue_watch.needed(wf),  # daemons are no workers
            active_deadline_seconds=wf.timeout_seconds,
            ttl_strategy=_ttl_strategy(wf.cleanup),
            pod_gc=m.PodGC(strategy=wf.cleanup.pod_gc) if wf.cleanup.pod_gc else None,
            priority=wf.priority,
            synchronization=concurrency.synchronization(wf),
            # --service-account: every run of the template (`trigger`, `argo submit --from`)
            # runs as the account the RoleBinding grants, not as the namespace's `default`.
            service_account_name=wf.deployment.bundle.service_account,
            pod_metadata=m.Metadata(
                labels={Label.PART_OF: Label.METAFLOW, Label.NAME: "metaflow-task"},
                annotations={Label.RUN_ID: expr.RUN_ID, Label.FLOW_NAME: wf.flow_name, Label.USER: RUN_USER},
            ),
            workflow_metadata=m.WorkflowMetadata(labels={Label.PART_OF: Label.METAFLOW, Label.NAME: "metaflow-run"}),
            template_defaults=m.Template(
                container=m.Container(
                    # The schema requires an image here too; every template still names its own.
                    image=default_image,
                    command=pod_command.shared_command(wf),
                    # No resources: each template states its own whole (templates/pod.py).
                    env=common.env_vars(wf.env) + common.identity_env() + step.budget_env_default(),
                )
            ),
            hooks=lifecycle or None,
            templates=templates,
        ),
    )


def _ttl_strategy(cleanup: ir.Cleanup) -> m.TTLStrategy | None:
    if cleanup.seconds_after_success is None and cleanup.seconds_after_failure is None:
        return None
    return m.TTLStrategy(seconds_after_success=cleanup.seconds_after_success,
                         seconds_after_failure=cleanup.seconds_after_failure)


def _most_common_image(wf: ir.Workflow) -> str:
    counts: dict[str, int] = {}
    for s in wf.steps.values():
        counts[s.compute.image] = counts.get(s.compute.image, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


def _arguments(wf: ir.Workflow) -> m.Arguments:
    """The flow's parameters, then (with @trigger) each event's payload parameter."""
    params = [m.Parameter(name=p.name, value=p.default, description=p.description) for p in wf.parameters]
    if wf.deployment.triggers is not None:
        # Each event's payload, `null` when the run was not triggered.
        params += [m.Parameter(name=e.sanitized_name, value=sensor.NULL) for e in wf.deployment.triggers.events]
    params += [  # set by `argo-workflows resume` (plugins/resume.py)
        m.Parameter(name=contract.ORIGIN_RUN_PARAMETER, value="",
                    description="Resume: the run whose succeeded tasks this run clones (empty: a new run)."),
        m.Parameter(name=contract.RESUME_STEP_PARAMETER, value="",
                    description="Resume: run this step and every step after it again (empty: what did not succeed)."),
    ]
    return m.Arguments(parameters=params)


def _deployment_annotations(wf: ir.Workflow) -> dict[str, str]:
    """What @schedule, @trigger and the notify options tell readers of the template."""
    dep = wf.deployment
    out = {}
    if dep.schedule is not None:
        out[Label.CRON] = json.dumps({"schedule": dep.schedule.cron, "tz": dep.schedule.timezone or ""})
    if dep.triggers is not None:
        out.update(sensor.template_annotations(wf))
    out.update(hooks.annotations(wf))
    return out
