"""``python -m ...queue_watch WORKFLOW``: the queue watch, a daemon beside every run of a
flow with a gang queued in Kueue (``@jobset(queue=...)``; templates/queue_watch.py).

Kueue keeps a queued gang's JobSet suspended until its ClusterQueue has room for every rank.
While it is suspended its Jobs' deadline (the step's @timeout) does not run, and Kueue has no
admission deadline of its own: a gang that never fits would hold its run Running until the
workflow's timeout. So every POLL_SECONDS this lists the run's queued JobSets (by their
workflow label) and deletes each one suspended for longer than its step's @timeout (the
JobSet's QUEUE_DEADLINE_ANNOTATION), counted from its ``Suspended`` condition: a gang Kueue
preempted waits again from its eviction. Argo's resource step then fails ("deleted while its
status was still being checked"), the step's retries create a new JobSet, and after the last
one the failure report says what Kueue said (gang_report.py).

A failed daemon fails its DAG, so this never exits with an error: an API it cannot reach
costs the bound, never the run. Argo stops it when the run's DAG ends.
"""

import datetime
import sys
import time

from . import gang_report
from . import pod_contract as contract

POLL_SECONDS = 5
JOBSET_LIST = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/%s/jobsets"


def parse_time(stamp):
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def suspended_for(jobset, now):
    """Seconds the JobSet has been suspended, or None when it is not (or is being deleted)."""
    meta = jobset.get("metadata") or {}
    if not (jobset.get("spec") or {}).get("suspend") or meta.get("deletionTimestamp"):
        return None
    since = meta.get("creationTimestamp")  # before the JobSet controller has said anything
    for condition in (jobset.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Suspended":
            if condition.get("status") != "True":
                return None
            since = condition.get("lastTransitionTime") or since
    return (now - parse_time(since)).total_seconds() if since else None


def overdue(jobsets, now):
    """(name, queue, seconds waited, deadline) of each JobSet suspended past its deadline."""
    found = []
    for jobset in jobsets:
        meta = jobset.get("metadata") or {}
        try:
            deadline = int((meta.get("annotations") or {})[contract.QUEUE_DEADLINE_ANNOTATION])
        except (KeyError, ValueError):
            continue
        waited = suspended_for(jobset, now)
        if waited is not None and waited >= deadline:
            queue = (meta.get("labels") or {}).get(contract.KUEUE_QUEUE_LABEL, "?")
            found.append((meta.get("name"), queue, int(waited), deadline))
    return found


def sweep(api, ns, workflow, now):
    """Delete the run's JobSets waiting in a queue past their deadline; one line for each."""
    selector = "%s=%s,%s" % (contract.ARGO_WORKFLOW_LABEL, workflow, contract.KUEUE_QUEUE_LABEL)
    jobsets = (api.get(JOBSET_LIST % ns, labelSelector=selector) or {}).get("items") or []
    said = []
    for name, queue, waited, deadline in overdue(jobsets, now):
        kueue = gang_report.kueue_said(api, ns, [name])
        api.delete(gang_report.JOBSETS % (ns, name))
        said.append("deleted JobSet %s: suspended in Kueue queue %s for %d s, longer than its step's @timeout "
                    "(%d s); Kueue said: %s" % (name, queue, waited, deadline, kueue[1] if kueue else "nothing"))
    return said


def main(workflow):
    try:
        api, ns = gang_report.KubeApi(), gang_report.namespace()
    except Exception as e:
        print("queue watch off: %s" % e)
        return 0
    print("watching the JobSets of run %s queued in Kueue (namespace %s), every %d s" % (workflow, ns, POLL_SECONDS))
    last_problem = None
    while True:
        try:
            for line in sweep(api, ns, workflow, datetime.datetime.now(datetime.timezone.utc)):
                print(line, flush=True)
            last_problem = None
        except Exception as e:  # say each new problem once, and keep watching
            if str(e) != last_problem:
                print("queue watch: %s" % e, flush=True)
                last_problem = str(e)
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
