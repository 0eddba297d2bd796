"""After a deploy wrote a WorkflowTemplate and its CronWorkflow, have Argo's cron controller
check the CronWorkflow again, once it can see the template.

Argo's cron controller (workflow/cron/controller.go of v3.7 and v4.0) validates a CronWorkflow
when it sees it change, against its WorkflowTemplate informer's copy of the templates. A
template written milliseconds before may not be in that copy yet: the controller then logs
`invalid cron workflow ... WorkflowTemplate Informer cannot find WorkflowTemplate`, keeps
nothing, and looks again only on the CronWorkflow's next change or its 20-minute resync, so
the schedule is not registered meanwhile and a run due then is missed. Neither verdict is
visible through the API, so a `create` that created the template waits a moment and changes
one annotation of the CronWorkflow (the template version it was deployed with): a change the
controller validates again, by then against the template.
"""

from __future__ import annotations

import time
from http import HTTPStatus
from typing import Callable

from mfargo.cluster import ClusterError
from mfargo.compiler.constants import Label
from mfargo.transaction import Done

# How long Argo's informers may lag a write (milliseconds when the controller is well; a
# controller too busy to catch up in this time is one whose 20-minute resync still comes).
INFORMER_LAG_SECONDS = 2.0


def recheck(cluster, done: list[Done], echo: Callable[..., None], sleep: Callable[[float], None] = time.sleep) -> None:
    """Change each CronWorkflow this deploy wrote, once, when the deploy created the template
    it runs. A template replaced was in the informer already, under the same name, and
    mfargo's CronWorkflow passes no arguments the previous version could refuse."""
    template = next((d.result for d in done if d.write.kind == "WorkflowTemplate" and d.action == "created"), None)
    crons = [d for d in done if d.write.kind == "CronWorkflow" and d.result]
    if template is None or not crons:
        return
    version = template["metadata"].get("resourceVersion", "")
    echo("Waiting %g s for Argo's cron controller to see WorkflowTemplate *%s* before it checks the schedule "
         "again..." % (INFORMER_LAG_SECONDS, template["metadata"]["name"]))
    sleep(INFORMER_LAG_SECONDS)
    for item in crons:
        body = item.result
        body["metadata"].setdefault("annotations", {})[Label.TEMPLATE_CHECKED] = version
        try:
            cluster.replace(item.write.res, item.write.name, body, item.write.namespace)
        except ClusterError as e:
            if e.status != HTTPStatus.CONFLICT:  # changed since it was written: the controller checks that change
                echo("mfargo: warning: could not have Argo check CronWorkflow %s again (%s): if its controller "
                     "missed the template, the schedule starts within 20 minutes, at the controller's resync"
                     % (item.write.name, e), fg="yellow")
