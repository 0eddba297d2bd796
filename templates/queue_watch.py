"""The run's queue watch: a daemon beside every run of a flow with a gang queued in Kueue.

Kueue keeps a queued gang's JobSet suspended until its ClusterQueue has room for every rank,
and a suspended Job's deadline does not run, so nothing would end a gang that never fits
before the workflow's timeout. The watch (plugins/queue_watch.py) deletes a queued JobSet
suspended for longer than its step's @timeout (the JobSet carries it as
``JobSetKey.QUEUE_DEADLINE``), which fails the gang's resource step; the failure report then
says what Kueue said. One watch per run, in the top DAG, covers every queued gang, foreach
bodies included: it lists the run's JobSets (the Role grants ``list`` only to such flows).

Like the heartbeat, it is a daemon Argo stops when the top DAG ends, with no CPU request and
a slot of its own in ``parallelism`` (``common.daemon_template``), but under the workflow's
service account, which the bundle's Role is bound to, not the start step's.
"""

from __future__ import annotations

from . import argo_models as m

from mfargo.compiler import command as sh
from mfargo.compiler import ir, naming

from metaflow_extensions.mfargo.plugins import queue_watch

from . import common, expr, pod


def needed(wf: ir.Workflow) -> bool:
    """Whether any gang of the flow is queued in Kueue."""
    return any(s.gang and s.gang.placement.queue for s in wf.steps.values())


def task() -> m.DAGTask:
    return m.DAGTask(name=naming.QUEUE_WATCH_TASK, template=naming.queue_watch_template_name())


def template(wf: ir.Workflow) -> m.Template:
    call = (sh.Raw("exec python -m"), sh.Lit(queue_watch.__name__), sh.Lit(expr.WORKFLOW_NAME))
    return common.daemon_template(naming.queue_watch_template_name(), pod.Kind.QUEUE_WATCH, wf, call)
