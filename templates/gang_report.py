"""Why a gang step failed, where Argo and Metaflow show it.

A failed JobSet only makes its resource step fail ("failure condition matched"); the
rank that failed first and its reason (OOMKilled, Evicted, DeadlineExceeded, an exit
code) are in the Job and pod status below it. So the gang's DAG task gets a lifecycle
hook that fires once the task has Failed (its retries used up): a small pod reading the
step's newest JobSet, its Jobs and pods (``plugins/gang_report.py``; the workflow's Role
grants get/list) that records the failure as Metaflow task metadata and ends Failed
with it as its termination message, which Argo shows as the node's message. A hook that
ends Failed does not change the workflow's outcome (docs/lifecyclehook.md).
"""

from __future__ import annotations

from . import argo_models as m

from mfargo.compiler import command as sh
from mfargo.compiler import ir, naming

from metaflow_extensions.mfargo.plugins import gang_report, pod_contract

from . import common, expr, gang, wiring

HOOK = "gang-failed"
# It only reads a few objects: it must fit anywhere, whatever the gang's own size.
RESOURCES = m.ResourceRequirements(requests={"cpu": m.Quantity("100m"), "memory": m.Quantity("256Mi")})


def hooks(step: ir.Step) -> dict[str, m.LifecycleHook]:
    """The gang task's hook: run the report when the task failed."""
    return {HOOK: m.LifecycleHook(
        template=naming.gang_report_template_name(step.name),
        expression=expr.task_failed(wiring.task_name(step.name)),
        arguments=m.Arguments(parameters=[m.Parameter(name=n, value=v) for n, v in gang.report_arguments(step.gang)]),
    )}


def jobset_names(step: ir.Step) -> list[str]:
    """The step's JobSet of every Argo attempt, newest first (one name without retries)."""
    if common.attempt_tag(step.retry) is None:
        return [gang.jobset_name(step)]
    return [naming.jobset_name(gang.ENTROPY, str(n)) for n in range(step.retry.total, -1, -1)]


def template(step: ir.Step, wf: ir.Workflow) -> m.Template:
    report = (sh.Raw("exec python -m"), sh.Lit(gang_report.__name__), sh.Lit(wf.flow_name), sh.Lit(expr.RUN_ID),
              sh.Lit(step.name), sh.Lit(naming.control_task_id(gang.ENTROPY)), sh.Lit(pod_contract.TERMINATION_LOG),
              *(sh.Lit(name) for name in jobset_names(step)))
    return m.Template(
        name=naming.gang_report_template_name(step.name),
        inputs=m.Inputs(parameters=[m.Parameter(name=n) for n, _ in gang.report_arguments(step.gang)]),
        container=m.Container(
            name="main",
            image=step.compute.image,
            args=sh.step_args([report]),  # after templateDefaults' shared command (the code first)
            env=common.env_vars(step.environment) or None,
            env_from=common.env_from(step.compute),
            resources=RESOURCES,
            termination_message_path=pod_contract.TERMINATION_LOG,
        ),
    )
