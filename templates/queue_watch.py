"""The run's gang watch (named the queue watch, as it began): a daemon beside every run of a
flow with a gang.

It lets go of a gang that cannot start whole, on two rules (plugins/queue_watch.py):

* a gang queued in Kueue stays suspended until its ClusterQueue has room for every rank,
  and a suspended Job's deadline does not run, so nothing would end a gang that never fits
  before the workflow's timeout: the watch deletes a queued JobSet suspended for longer than
  its step's @timeout (the JobSet carries it as ``JobSetKey.QUEUE_DEADLINE``);
* without Kueue, the scheduler places a gang's pods one by one: the ranks that fit start and
  hold their nodes while another waits, until the step's @timeout (Metaflow's default: 5
  days). The watch deletes an active JobSet whose ranks have not all started within its
  ``@jobset(start_window=...)`` (``JobSetKey.START_WINDOW``), after recording which rank
  never started and why as an Event on the JobSet's name, which the failure report reads.

Either deletion fails the gang's resource step, so its @retry makes the next attempt. One
watch per run, in the top DAG, covers every gang, foreach bodies included: it lists the
run's JobSets and their pods (the Role grants ``list`` on jobsets and ``create`` on events
to flows with a gang).

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
    """Whether the flow has a gang (every gang has a start window; a queued one a queue deadline too)."""
    return any(s.gang for s in wf.steps.values())


def task() -> m.DAGTask:
    return m.DAGTask(name=naming.QUEUE_WATCH_TASK, template=naming.queue_watch_template_name())


def template(wf: ir.Workflow) -> m.Template:
    call = (sh.Raw("exec python -m"), sh.Lit(queue_watch.__name__), sh.Lit(expr.WORKFLOW_NAME))
    return common.daemon_template(naming.queue_watch_template_name(), pod.Kind.QUEUE_WATCH, wf, call)
