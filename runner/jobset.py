"""Play the JobSet controller (and the Job controller under it) for the JobSets mfargo writes.

A resource template that creates a ``jobset.x-k8s.io/v1alpha2`` JobSet ends up here
(:func:`run_resource`).  The runner plays the spec ``templates/jobset.py`` writes, and
:func:`essential_problems` refuses anything else when the JobSet is created, so each part
below has one shape:

* every replicatedJob gets ``replicas`` Jobs ``<js>-<rjob>-<i>``, each running one pod
  (mfargo's Jobs: ``completions``/``parallelism`` 1, ``backoffLimit`` 0) named
  ``<job>-0-<5 random>``, hostname ``<job>-0``, subdomain ``network.subdomain``; all Jobs
  start at once, their pods admitted together (:mod:`runner.slots`), and a gang with more
  pods than ``--max-workers`` is refused before any of them is made;
* pods carry the labels and annotations the JobSet and Job controllers add; the Jobs and
  pods of the current generation are kept as API objects (``kube_objects.py``);
* a failed pod fails its Job: ``PodFailurePolicy`` if a ``podFailurePolicy`` rule says
  ``FailJob``, else ``BackoffLimitExceeded``; so does the Job's ``activeDeadlineSeconds``
  (``DeadlineExceeded``);
* every Job complete (``successPolicy: {operator: All}``) -> terminalState Completed; a
  failed Job -> ``failurePolicy`` (:mod:`runner.job_policy`): restart the whole gang (kill
  all pods, restarts + 1, new pods with restart-attempt + 1) or terminalState Failed;
* when the JobSet finishes, still-running pods are killed.

The resource step (:func:`run_resource`) is what Argo's executor does with ``kubectl``: parse
the substituted manifest, create it, then watch it until ``failureCondition`` (checked
first) or ``successCondition`` holds; mfargo's read ``status.terminalState``.  Where a real
step would wait forever (the JobSet settled in a state no condition matches) the step fails
with an explanation instead.
"""
from __future__ import annotations

import asyncio
import copy
import hashlib
import uuid
from typing import Any

from metaflow_extensions.mfargo.plugins import pod_contract as contract
from mfargo.base import k8s_syntax

from . import events as ev
from . import bounded_yaml, dialect, job_policy, kube_objects, limits
from .dialect import NOT_HERE
from .model import random_suffix
from .pod import PodError, PodRunner, PodSpec

GROUP = "jobset.x-k8s.io"
API_VERSION = "jobset.x-k8s.io/v1alpha2"


class JobSetError(Exception):
    """The resource step failed: kubectl's error (AlreadyExists, an invalid object) or a
    condition; the message is what the node shows."""


# ------------------------------------------------------------------ what is created

def _pod_problems(job: Any, where: str) -> list[str]:
    """[] when a replicatedJob's Job runs mfargo's one pod of one container."""
    pod_spec = (job.get("template") or {}).get("spec") if isinstance(job, dict) else None
    if not isinstance(pod_spec, dict) or not isinstance(pod_spec.get("containers"), list) \
            or not pod_spec["containers"]:
        return [f"{where}.template.spec.containers: required"]
    if pod_spec.get("initContainers"):
        return [f"{where}.template.spec.initContainers {NOT_HERE}"]
    if len(pod_spec["containers"]) > 1:
        return [f"{where}.template.spec.containers: more than one {NOT_HERE} (mfargo writes one)"]
    return []


def essential_problems(obj: Any) -> list[str]:
    """What the runner needs to play a JobSet at all: mfargo's spec and names it can use."""
    if not isinstance(obj, dict):
        return ["manifest is not an object"]
    problems: list[str] = []
    if obj.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion: expected {API_VERSION!r}, got {obj.get('apiVersion')!r}")
    if obj.get("kind") != "JobSet":
        problems.append(f"kind: expected 'JobSet', got {obj.get('kind')!r}")
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if name is None and meta.get("generateName"):
        name = meta["generateName"] + "xxxxx"
    if not isinstance(name, str) or not name:
        problems.append("metadata.name: required")
    elif not k8s_syntax.is_dns1123_label(name):
        problems.append(f"metadata.name: {name!r} must be a DNS-1123 label of at most 63 characters")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return problems + ["spec: required"]
    problems += dialect.problems(spec, dialect.JOBSET_SPEC, "spec")
    if problems:  # past here, every object of the spec has the dialect's shape
        return problems
    rjobs = spec.get("replicatedJobs")
    if not rjobs:
        return ["spec.replicatedJobs: at least one replicatedJob is required"]
    seen = set()
    for i, rj in enumerate(rjobs):
        where = f"spec.replicatedJobs[{i}]"
        rname = rj.get("name")
        if not isinstance(rname, str) or not rname:
            problems.append(f"{where}.name: required")
        elif rname in seen:
            problems.append(f"{where}.name: duplicate {rname!r}")
        seen.add(rname)
        replicas = rj.get("replicas", 1)
        if not isinstance(replicas, int) or isinstance(replicas, bool):
            problems.append(f"{where}.replicas: {replicas!r} is not of type 'integer'")
        elif replicas < 0:
            problems.append(f"{where}.replicas: must be >= 0")
        elif isinstance(name, str) and isinstance(rname, str):
            problem = k8s_syntax.child_job_problem(name, rname, replicas)
            if problem:
                problems.append(f"{where}: {problem}")
        problems += _pod_problems((rj.get("template") or {}).get("spec"), f"{where}.template.spec")
    return problems


def validate(obj: dict) -> list[str]:
    """The essentials, then ``mfargo.base.validation`` (the CRD schema and the webhook's rules)."""
    from mfargo.base.validation import validate_documents

    return essential_problems(obj) or list(validate_documents([obj]))


def gang_problem(obj: dict, max_workers: int) -> str:
    """Why this JobSet cannot run here ('' if it can): more pods than limits.MAX_GANG_SIZE,
    or more than --max-workers (a gang runs whole or not at all; one pod per Job)."""
    pods = sum(int(rj.get("replicas", 1)) for rj in obj["spec"]["replicatedJobs"])
    if pods > limits.MAX_GANG_SIZE:
        return limits.over("its pods (replicas x completions)", pods, limits.MAX_GANG_SIZE)
    if pods > max_workers:
        return (f"its gang of {pods:,} pods that run at once is more than --max-workers {max_workers}; "
                f"run with --max-workers {pods} or more")
    return ""


# ------------------------------------------------------------------ its pods

def job_keys(obj: dict, rjob: str, replicas: int, j: int, g: int, restart: int, total: int) -> dict[str, str]:
    """The labels (and annotations) the JobSet controller puts on Job ``j`` of ``rjob`` and its pods."""
    meta = obj["metadata"]
    name = meta["name"]
    job = contract.job_name(name, rjob, j)
    return {
        "jobset.sigs.k8s.io/jobset-name": name,
        "jobset.sigs.k8s.io/jobset-uid": meta.get("uid", ""),
        "jobset.sigs.k8s.io/replicatedjob-name": rjob,
        "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas),
        "jobset.sigs.k8s.io/job-index": str(j),
        "jobset.sigs.k8s.io/job-global-index": str(g),
        "jobset.sigs.k8s.io/global-replicas": str(total),
        "jobset.sigs.k8s.io/restart-attempt": str(restart),
        "jobset.sigs.k8s.io/job-key": hashlib.sha256(f"{meta['namespace']}/{job}".encode()).hexdigest(),
    }


def build_pod(obj: dict, rjob: str, replicas: int, j: int, g: int, restart: int, total: int) -> PodSpec:
    """The pod of Job ``j`` of replicated job ``rjob`` in gang generation ``restart`` (after create's
    defaults: ``metadata.namespace``, ``network``)."""
    spec, meta = obj["spec"], obj["metadata"]
    name, ns = meta["name"], meta["namespace"]
    job_name = contract.job_name(name, rjob, j)
    rj = next(r for r in spec["replicatedJobs"] if r["name"] == rjob)
    pod_tmpl = rj["template"]["spec"]["template"]
    pmeta, pspec = pod_tmpl.get("metadata") or {}, pod_tmpl["spec"]
    network = spec["network"]
    dns = network["enableDNSHostnames"] is not False
    keys = {**job_keys(obj, rjob, replicas, j, g, restart, total), "batch.kubernetes.io/job-completion-index": "0"}
    labels = {**(pmeta.get("labels") or {}), **keys, "batch.kubernetes.io/job-name": job_name, "job-name": job_name}
    deadline = pspec.get("activeDeadlineSeconds")
    return PodSpec(
        name=f"{job_name}-0-{random_suffix()}", namespace=ns, uid=str(uuid.uuid4()),
        container=pspec["containers"][0], volumes=list(pspec.get("volumes") or []),
        hostname=pspec.get("hostname") or (f"{job_name}-0" if dns else ""),
        subdomain=(pspec.get("subdomain") or network["subdomain"]) if dns else "",
        labels={k: str(v) for k, v in labels.items()},
        annotations={k: str(v) for k, v in {**(pmeta.get("annotations") or {}), **keys}.items()},
        service_account=pspec.get("serviceAccountName") or "default",
        active_deadline=float(deadline) if deadline is not None else None,
        termination_grace=pspec.get("terminationGracePeriodSeconds"),
        extra_env={"JOB_COMPLETION_INDEX": "0"}, display=f"{name}/{rjob}-{j}", gang_admitted=True)


# ------------------------------------------------------------------ the controllers

class _JobFailed(Exception):
    """A Job's Failed condition (reason, message) and the pod that made it fail."""

    def __init__(self, reason: str, message: str, pod: job_policy.PodOutcome | None = None):
        super().__init__(message)
        self.reason, self.message, self.pod = reason, message, pod


class JobSet:
    """One live JobSet: its object, a change counter and the controller task."""

    def __init__(self, obj: dict, controller: "JobSetController"):
        self.obj = obj
        self.controller = controller
        self.version = 0
        self._event = asyncio.Event()
        self.settled = False  # nothing will change any more
        self.task: asyncio.Task | None = None
        self.objects = kube_objects.Generation()  # its Jobs and pods, as the API server shows them

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]

    @property
    def status(self) -> dict:
        return self.obj["status"]

    def snapshot(self) -> dict:
        return copy.deepcopy(self.obj)

    def bump(self) -> None:
        self.version += 1
        old, self._event = self._event, asyncio.Event()
        old.set()

    async def wait_change(self, version: int) -> None:
        if self.version == version:
            await self._event.wait()

    async def run(self) -> None:
        fp = self.obj["spec"].get("failurePolicy")
        max_restarts = int((fp or {}).get("maxRestarts") or 0)
        self.status.update({"restarts": 0, "restartsCountTowardsMax": 0})
        try:
            while True:
                async with self.controller.pods.slots.admit(self.gang_size()):  # the gang's pods together
                    failure = await self._generation(int(self.status["restarts"]))
                if failure is None:
                    return self._finish("Completed", "AllJobsCompleted", "jobset completed successfully")
                action = job_policy.failure_action(fp, failure.reason)
                self._emit(f"Job {failure.job} failed ({failure.reason}): {failure.message}")
                if action == "RestartJobSet" and self.status["restartsCountTowardsMax"] < max_restarts:
                    self.status["restarts"] += 1
                    self.status["restartsCountTowardsMax"] += 1
                    self._emit(f"{job_policy.ACTION_MESSAGES[action]} (first failed job: {failure.job}): restarting "
                               f"the gang (restart {self.status['restarts']}, maxRestarts {max_restarts})")
                    self.bump()
                    continue
                reason, message = job_policy.failed_condition(fp, action)
                return self._finish("Failed", reason, f"{message} (first failed job: {failure.job})")
        finally:
            self.settled = True
            self.bump()

    def gang_size(self) -> int:
        return sum(int(rj.get("replicas", 1)) for rj in self.obj["spec"]["replicatedJobs"])

    def _finish(self, state: str, reason: str, message: str) -> None:
        self.status["terminalState"] = state
        self.status.setdefault("conditions", []).append({
            "type": state, "status": "True", "reason": reason, "message": message,
            "lastTransitionTime": kube_objects.now()})
        self._emit(f"{state}: {message}")

    def _emit(self, message: str) -> None:
        self.controller.on_event(ev.Event(ev.JOBSET, node=self.name, message=message))

    def _publish(self, counts: dict[str, dict[str, int]]) -> None:
        self.status["replicatedJobsStatus"] = [{"name": n, **c, "suspended": 0} for n, c in counts.items()]
        self.bump()

    async def _generation(self, restart: int) -> job_policy.Failure | None:
        """Run one generation of all Jobs; None when every one completed, else the first failure."""
        self.objects.reset()  # a restart deletes the previous generation's Jobs and pods
        rjobs = [(rj, int(rj.get("replicas", 1))) for rj in self.obj["spec"]["replicatedJobs"]]
        total = sum(n for _, n in rjobs)
        counts = {rj["name"]: {"ready": 0, "succeeded": 0, "failed": 0, "active": n} for rj, n in rjobs}
        jobs = [(rj, n, j) for rj, n in rjobs for j in range(n)]
        tasks = {asyncio.ensure_future(self._run_job(rj, n, j, g, restart, total, counts)): (rj["name"], j)
                 for g, (rj, n, j) in enumerate(jobs)}
        self._publish(counts)
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    rname, j = tasks[t]
                    job, exc = contract.job_name(self.name, rname, j), t.exception()
                    counts[rname]["active"] -= 1
                    counts[rname]["failed" if exc else "succeeded"] += 1
                    self.objects.job_finished(job, exc)
                    self._publish(counts)
                    if exc is not None and not isinstance(exc, _JobFailed):
                        raise exc
                    if exc is not None:
                        return job_policy.Failure(rname, job, exc.reason, exc.message, exc.pod)
            return None
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _run_job(self, rj: dict, replicas: int, j: int, g: int, restart: int, total: int,
                       counts: dict) -> None:
        """One Job: its one pod (backoffLimit 0: a counted failure fails the Job), within its deadline."""
        job_spec = rj["template"]["spec"]
        job_name = contract.job_name(self.name, rj["name"], j)
        self.objects.job_started(job_name, self.obj["metadata"]["namespace"],
                                 job_keys(self.obj, rj["name"], replicas, j, g, restart, total))

        async def one_pod() -> None:
            pod = await self._run_pod(rj, replicas, j, g, restart, total, job_name, counts)
            if pod.phase == "Succeeded":
                return
            act, why = job_policy.action(job_spec.get("podFailurePolicy"), pod)
            if why:
                self._emit(f"Job {job_name}: {why}")
            if act == "FailJob":
                raise _JobFailed("PodFailurePolicy", why, pod)
            raise _JobFailed("BackoffLimitExceeded", "Job has reached the specified backoff limit", pod)

        deadline = job_spec.get("activeDeadlineSeconds")
        try:
            await asyncio.wait_for(one_pod(), timeout=float(deadline) if deadline is not None else None)
        except asyncio.TimeoutError:
            raise _JobFailed("DeadlineExceeded", "Job was active longer than specified deadline") from None

    async def _run_pod(self, rj: dict, replicas: int, j: int, g: int, restart: int, total: int,
                       job_name: str, counts: dict) -> job_policy.PodOutcome:
        pod = build_pod(self.obj, rj["name"], replicas, j, g, restart, total)
        self.objects.pod_started(pod)
        self._emit(f"pod {pod.name} started (job {job_name}, restart-attempt {restart})")
        counts[rj["name"]]["ready"] += 1
        self._publish(counts)
        container = pod.container.get("name") or ""
        try:
            fault = job_policy.faults(pod.annotations).get((rj["name"], j, restart))
        except ValueError as e:
            self.controller.on_event(ev.Event(ev.WARNING, node=self.name, message=f"{e}: no fault played"))
            fault = None
        try:
            outcome = await self._run_pod_process(pod, container, fault)
        except PodError as e:  # the pod cannot even be created: it counts as a failed pod
            outcome = job_policy.PodOutcome(pod.name, pod.namespace, container, "Failed", None, "Error", str(e))
        self.objects.pod_finished(outcome)
        if outcome.phase == "Succeeded":
            self._emit(f"pod {pod.name} succeeded")
        else:
            self._emit(f"pod {pod.name} failed: {outcome.message}"
                       + (f" ({outcome.reason})" if outcome.reason != "Error" else ""))
        return outcome

    async def _run_pod_process(self, pod: PodSpec, container: str, fault: job_policy.Fault | None):
        """Run the pod; a fault, if the pod is still running after its delay, ends it as the kubelet would."""
        run = asyncio.ensure_future(self.controller.pods.run(pod))
        if fault is not None:
            done, _ = await asyncio.wait({run}, timeout=fault.delay)
            if not done:
                run.cancel()
                await asyncio.gather(run, return_exceptions=True)
                self._emit(f"pod {pod.name}: the runner plays a {fault.kind}")
                return fault.outcome(pod.name, pod.namespace, container)
        res = await run
        return job_policy.PodOutcome(pod.name, pod.namespace, container, res.phase, res.exit_code,
                                     res.reason, res.message)


class JobSetController:
    """All JobSets created during one run (the 'API server' for them): create (with the
    defaults the JobSet webhook fills in), get; each JobSet then runs itself."""

    def __init__(self, pods: PodRunner, namespace: str, on_event: ev.EventCallback):
        self.pods = pods
        self.namespace = namespace
        self.on_event = on_event
        self.jobsets: dict[tuple[str, str], JobSet] = {}
        self.deleted: list[JobSet] = []  # still in the run's record

    def create(self, obj: dict, owner: dict | None = None) -> JobSet:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + random_suffix()
        ns = meta["namespace"] = meta.get("namespace") or self.namespace
        if (ns, meta["name"]) in self.jobsets:
            raise JobSetError(f'Error from server (AlreadyExists): jobsets.{GROUP} "{meta["name"]}" already exists')
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=kube_objects.now())
        meta.setdefault("labels", {})
        meta.setdefault("annotations", {})
        if owner:
            meta["ownerReferences"] = [owner]
        spec = obj["spec"]
        for rj in spec["replicatedJobs"]:
            rj.setdefault("replicas", 1)
        spec.setdefault("successPolicy", {}).setdefault("operator", "All")
        net = spec.setdefault("network", {})
        net.setdefault("enableDNSHostnames", True)
        net.setdefault("subdomain", meta["name"])
        problem = gang_problem(obj, self.pods.slots.capacity)
        if problem:  # before any pod: a gang is never forked past the machine's slots
            raise JobSetError(f'JobSet "{meta["name"]}": {problem}')
        obj["status"] = {}
        js = self.jobsets[(ns, meta["name"])] = JobSet(obj, self)
        js.task = asyncio.ensure_future(js.run())
        self.on_event(ev.Event(ev.JOBSET, node=meta["name"], message="created"))
        return js

    def get(self, name: str, namespace: str | None = None) -> JobSet | None:
        return self.jobsets.get((namespace or self.namespace, name))

    def delete(self, name: str, namespace: str) -> bool:
        """Forget a finished JobSet (its pods have ended), as the gang failure report asks;
        False for one still running: mfargo never deletes those."""
        js = self.jobsets.get((namespace, name))
        if js is None or not js.status.get("terminalState"):
            return False
        self.deleted.append(self.jobsets.pop((namespace, name)))
        return True

    async def shutdown(self) -> None:
        """The run is over: JobSets owned by it die with it."""
        tasks = [js.task for js in self.jobsets.values() if js.task and not js.task.done()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# ------------------------------------------------------------------ the resource step

def terminal_state(condition: str | None) -> str | None:
    """The state a condition waits for: mfargo writes ``status.terminalState == <state>``
    (templates/jobset.py; the preflight refuses any other condition)."""
    return condition.split("==")[1].strip() if condition else None


async def run_resource(resource: dict, controller: JobSetController, *, owner: dict | None) -> None:
    """Create the JobSet and wait for a condition; raises JobSetError if the step fails."""
    try:
        docs = [d for d in bounded_yaml.load_all(str(resource.get("manifest") or "")) if d is not None]
    except bounded_yaml.YamlError as e:
        raise JobSetError(f"error: error parsing manifest: {e}") from None
    if len(docs) != 1:
        raise JobSetError(f"the manifest must hold exactly one object, found {len(docs)}")
    obj = docs[0]
    problems = validate(obj)  # a JobSet as mfargo writes it, then the schema (mfargo.base.validation)
    if problems:
        raise JobSetError("The JobSet is invalid: " + "; ".join(problems))
    owner_ref = owner if resource.get("setOwnerReference") else None
    js = controller.create(obj, owner_ref)

    success = terminal_state(resource.get("successCondition"))
    failure = terminal_state(resource.get("failureCondition"))
    while True:
        version = js.version
        state = js.obj.get("status", {}).get("terminalState")
        if failure is not None and state == failure:
            raise JobSetError(f"{js.name} failed: failure condition '{resource['failureCondition']}' matched "
                              f"(terminalState={state})")
        if success is None or state == success:
            break
        if js.settled:
            raise JobSetError(
                f"JobSet {js.name} will not change any more (terminalState={state}) and successCondition "
                f"'{resource.get('successCondition')}' does not match: a real Argo step would wait forever")
        await js.wait_change(version)
