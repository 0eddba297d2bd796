"""Why a gang failed, read from the objects the Kubernetes controllers wrote.

A failed JobSet only says *that* it failed (and, in its Failed condition, which Job
failed first). The reason lives one level down: the Job's Failed condition
(``DeadlineExceeded``, ``BackoffLimitExceeded``, ``PodFailurePolicy``) and, below it, the
pod's status (``reason: Evicted``/``DeadlineExceeded``, a ``DisruptionTarget`` condition)
and its container's ``terminated`` state (exit code, ``OOMKilled``/``Error``). A rank
whose pod never ran (an image that cannot be pulled, a pod no node can hold) only shows its
Job's ``DeadlineExceeded``: why it never started is in the warnings the scheduler and the
kubelet recorded as Events of its pod (``never_started``). ``first_failure`` combines them
into one ``GangFailure``. Pure functions over the API objects as JSON, so the same code reads
a real cluster and the local runner.
"""

import json
import re
from dataclasses import asdict, dataclass, replace

from . import pod_contract

JOBSET_NAME = pod_contract.JOBSET_NAME_LABEL
REPLICATED_JOB = pod_contract.REPLICATED_JOB_LABEL
JOB_INDEX = pod_contract.JOB_INDEX_LABEL
JOB_NAME = pod_contract.JOB_NAME_LABEL
# The JobSet controller's Failed message ends with the first failed Job (messageWithFirstFailedJob).
CONTROL_UNREACHABLE = "ControlUnreachable"  # a worker gang_control.py stopped: not the user's code
SAID_CHARS = 1000  # of a container's termination message, in the report
# Event reasons saying why a pod never ran, most telling first: the kubelet's pull failure
# (its message holds the registry's answer) and the scheduler's; "BackOff" only repeats them.
_NOT_STARTED = ("Failed", "FailedScheduling", "FailedMount", "FailedCreatePodSandBox", "BackOff")
_FIRST_FAILED_JOB = re.compile(r"first failed job: ([a-z0-9.-]+)")


@dataclass(frozen=True)
class GangFailure:
    """The first rank that failed and why, as stored in the task metadata (JSON)."""

    jobset: str
    rank: int  # Metaflow's split index: control 0, worker i is i + 1
    role: str  # control | worker
    job: str
    pod: str  # "" when the pod was already gone
    reason: str  # OOMKilled, Evicted, DeadlineExceeded, Error, ...
    exit_code: "int | None"
    jobset_reason: str  # the JobSet's Failed condition reason (ReachedMaxRestarts, ...)
    restarts: int  # gang restarts inside the JobSet before it failed
    said: str = ""  # what the container wrote to its termination log (gang_control: why it stopped)

    def message(self, step):
        code = "no exit code" if self.exit_code is None else "exit code %d" % self.exit_code
        where = "pod %s" % self.pod if self.pod else "job %s" % self.job
        said = ": %s" % self.said if self.said else ""
        return "gang step %s: rank %d (%s) failed first: %s, %s%s (%s; JobSet %s: %s after %d restart%s)" % (
            step, self.rank, self.role, self.reason, code, said, where, self.jobset, self.jobset_reason,
            self.restarts, "" if self.restarts == 1 else "s")

    def to_json(self):
        return json.dumps(asdict(self), sort_keys=True)


def _condition(obj, kind):
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status", "True") == "True":
            return cond
    return None


def _first_failed_job(jobset, jobs):
    """The Job the JobSet controller names, else the earliest Failed one (then by rank)."""
    failed = [j for j in jobs if _condition(j, "Failed")]
    if not failed:
        return None
    named = _FIRST_FAILED_JOB.search((_condition(jobset, "Failed") or {}).get("message") or "")
    for job in failed:
        if named and job["metadata"]["name"] == named.group(1):
            return job
    return min(failed, key=lambda j: (_condition(j, "Failed").get("lastTransitionTime") or "", _rank(j)))


def _rank(obj):
    labels = obj["metadata"].get("labels") or {}
    return pod_contract.gang_rank(labels.get(REPLICATED_JOB) or pod_contract.RANKS_JOB, labels.get(JOB_INDEX) or 0)


def _failed_pod(job, pods):
    name = job["metadata"]["name"]
    mine = [p for p in pods if (p["metadata"].get("labels") or {}).get(JOB_NAME) == name
            and (p.get("status") or {}).get("phase") == "Failed"]
    return max(mine, key=lambda p: _terminated(p).get("finishedAt") or "", default=None)


def _ran_before(job, pods, failed_at):
    """Whether a pod of the Job ran its container to an exit code, started before ``failed_at``
    (when the gang's first Job failed). An unscheduled pod that its Job's deadline deleted is
    marked Failed by the pod garbage collector before it goes, with no container status: it never
    ran. One that a node took only once the first deadline freed it, and that its own deadline
    then stopped, ran too late to count: the others waited for it all along."""
    pod = _failed_pod(job, pods)
    if pod is None or _terminated(pod).get("exitCode") is None:
        return False
    started = _terminated(pod).get("startedAt") or ""
    return not (failed_at and started and started >= failed_at)


def _terminated(pod):
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == pod_contract.GANG_CONTAINER and (status.get("state") or {}).get("terminated"):
            return status["state"]["terminated"]
    return {}


def _reason(job, pod):
    """Most specific first: the pod's own reason, a disruption, the container's, the Job's."""
    job_reason = _condition(job, "Failed").get("reason") or "Failed"
    if pod is None:
        return job_reason
    if _terminated(pod).get("exitCode") == pod_contract.CONTROL_UNREACHABLE_EXIT:
        return CONTROL_UNREACHABLE
    status = pod.get("status") or {}
    disruption = _condition(pod, "DisruptionTarget")
    if status.get("reason"):
        return status["reason"]
    if disruption:
        return "Evicted (%s)" % (disruption.get("reason") or "DisruptionTarget")
    if job_reason == "DeadlineExceeded":
        return job_reason
    return _terminated(pod).get("reason") or job_reason


def expected_ranks(jobset):
    """{(replicated job, job index): rank} of every rank the JobSet's spec asks for."""
    ranks = {}
    for job in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        name = job.get("name")
        try:
            replicas = int(job.get("replicas", 1))
        except (TypeError, ValueError):
            continue
        for index in range(replicas):
            ranks[(name, index)] = pod_contract.gang_rank(name, index) if name in pod_contract.FIRST_RANK else index
    return ranks


def never_started(job_name, events):
    """Why the pods of a Job never ran, from their Warning events: "never started: <reason>:
    <message>", or "" when no event says (a Job's pods are named <job>-<5 chars>)."""
    mine = [e for e in events if e.get("type") == "Warning" and e.get("reason") in _NOT_STARTED
            and (e.get("involvedObject") or {}).get("kind") == "Pod"
            and str((e.get("involvedObject") or {}).get("name") or "").startswith(job_name + "-")]
    if not mine:
        return ""

    def when(event):
        return event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp") or ""
    def telling(event):  # the kubelet follows "Failed to pull image ...: <why>" with "Error: ErrImagePull"
        return _NOT_STARTED.index(event["reason"]), str(event.get("message") or "").startswith("Error: ")
    best = min(telling(e) for e in mine)
    event = max((e for e in mine if telling(e) == best), key=when)  # the newest of those
    return "never started: %s: %s" % (event["reason"], " ".join(str(event.get("message") or "").split()))


def never_ran(failure):
    """Whether the first failed rank's pod was stopped by its deadline before it ran: the
    report then reads the pod's Events (never_started)."""
    return failure.reason == "DeadlineExceeded" and failure.exit_code is None and not failure.said


def first_failure(jobset, jobs, pods, events=()):
    """The GangFailure of a Failed JobSet, or None when no Job of it failed. `events`: those
    of the namespace's pods, read when the first failed rank never ran (never_ran).

    When one rank cannot start, the ranks that did wait for it until the deadline: the rank
    whose pod never started is the cause, so it is named (with the gang's deadline as its
    reason; its own Job may not be marked failed yet) before the started rank the JobSet saw
    fail first, whether or not its Job is still there."""
    job = _first_failed_job(jobset, jobs)
    if job is None:
        return None
    failure = _failure(jobset, job, pods, events)
    if events and never_ran(failure):
        failed_at = _condition(job, "Failed").get("lastTransitionTime") or ""
        for other in sorted(_with_deleted_jobs(jobset, jobs), key=_rank):
            said = never_started(other["metadata"]["name"], events)[:SAID_CHARS]
            if said and not _ran_before(other, pods, failed_at):
                rank = _rank(other)
                return replace(failure, rank=rank, role=pod_contract.rank_role(rank), job=other["metadata"]["name"],
                               pod="", said=said)
    return failure


def _with_deleted_jobs(jobset, jobs):
    """``jobs``, and a stand-in for each Job the JobSet's spec asks for that is not among them:
    a JobSet that fails deletes its Jobs still active, which can be the one whose pod never
    started (its pod's Events outlive it)."""
    name = jobset["metadata"]["name"]
    listed = {j["metadata"]["name"] for j in jobs}
    gone = [{"metadata": {"name": pod_contract.job_name(name, rjob, index),
                          "labels": {JOBSET_NAME: name, REPLICATED_JOB: rjob, JOB_INDEX: str(index)}}}
            for rjob, index in expected_ranks(jobset)]
    return list(jobs) + [j for j in gone if j["metadata"]["name"] not in listed]


def _failure(jobset, job, pods, events):
    pod = _failed_pod(job, pods)
    status = jobset.get("status") or {}
    exit_code = _terminated(pod).get("exitCode") if pod else None
    rank = _rank(job)
    said = " ".join(str(_terminated(pod).get("message") or "").split())[:SAID_CHARS] if pod else ""
    if not said and exit_code is None:
        said = never_started(job["metadata"]["name"], events)[:SAID_CHARS]
    return GangFailure(
        jobset=jobset["metadata"]["name"], rank=rank, role=pod_contract.rank_role(rank), job=job["metadata"]["name"],
        pod=pod["metadata"]["name"] if pod else "", reason=_reason(job, pod),
        exit_code=int(exit_code) if exit_code is not None else None,
        said=said,
        jobset_reason=(_condition(jobset, "Failed") or {}).get("reason") or "Failed",
        restarts=int(status.get("restarts") or 0))
