"""Why a gang step failed, where Argo and Metaflow show it.

A failed JobSet only makes its resource step fail ("failure condition matched"); the
rank that failed first and its reason (OOMKilled, Evicted, DeadlineExceeded, an exit
code) are in the Job and pod status below it. So beside every gang task its DAG has a
report task ``<step>-failure-report`` with ``depends: "<step>.Failed || <step>.Errored"``:
a small pod reading the step's newest JobSet, its Jobs and pods (``plugins/gang_report.py``;
the workflow's Role grants get/list) that records the failure as Metaflow task metadata
and ends Failed with it as its termination message, which Argo shows as the node's message.

Why a task and not a lifecycle hook on the gang task (what this was before): Argo never
runs a hook of a DAG task whose phase is settled inside ``executeTemplate`` (a task with a
retryStrategy, as every gang task with @retry is) when its failure Omits its dependents
(argo-workflows#16057, open; its fix #16058 is unmerged as of v4.1.2): the hook is
evaluated at the top of ``executeDAGTask`` while the task is still Running, and once the
dependents are Omitted nothing visits the task again. A real v4.0.5 controller showed it.
A ``depends`` task has no such gap, on 3.7 and 4.x alike (workflow/controller/dag.go):

* it starts once: ``evaluateDependsLogic`` waits until the gang task is Fulfilled and reads
  ``.Failed``/``.Errored`` from its phase (docs/enhanced-depends-logic.md), and the report
  is a leaf, so a target that ``executeDAG`` visits on every pass. The gang task's Retry
  node stays Running between attempts and back-offs and takes its last attempt's phase
  (Failed or Error) only when no retry is left (operator.go ``processNodeRetries``), so
  the report runs after the last attempt, never after an earlier one;
* it changes no outcome: the gang task and its template are what they were (same name,
  retryStrategy, ``{{retries}}``, the join's ``<step>.Succeeded``), and ``assessDAGPhase``
  gives an Omitted target its parents' branch phase: on success the report is Omitted and
  the DAG succeeds; on failure the gang's branch is Failed (the join and what follows are
  Omitted and inherit it) and the DAG fails whatever the report ends with. A gang inside
  a foreach gets its report inside the same body DAG.

A nested DAG { JobSet task, report task } as the gang's template would also escape #16057,
but the gang task's phase would then be the report's (it must fail for the gang to fail)
and every input would be forwarded once more.

The report is a pod of its step (service account, placement, Secrets), except its image: it
runs the flow's start image with the start step's pull secrets and policy, so a gang whose
own image cannot be pulled is still reported (and a small pod does not pull a large GPU
image). Every image of a flow holds the flow's code, Metaflow and mfargo, which is all it runs.
"""

from __future__ import annotations

from . import argo_models as m

from mfargo.compiler import command as sh
from mfargo.compiler import ir, naming

from metaflow_extensions.mfargo.plugins import gang_report, pod_contract

from . import common, expr, gang, pod, wiring

# Long enough for a slow image pull; it reads a few API objects and writes one metadata entry.
DEADLINE_SECONDS = 600


def task(step: ir.Step) -> m.DAGTask:
    """The report's DAG task, beside the gang's: runs only when the gang task did not succeed."""
    return m.DAGTask(
        name=naming.gang_report_task_name(step.name),
        template=naming.gang_report_template_name(step.name),
        depends=expr.did_not_succeed(wiring.task_name(step.name)),
        arguments=m.Arguments(parameters=[m.Parameter(name=n, value=v) for n, v in gang.report_arguments(step.gang)]),
    )


def jobset_names(step: ir.Step) -> list[str]:
    """The step's JobSet of every Argo attempt, newest first (one name without retries)."""
    if common.attempt_tag(step.retry) is None:
        return [gang.jobset_name(step)]
    return [naming.jobset_name(gang.JOBSET_ID, str(n)) for n in range(step.retry.total, -1, -1)]


def _report_env(step: ir.Step) -> tuple:
    """The step's env, and a queued gang's queue (the report names it when Kueue never admitted the gang)."""
    queue = step.gang.placement.queue
    return tuple(step.environment) + (((pod_contract.GANG_QUEUE_ENV, queue),) if queue else ())


def template(step: ir.Step, wf: ir.Workflow) -> m.Template:
    return pod.argo_template(
        report_pod(step, wf),
        name=naming.gang_report_template_name(step.name),
        inputs=m.Inputs(parameters=[m.Parameter(name=n) for n, _ in gang.report_arguments(step.gang)]),
    )


def report_pod(step: ir.Step, wf: ir.Workflow) -> pod.Pod:
    """The report's pod (``pod.INHERITS``): the gang step's account and placement, the start image."""
    report = (sh.Raw("exec python -m"), sh.Lit(gang_report.__name__), sh.Lit(wf.flow_name), sh.Lit(expr.RUN_ID),
              sh.Lit(step.name), sh.Lit(naming.control_task_id(gang.ENTROPY)), sh.Lit(pod_contract.TERMINATION_LOG),
              *(sh.Lit(name) for name in jobset_names(step)))
    return pod.lower(
        pod.Kind.REPORT, step.compute, wf.steps[wf.start].compute,
        args=sh.step_args([report]),  # after templateDefaults' shared command (the code first)
        env=tuple(common.env_vars(_report_env(step))),
        deadline_seconds=DEADLINE_SECONDS, termination_message_path=pod_contract.TERMINATION_LOG,
    )
