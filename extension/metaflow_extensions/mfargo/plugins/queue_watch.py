"""``python -m ...queue_watch WORKFLOW``: the run's gang watch (named the queue watch, as it
began), a daemon beside every run of a flow with a gang (templates/queue_watch.py). Every
POLL_SECONDS it lists the run's JobSets (by their workflow label) and lets go of a gang that
cannot start whole, on two rules:

* **A queued gang past its deadline.** Kueue keeps a queued gang's JobSet suspended until its
  ClusterQueue has room for every rank. While it is suspended its Jobs' deadline (the step's
  @timeout) does not run, and Kueue has no admission deadline of its own: a gang that never
  fits would hold its run Running until the workflow's timeout. So it deletes each JobSet
  suspended for longer than its step's @timeout (QUEUE_DEADLINE_ANNOTATION), counted from its
  ``Suspended`` condition: a gang Kueue preempted waits again from its eviction. The failure
  report then says what Kueue said (gang_report.py).
* **A gang not started whole within its start window.** Without Kueue the scheduler places a
  gang's pods one by one: the ranks that fit start and hold their nodes while another waits
  ("0/2 nodes are available: 1 Insufficient cpu"), until the step's @timeout. So it deletes an
  active JobSet (not suspended, not finished) some rank of which has not started (no pod of
  it Running, Succeeded or Failed; a pod not created yet counts as not started) for longer
  than its START_WINDOW_ANNOTATION (``@jobset(start_window=...)``), counted from when the
  JobSet became active: its creation, or its ``Suspended`` condition turning False (Kueue
  admitted it); after a gang restart, from the creation of the first pod of the newest
  generation (before there is one, it waits), so a restart never trips it. Ranks that are
  Running are never judged, however long they take to meet. Before deleting it records which
  ranks never started and why (the pod's PodScheduled=False message, or its container's
  waiting reason, such as ImagePullBackOff) as a Warning Event on the JobSet's name
  (GANG_NOT_STARTED_REASON, the details as JSON in GANG_NOT_STARTED_ANNOTATION): the JobSet
  is gone when the failure report runs, the Event is not (an hour, by default).

Either deletion (foreground: Jobs and pods first, so the nodes are free) fails Argo's
resource step ("deleted while its status was still being checked"), the step's retries create
a new JobSet, and after the last one the failure report says why.

A failed daemon fails its DAG, so this never exits with an error: an API it cannot reach
costs the bound, never the run. Argo stops it when the run's DAG ends.
"""

import datetime
import json
import sys
import time

from . import gang_failure, gang_report
from . import pod_contract as contract

POLL_SECONDS = 5
JOBSET_LIST = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/%s/jobsets"
JOBSET_API_VERSION = "/".join(JOBSET_LIST.split("/")[2:4])  # group/version, for an Event's involvedObject
STARTED_PHASES = ("Running", "Succeeded", "Failed")  # a pod past Pending: it was placed and its container ran
EVENT_SOURCE = "mfargo-gang-watch"


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


def _annotation_int(jobset, key):
    try:
        value = int(((jobset.get("metadata") or {}).get("annotations") or {})[key])
    except (KeyError, TypeError, ValueError):
        return None
    return value if value > 0 else None


def _finished(jobset):
    status = jobset.get("status") or {}
    return bool(status.get("terminalState")) or any(
        c.get("type") in ("Completed", "Failed") and c.get("status") == "True" for c in status.get("conditions") or [])


def _generation(pod):
    meta = pod.get("metadata") or {}
    value = (meta.get("annotations") or {}).get(contract.RESTART_ATTEMPT_ANNOTATION) \
        or (meta.get("labels") or {}).get(contract.RESTART_ATTEMPT_ANNOTATION) or "0"
    try:
        return int(value)
    except ValueError:
        return -1


def active_since(jobset, pods=None):
    """When the JobSet's newest gang generation became active, or None when it is not active
    (suspended, finished, being deleted) or, after a restart, its newest pods are not made yet.
    ``pods`` None: judged from the JobSet alone (its restarts not looked into)."""
    meta = jobset.get("metadata") or {}
    if (jobset.get("spec") or {}).get("suspend") or meta.get("deletionTimestamp") or _finished(jobset):
        return None
    stamps = [meta.get("creationTimestamp")]
    for condition in (jobset.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Suspended" and condition.get("status") == "False":
            stamps.append(condition.get("lastTransitionTime"))  # admitted by Kueue then
    restarts = int((jobset.get("status") or {}).get("restarts") or 0)
    if restarts and pods is not None:
        newest = [(p.get("metadata") or {}).get("creationTimestamp") for p in pods if _generation(p) == restarts]
        newest = [s for s in newest if s]
        if not newest:
            return None
        stamps.append(min(newest, key=parse_time))
    stamps = [parse_time(s) for s in stamps if s]
    return max(stamps) if stamps else None


def why_pending(pod):
    """Why a pod has not started, in the scheduler's or the kubelet's words."""
    if pod is None:
        return "no pod made yet"
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return "%s: %s" % (condition.get("reason") or "Unschedulable",
                               " ".join(str(condition.get("message") or "no reason given").split()))
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting:
            said = " ".join(str(waiting.get("message") or "").split())
            return "%s%s" % (waiting.get("reason") or "Waiting", ": " + said if said else "")
    return "Pending (%s)" % ("scheduled, not running yet" if (pod.get("spec") or {}).get("nodeName") else "not scheduled yet")


def not_started(jobset, pods, now):
    """A dict saying why the JobSet is to be let go: ``waited`` and ``window`` (seconds),
    ``restarts``, ``started`` (ranks), ``missing``: [{rank, role, job, pod, why}], or None
    while it is not active, within its window, or every rank has started."""
    window = _annotation_int(jobset, contract.START_WINDOW_ANNOTATION)
    name = (jobset.get("metadata") or {}).get("name") or "?"
    restarts = int((jobset.get("status") or {}).get("restarts") or 0)
    since = active_since(jobset, pods)
    if window is None or since is None:
        return None
    waited = (now - since).total_seconds()
    if waited < window:
        return None
    by_rank = {}
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if _generation(pod) != restarts:
            continue
        try:
            key = (labels.get(contract.REPLICATED_JOB_LABEL), int(labels.get(contract.JOB_INDEX_LABEL)))
        except (TypeError, ValueError):
            continue
        by_rank.setdefault(key, []).append(pod)
    missing, started = [], []
    for key, rank in sorted(gang_failure.expected_ranks(jobset).items(), key=lambda item: item[1]):
        mine = by_rank.get(key) or []
        if any((p.get("status") or {}).get("phase") in STARTED_PHASES for p in mine):
            started.append(rank)
            continue
        pod = max(mine, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "", default=None)
        missing.append({"rank": rank, "role": contract.rank_role(rank), "job": contract.job_name(name, *key),
                        "pod": (pod.get("metadata") or {}).get("name", "") if pod else "", "why": why_pending(pod)})
    if not missing:
        return None
    return {"jobset": name, "waited": int(waited), "window": window, "restarts": restarts, "started": started,
            "missing": missing}


def describe(verdict):
    """One line: which ranks never started within the window, and why."""
    ranks = "; ".join("rank %d (%s)%s: %s" % (m["rank"], m["role"], ", pod " + m["pod"] if m["pod"] else "", m["why"])
                      for m in verdict["missing"])
    return "not started whole within its @jobset(start_window) of %d s (%d s since it became active; %s started): %s" % (
        verdict["window"], verdict["waited"],
        "ranks " + ", ".join(map(str, verdict["started"])) if verdict["started"] else "no rank", ranks)


def event(jobset, ns, verdict, now):
    """The Warning Event on the JobSet's name that says why the watch let it go."""
    meta = jobset.get("metadata") or {}
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "%s.%x" % (meta.get("name"), int(now.timestamp() * 1e9)), "namespace": ns,
                     "annotations": {contract.GANG_NOT_STARTED_ANNOTATION: json.dumps(verdict, sort_keys=True)}},
        "involvedObject": {"apiVersion": jobset.get("apiVersion") or JOBSET_API_VERSION, "kind": "JobSet",
                           "name": meta.get("name"), "namespace": ns, "uid": meta.get("uid")},
        "reason": contract.GANG_NOT_STARTED_REASON, "type": "Warning", "message": describe(verdict)[:1024],
        "source": {"component": EVENT_SOURCE}, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


def sweep(api, ns, workflow, now):
    """Let go of the run's gangs that cannot start whole (the two rules above); one line for each."""
    selector = "%s=%s" % (contract.ARGO_WORKFLOW_LABEL, workflow)
    jobsets = (api.get(JOBSET_LIST % ns, labelSelector=selector) or {}).get("items") or []
    queued = [j for j in jobsets if contract.KUEUE_QUEUE_LABEL in ((j.get("metadata") or {}).get("labels") or {})]
    said = []
    for name, queue, waited, deadline in overdue(queued, now):
        kueue = gang_report.kueue_said(api, ns, [name])
        api.delete(gang_report.JOBSETS % (ns, name))
        said.append("deleted JobSet %s: suspended in Kueue queue %s for %d s, longer than its step's @timeout "
                    "(%d s); Kueue said: %s" % (name, queue, waited, deadline, kueue[1] if kueue else "nothing"))
    for jobset in jobsets:
        window, since = _annotation_int(jobset, contract.START_WINDOW_ANNOTATION), active_since(jobset)
        if window is None or since is None or (now - since).total_seconds() < window:
            continue  # no need to read its pods
        name = jobset["metadata"]["name"]
        pods = (api.get(gang_report.PODS % ns, labelSelector="%s=%s" % (contract.JOBSET_NAME_LABEL, name))
                or {}).get("items") or []
        verdict = not_started(jobset, pods, now)
        if verdict is None:
            continue
        try:
            api.post(gang_report.EVENTS % ns, event(jobset, ns, verdict, now))
            recorded = ""
        except Exception as e:  # let it go all the same: its run must not wait for ever
            recorded = " (not recorded for the failure report: %s)" % e
        api.delete(gang_report.JOBSETS % (ns, name))
        said.append("deleted JobSet %s: %s%s" % (name, describe(verdict), recorded))
    return said


def main(workflow):
    try:
        api, ns = gang_report.KubeApi(), gang_report.namespace()
    except Exception as e:
        print("queue watch off: %s" % e)
        return 0
    print("watching the gangs of run %s (namespace %s), every %d s: each must start whole within its "
          "@jobset(start_window), and a queued one be admitted within its @timeout" % (workflow, ns, POLL_SECONDS))
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
