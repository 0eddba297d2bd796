"""The run's heartbeat daemon: Metaflow's UI calls a run failed once its heartbeat is some
minutes old, and on Argo no process lives as long as the run (tasks beat only for
themselves; a gang waiting to be scheduled has none). With Metaflow's metadata service, the
top DAG's first task is a daemon pod running ``flow.py argo-workflows heartbeat``
(plugins/run_heartbeat.py), as core's ``--enable-heartbeat-daemon`` does: it registers the
run, so a run whose first task never reaches the service still has a record, and beats
until Argo stops it when the top DAG ends.

A failed daemon fails its DAG (it is a leaf, and Argo refuses ``continueOn`` in a DAG that
uses ``depends``), so the command itself never fails: a service that cannot be reached costs
the UI's view of the run, never the run (plugins/run_heartbeat.py). It is the start step's pod
(image, pull secrets, placement, service account, Secrets: it runs the flow's code) with no
CPU request, and, bounded by the run rather than by a deadline of its own, it does not
count against ``--max-workers`` (templates/workflow.py adds its slot to ``parallelism``):
``common.daemon_template``.
"""

from __future__ import annotations

from . import argo_models as m

from mfargo.compiler import command as sh
from mfargo.compiler import ir, naming

from . import common, expr, pod

def task() -> m.DAGTask:
    return m.DAGTask(name=naming.HEARTBEAT_TASK, template=naming.heartbeat_template_name())


def template(wf: ir.Workflow) -> m.Template:
    call = sh.heartbeat_call(wf.script, wf.top_level_args, expr.RUN_ID, wf.tags, wf.init_executable)
    return common.daemon_template(naming.heartbeat_template_name(), pod.Kind.HEARTBEAT, wf, call)
