"""``python -m ...gang_report FLOW RUN STEP CONTROL_TASK TERMINATION_LOG JOBSET...``

What a gang step's failure-report task runs once the step failed for good (the DAG task
``<step>-failure-report``, templates/gang_report.py). It reads the step's newest
JobSet (the names are this step's attempts, newest first), its Jobs and their pods (and,
when the first failed rank never ran, its pods' Events) from the Kubernetes API with the
pod's service account (the workflow's Role grants get/list),
works out which rank failed first and why (``gang_failure``), or, for a gang whose JobSet
the run's gang watch deleted (``queue_watch``), why: which ranks never started within its
start window and the scheduler's reason (the watch's Event, ``let_go``), or, for a queued
gang, what Kueue said about it, then:

* records it as the ``gang-failure`` metadata of the control task's last attempt (the
  gang's attempt in Metaflow's client and UI), when that task exists (a gang whose pods
  never ran has none: the report still says why),
* writes it to its termination log, which Argo shows as this node's message,
* deletes the step's finished JobSets (their Jobs and pods first: foreground), so that
  ``argo retry`` of the run, which makes the gang's node again under the same name, can
  create its JobSet again; what they said is in the report and the pods' logs are in
  Metaflow's datastore. A JobSet still running is never deleted,
* prints it and exits 1.

The API is reached as every pod reaches it (KUBERNETES_SERVICE_HOST/PORT, the mounted
token and CA). The local runner serves the same reads on a loopback address without a
token; only then is plain HTTP used.
"""

import ipaddress
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from . import gang_attempt, gang_failure, pod_contract

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
METADATA_FIELD = "gang-failure"
TIMEOUT_SECONDS = 10
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/%s/jobsets/%s"
JOBS = "/apis/batch/v1/namespaces/%s/jobs"
PODS = "/api/v1/namespaces/%s/pods"
EVENTS = "/api/v1/namespaces/%s/events"


FREE_WAIT_SECONDS = 120  # for deleted JobSets to be gone: their Jobs and pods go first
FREE_POLL_SECONDS = 1


class KubeApi:
    """A client for the pod's own API server: reads, and deletes of JobSets."""

    def __init__(self):
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise RuntimeError("KUBERNETES_SERVICE_HOST is not set: not running in a pod")
        token_file = os.path.join(SERVICE_ACCOUNT_DIR, "token")
        self.headers = {"Accept": "application/json"}
        self.context = None
        if os.path.exists(token_file):
            with open(token_file) as f:
                self.headers["Authorization"] = "Bearer " + f.read().strip()
            self.context = ssl.create_default_context(cafile=os.path.join(SERVICE_ACCOUNT_DIR, "ca.crt"))
            scheme = "https"
        elif ipaddress.ip_address(host).is_loopback:
            scheme = "http"  # the local runner's read-only API
        else:
            raise RuntimeError("no service account token in %s" % SERVICE_ACCOUNT_DIR)
        self.base = "%s://%s" % (scheme, host if ":" not in host else "[%s]" % host) + ":" + port

    def get(self, path, **query):
        return self._call("GET", path, None, **query)

    def post(self, path, body):
        """Create the object ``body`` at ``path`` (the gang watch's Events)."""
        return self._call("POST", path, body)

    def delete(self, path):
        """Delete the object at ``path`` after its dependents; None when it was not there."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"}
        return self._call("DELETE", path, body)

    def _call(self, method, path, body, **query):
        url = self.base + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self.headers, **({"Content-Type": "application/json"} if data else {}))
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS, context=self.context) as response:
                return json.load(response)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise RuntimeError("%s %s: HTTP %d %s" % (method, path, e.code, e.reason)) from None


def free(api, ns, jobset_names, wait=FREE_WAIT_SECONDS):
    """Delete the finished ones of ``jobset_names`` and wait until they are gone; one line
    saying what was done, or why it was not (``argo retry`` of the run then fails to
    create the gang again, and says so)."""
    deleted = []
    try:
        for name in jobset_names:
            jobset = api.get(JOBSETS % (ns, name))
            if jobset is not None and (jobset.get("status") or {}).get("terminalState"):
                api.delete(JOBSETS % (ns, name))
                deleted.append(name)
        deadline = time.monotonic() + wait
        left = list(deleted)
        while left:
            left = [name for name in left if api.get(JOBSETS % (ns, name)) is not None]
            if left and time.monotonic() > deadline:
                return "JobSets %s still being deleted after %ds (their Jobs and pods first)" % (
                    ", ".join(left), wait)
            if left:
                time.sleep(FREE_POLL_SECONDS)
    except Exception as e:
        return "JobSets not deleted (%s): argo retry of this run cannot create them again" % (e,)
    return "deleted JobSets %s: argo retry can run the gang again" % ", ".join(deleted) if deleted else ""


def namespace():
    path = os.path.join(SERVICE_ACCOUNT_DIR, "namespace")
    if os.path.exists(path):
        with open(path) as f:
            return f.read().strip()
    return os.environ.get("METAFLOW_KUBERNETES_POD_NAMESPACE") or "default"


def diagnose(api, ns, jobset_names):
    """(jobset name, GangFailure or None, why not) for the newest JobSet that exists."""
    for name in jobset_names:
        jobset = api.get(JOBSETS % (ns, name))
        if jobset is None:
            continue
        if (jobset.get("status") or {}).get("terminalState") != "Failed":
            return name, None, "JobSet %s did not fail (terminalState %s)" % (
                name, (jobset.get("status") or {}).get("terminalState"))
        selector = "%s=%s" % (gang_failure.JOBSET_NAME, name)
        jobs = (api.get(JOBS % ns, labelSelector=selector) or {}).get("items") or []
        pods = (api.get(PODS % ns, labelSelector=selector) or {}).get("items") or []
        failure = gang_failure.first_failure(jobset, jobs, pods)
        if failure is not None and gang_failure.never_ran(failure):
            events = (api.get(EVENTS % ns, fieldSelector="involvedObject.kind=Pod") or {}).get("items") or []
            failure = gang_failure.first_failure(jobset, jobs, pods, events)
        return name, failure, "" if failure else "JobSet %s failed but none of its Jobs did" % name
    return None, None, "none of the JobSets %s exists (the step failed before creating one)" % ", ".join(jobset_names)


def kueue_said(api, ns, jobset_names):
    """(JobSet name, message) of Kueue's last ``Pending`` event about the Workload of the newest
    of ``jobset_names`` it held (Kueue names it ``jobset-<JobSet>-<hash>``; events outlive it,
    for an hour by default), or None."""
    events = (api.get(EVENTS % ns, fieldSelector="involvedObject.kind=Workload") or {}).get("items") or []
    for name in jobset_names:
        pending = [e for e in events if e.get("reason") == "Pending"
                   and ((e.get("involvedObject") or {}).get("name") or "").startswith("jobset-%s-" % name)]
        if pending:
            last = max(pending, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
            return name, last.get("message") or "no reason given"
    return None


def let_go(api, ns, jobset_names):
    """(GangFailure, what the watch said) for the newest of ``jobset_names`` the run's gang watch
    deleted because its ranks did not all start within its start window (queue_watch.py: a
    GANG_NOT_STARTED_REASON Event on its name, details in GANG_NOT_STARTED_ANNOTATION), or None
    when a newer JobSet still exists or the watch let none go."""
    selector = "involvedObject.kind=JobSet,reason=%s" % pod_contract.GANG_NOT_STARTED_REASON
    events = (api.get(EVENTS % ns, fieldSelector=selector) or {}).get("items") or []
    for name in jobset_names:
        mine = [e for e in events if (e.get("involvedObject") or {}).get("name") == name]
        if not mine:
            if api.get(JOBSETS % (ns, name)) is not None:
                return None  # the newest JobSet is there: the ordinary report
            continue
        event = max(mine, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        try:
            verdict = json.loads(((event.get("metadata") or {}).get("annotations") or {})[
                pod_contract.GANG_NOT_STARTED_ANNOTATION])
            first = verdict["missing"][0]
        except (KeyError, IndexError, TypeError, ValueError):
            verdict, first = None, None
        if first is None:
            failure = None
        else:
            failure = gang_failure.GangFailure(
                jobset=name, rank=int(first["rank"]), role=first["role"], job=first.get("job", ""),
                pod=first.get("pod", ""), reason=NOT_STARTED, exit_code=None, jobset_reason=DELETED_BY_WATCH,
                restarts=int(verdict.get("restarts") or 0), said=str(first.get("why") or "")[:gang_failure.SAID_CHARS])
        return failure, event.get("message") or "no reason given"
    return None


NOT_STARTED = "NotStarted"  # the GangFailure reason of a rank the gang watch found never started
DELETED_BY_WATCH = "DeletedByGangWatch"


def never_admitted(api, ns, step, jobset_names):
    """For a queued gang (GANG_QUEUE_ENV) none of whose JobSets exists: the run's queue watch
    (queue_watch.py) deletes one that waited in its queue longer than the step's @timeout, so
    say so, with Kueue's reason when its events still hold it. None for a gang not queued."""
    queue = os.environ.get(pod_contract.GANG_QUEUE_ENV)
    if not queue:
        return None
    said = kueue_said(api, ns, jobset_names)
    if said is None:
        return ("gang step %s: none of its JobSets %s exists; one that waits in Kueue queue %s longer than its "
                "@timeout is deleted by the run's queue watch, whose log says when and why"
                % (step, ", ".join(jobset_names), queue))
    return ("gang step %s was never admitted by Kueue queue %s within its @timeout (JobSet %s deleted by the "
            "run's queue watch): %s" % (step, queue, said[0], said[1]))


def record(flow, run, step, task, failure):
    """The failure as metadata of the task's last started attempt."""
    from metaflow.metadata_provider import MetaDatum
    from metaflow.metaflow_config import DEFAULT_METADATA
    from metaflow.metaflow_environment import MetaflowEnvironment
    from metaflow.plugins import METADATA_PROVIDERS

    attempt = max(gang_attempt.next_attempt(flow, run, step, task) - 1, 0)
    flow_stub = type("Flow", (), {"name": flow})()
    provider = next(p for p in METADATA_PROVIDERS if p.TYPE == DEFAULT_METADATA)
    metadata = provider(MetaflowEnvironment(flow_stub), flow_stub, None, None)
    metadata.register_metadata(run, step, task, [MetaDatum(
        field=METADATA_FIELD, value=failure.to_json(), type=METADATA_FIELD,
        tags=["attempt_id:%d" % attempt])])
    return attempt


def main(flow, run, step, task, termination_log, *jobset_names):
    api = None
    try:
        api = KubeApi()
        watch = let_go(api, namespace(), jobset_names)
        if watch is None:
            name, failure, why_not = diagnose(api, namespace(), jobset_names)
            queued = never_admitted(api, namespace(), step, jobset_names) if name is None else None
    except Exception as e:  # the report must say something, whatever broke
        failure, message = None, "gang step %s failed; reading why failed too: %s" % (step, e)
    else:
        if watch is not None:
            failure, said = watch
            message = "gang step %s: JobSet %s deleted by the run's gang watch: %s" % (
                step, failure.jobset if failure else "?", said)
        else:
            message = failure.message(step) if failure else queued or \
                "gang step %s failed; no rank failure to report: %s" % (step, why_not)
    if failure is not None:
        try:
            attempt = record(flow, run, step, task, failure)
            print("recorded as metadata %r of task %s/%s/%s/%s attempt %d" % (
                METADATA_FIELD, flow, run, step, task, attempt))
        except Exception as e:  # e.g. a gang that never ran has no control task to record on
            print("not recorded as task metadata (%s): %s" % (type(e).__name__, e))
    print(message)
    with open(termination_log, "w") as f:
        f.write(message[:4096])  # the kubelet keeps at most 4096 bytes
    if api is not None:
        freed = free(api, namespace(), jobset_names)
        if freed:
            print(freed)
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
