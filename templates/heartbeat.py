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
(image, pull secrets, placement, service account, Secrets: it runs the flow's code) with a
no CPU request, and, bounded by the run rather than by a deadline of its own, it does not
count against ``--max-workers`` (templates/workflow.py adds its slot to ``parallelism``).
"""

from __future__ import annotations

from . import argo_models as m

from mfargo.compiler import command as sh
from mfargo.compiler import ir, naming

from . import common, expr

# No CPU: a CPU request, however small, can keep a gang that fills its nodes from ever being
# scheduled (two 1-CPU ranks and a 50m daemon on a 2-CPU node did, e2e/cluster); the daemon
# sleeps between beats, and a beat minutes late still keeps the run alive in the UI. "0", not
# left out: Argo would merge in templateDefaults' CPU request.
RESOURCES = m.ResourceRequirements(requests={"cpu": m.Quantity("0"), "memory": m.Quantity("256Mi")})


def task() -> m.DAGTask:
    return m.DAGTask(name=naming.HEARTBEAT_TASK, template=naming.heartbeat_template_name())


def template(wf: ir.Workflow) -> m.Template:
    start = wf.steps[wf.start].compute
    call = sh.heartbeat_call(wf.script, wf.top_level_args, expr.RUN_ID, wf.tags, wf.init_executable)
    pod, container = common.derived_pod(start, None, with_secrets=True)
    return m.Template(
        name=naming.heartbeat_template_name(),
        daemon=True,
        **pod,
        container=m.Container(
            name="main",
            image=start.image,
            args=sh.step_args([call]),  # after templateDefaults' shared command (the code first)
            resources=RESOURCES,
            **container,
        ),
    )
