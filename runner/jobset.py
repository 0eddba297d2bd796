"""Play the JobSet controller (and the Job controller under it) for one run.

A resource template that creates a ``jobset.x-k8s.io/v1alpha2`` JobSet ends up
here.  Behaviour follows the JobSet docs/README in shared/schemas:

* every replicatedJob gets ``replicas`` Jobs ``<js>-<rjob>-<i>``; each Job runs
  ``completions`` (default 1) indexed pods, ``parallelism`` at a time, named
  ``<job>-<index>-<5 random>``, hostname ``<job>-<index>`` and subdomain
  ``network.subdomain`` (default: the JobSet name); all Jobs start at once (gang),
  except with ``startupPolicy: InOrder`` / ``dependsOn``;
* pods carry the JobSet labels *and* annotations (jobset-name, replicatedjob-name,
  replicatedjob-replicas, job-index, job-global-index, restart-attempt, job-key,
  global-replicas, jobset-uid) plus ``batch.kubernetes.io/job-completion-index``
  and ``JOB_COMPLETION_INDEX`` (Indexed Jobs), merged over the pod template's metadata;
* a failed pod counts against the Job's ``backoffLimit`` (default 6); beyond it
  (or past the Job's ``activeDeadlineSeconds``) the Job fails;
* JobSet ``successPolicy`` (operator All/Any, targetReplicatedJobs) -> terminalState
  Completed; a failed Job -> ``failurePolicy.rules`` / ``maxRestarts`` (default 0):
  restart the whole gang (kill all pods, restarts + 1, new pods with
  restart-attempt + 1) or terminalState Failed;
* when the JobSet finishes, still-running pods are killed.

The live object (metadata + spec + status) is what Argo's success/failure
conditions and jsonPath outputs read.
"""
from __future__ import annotations

import asyncio
import copy
import hashlib
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from . import events as ev
from .model import random_suffix
from .pod import PodError, PodRunner, PodSpec

GROUP = "jobset.x-k8s.io"
API_VERSION = "jobset.x-k8s.io/v1alpha2"
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
JOB_BACKOFF_SECONDS = 10.0  # the Job controller's pod-failure back-off base


class JobSetError(Exception):
    """kubectl-like failure (AlreadyExists, NotFound, invalid object)."""


def essential_problems(obj: Any) -> list[str]:
    """The checks the runner needs to run a JobSet at all (subset of the API server's)."""
    problems: list[str] = []
    if not isinstance(obj, dict):
        return ["manifest is not an object"]
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
    elif len(name) > 63 or not _DNS1123.match(name):
        problems.append(f"metadata.name: {name!r} must be a DNS-1123 label of at most 63 characters")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return problems + ["spec: required"]
    rjobs = spec.get("replicatedJobs")
    if not isinstance(rjobs, list) or not rjobs:
        return problems + ["spec.replicatedJobs: at least one replicatedJob is required"]
    seen = set()
    for i, rj in enumerate(rjobs):
        where = f"spec.replicatedJobs[{i}]"
        if not isinstance(rj, dict):
            problems.append(f"{where}: must be an object")
            continue
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
            job = f"{name}-{rname}-{max(replicas - 1, 0)}"
            if len(job) > 63 or not _DNS1035.match(job):
                problems.append(f"{where}: child Job name {job!r} must be a DNS-1035 label <= 63 chars")
        pod_spec = (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec")
        if not isinstance(pod_spec, dict) or not pod_spec.get("containers"):
            problems.append(f"{where}.template.spec.template.spec.containers: required")
    sp = spec.get("successPolicy") or {}
    for t in sp.get("targetReplicatedJobs") or []:
        if t not in seen:
            problems.append(f"spec.successPolicy.targetReplicatedJobs: unknown replicatedJob {t!r}")
    if sp.get("operator") not in (None, "All", "Any"):
        problems.append(f"spec.successPolicy.operator: {sp.get('operator')!r} must be All or Any")
    return problems


def validate(obj: dict, on_event: ev.EventCallback | None = None) -> list[str]:
    """Essentials, plus ``mfargo.validation`` (the project's CRD checker) when present."""
    problems = essential_problems(obj)
    if problems:
        return problems
    try:
        from mfargo.validation import validate_documents  # type: ignore
    except ImportError:
        return problems
    try:
        return list(validate_documents([obj]))
    except Exception as e:  # a broken validator must not break runs
        if on_event:
            on_event(ev.Event(ev.WARNING, message=f"mfargo.validation failed ({e!r}); used essential checks"))
        return problems


@dataclass
class _RJob:
    index: int
    name: str
    spec: dict
    replicas: int
    ready: int = 0
    succeeded: int = 0
    failed: int = 0
    active: int = 0
    ready_event: asyncio.Event = field(default_factory=asyncio.Event)
    complete_event: asyncio.Event = field(default_factory=asyncio.Event)


class _JobFailed(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


class JobSet:
    """One live JobSet: its object, a change counter and the controller task."""

    def __init__(self, obj: dict, controller: "JobSetController"):
        self.obj = obj
        self.controller = controller
        self.version = 0
        self._event = asyncio.Event()
        self.settled = False  # nothing will change any more (terminal, or stuck)
        self.task: asyncio.Task | None = None
        self.pod_names: list[str] = []

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]

    @property
    def status(self) -> dict:
        return self.obj.setdefault("status", {})

    @property
    def terminal_state(self) -> str | None:
        return self.status.get("terminalState")

    def snapshot(self) -> dict:
        return copy.deepcopy(self.obj)

    def bump(self) -> None:
        self.version += 1
        old, self._event = self._event, asyncio.Event()
        old.set()

    async def wait_change(self, version: int) -> None:
        if self.version != version:
            return
        await self._event.wait()

    # -- controller ------------------------------------------------------------
    async def run(self) -> None:
        spec = self.obj["spec"]
        fp = spec.get("failurePolicy")
        max_restarts = int((fp or {}).get("maxRestarts") or 0)
        self.status.update({"restarts": 0, "restartsCountTowardsMax": 0})
        try:
            if spec.get("suspend"):
                self._emit("suspended: the runner does not resume JobSets")
                return
            while True:
                outcome = await self._attempt(int(self.status["restarts"]))
                if outcome is None:
                    self._finish("Completed", "AllJobsCompleted", "jobset completed successfully")
                    return
                rjob, reason, message = outcome
                action = self._failure_action(fp, rjob, reason)
                counted = int(self.status["restartsCountTowardsMax"])
                if action == "RestartJobSetAndIgnoreMaxRestarts" or (
                        action == "RestartJobSet" and counted < max_restarts):
                    self.status["restarts"] = int(self.status["restarts"]) + 1
                    if action == "RestartJobSet":
                        self.status["restartsCountTowardsMax"] = counted + 1
                    self._emit(f"restarting the gang after {message} "
                               f"(restart {self.status['restarts']}, maxRestarts {max_restarts})")
                    self.bump()
                    continue
                why = ("reached max number of restarts" if action == "RestartJobSet" and fp
                       else f"failurePolicy action {action}" if fp else "a Job failed and there is no failurePolicy")
                self._finish("Failed", "FailedJobs" if not fp else "ReachedMaxRestarts",
                             f"jobset failed: {message}; {why}")
                return
        finally:
            self.settled = True
            self.bump()

    def _failure_action(self, fp: dict | None, rjob: str, reason: str) -> str:
        if not fp:
            return "FailJobSet"
        for rule in fp.get("rules") or []:
            reasons = rule.get("onJobFailureReasons") or []
            targets = rule.get("targetReplicatedJobs") or []
            if (not reasons or reason in reasons) and (not targets or rjob in targets):
                return rule.get("action") or "RestartJobSet"
        return "RestartJobSet"

    def _finish(self, state: str, reason: str, message: str) -> None:
        st = self.status
        st["terminalState"] = state
        st.setdefault("conditions", []).append({
            "type": state, "status": "True", "reason": reason, "message": message,
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        self._emit(f"{state}: {message}")

    def _emit(self, message: str) -> None:
        self.controller.on_event(ev.Event(ev.JOBSET, node=self.name, message=message))

    def _publish(self, rjobs: list[_RJob]) -> None:
        self.status["replicatedJobsStatus"] = [
            {"name": r.name, "ready": r.ready, "succeeded": r.succeeded, "failed": r.failed,
             "active": r.active, "suspended": 0} for r in rjobs]
        self.bump()

    async def _attempt(self, restart: int):
        """Run one generation of all Jobs; None on success else (rjob, reason, message)."""
        spec = self.obj["spec"]
        rjobs = [_RJob(i, rj["name"], rj, int(rj.get("replicas", 1))) for i, rj in enumerate(spec["replicatedJobs"])]
        by_name = {r.name: r for r in rjobs}
        total = sum(r.replicas for r in rjobs)
        sp = spec.get("successPolicy") or {}
        operator = sp.get("operator") or "All"
        targets = sp.get("targetReplicatedJobs") or [r.name for r in rjobs]
        in_order = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
        for r in rjobs:
            r.active = r.replicas
            if r.replicas == 0:
                r.ready_event.set()
                r.complete_event.set()
        self._publish(rjobs)

        tasks: dict[asyncio.Task, tuple[_RJob, int]] = {}
        global_index = 0
        starters = []
        for r in rjobs:
            for j in range(r.replicas):
                starters.append((r, j, global_index))
                global_index += 1

        async def job_after_deps(r: _RJob, j: int, g: int):
            waits = []
            if in_order and r.index > 0:
                waits.append(rjobs[r.index - 1].ready_event.wait())
            for dep in r.spec.get("dependsOn") or []:
                d = by_name.get(dep.get("name"))
                if d is not None:
                    waits.append((d.complete_event if dep.get("status") == "Complete" else d.ready_event).wait())
            if waits:
                await asyncio.gather(*waits)
            return await self._run_job(r, j, g, restart, total, rjobs)

        for r, j, g in starters:
            t = asyncio.ensure_future(job_after_deps(r, j, g))
            tasks[t] = (r, j)
        try:
            pending = set(tasks)
            while True:
                if self._success(rjobs, operator, targets):
                    return None
                if not pending:
                    self.settled = True  # all Jobs finished but the policy is not met
                    self.bump()
                    self._emit("all Jobs finished but the successPolicy is not satisfied; "
                               "the JobSet stays active")
                    await asyncio.Event().wait()  # like a real JobSet: never terminal
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    r, j = tasks[t]
                    r.active -= 1
                    exc = t.exception()
                    if exc is None:
                        r.succeeded += 1
                        if r.succeeded == r.replicas:
                            r.complete_event.set()
                        self._publish(rjobs)
                        continue
                    if not isinstance(exc, _JobFailed):
                        raise exc
                    r.failed += 1
                    self._publish(rjobs)
                    return r.name, exc.reason, f"Job {self.name}-{r.name}-{j} failed: {exc.message}"
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    @staticmethod
    def _success(rjobs: list[_RJob], operator: str, targets: list[str]) -> bool:
        chosen = [r for r in rjobs if r.name in targets]
        if operator == "Any":
            return any(r.succeeded > 0 for r in chosen)
        return all(r.succeeded >= r.replicas for r in chosen)

    async def _run_job(self, r: _RJob, j: int, g: int, restart: int, total: int, rjobs: list[_RJob]) -> None:
        job_spec = (r.spec.get("template") or {}).get("spec") or {}
        completions = int(job_spec.get("completions") or 1)
        parallelism = int(job_spec.get("parallelism") or completions)
        bl = job_spec.get("backoffLimit")
        backoff_limit = 6 if bl is None else int(bl)
        deadline = job_spec.get("activeDeadlineSeconds")
        job_name = f"{self.name}-{r.name}-{j}"
        sem = asyncio.Semaphore(max(parallelism, 1))
        failures = 0
        started = 0

        async def run_index(idx: int) -> None:
            nonlocal failures
            while True:
                async with sem:
                    ok, msg = await self._run_pod(r, j, g, idx, restart, total, job_name, on_start)
                if ok:
                    return
                failures += 1
                if failures > backoff_limit:
                    raise _JobFailed("BackoffLimitExceeded",
                                     f"Job has reached the specified backoff limit ({msg})")
                await asyncio.sleep(JOB_BACKOFF_SECONDS * 2 ** (failures - 1) * self.controller.backoff_scale)

        def on_start() -> None:
            nonlocal started
            started += 1
            if started == min(completions, max(parallelism, 1)):
                r.ready += 1
                if r.ready == r.replicas:
                    r.ready_event.set()
                self._publish(rjobs)

        async def all_indexes() -> None:
            idx_tasks = [asyncio.ensure_future(run_index(i)) for i in range(completions)]
            try:
                done, pending = await asyncio.wait(idx_tasks, return_when=asyncio.FIRST_EXCEPTION)
                for t in done:
                    if t.exception() is not None:
                        raise t.exception()
            finally:
                for t in idx_tasks:
                    t.cancel()
                await asyncio.gather(*idx_tasks, return_exceptions=True)

        if deadline is not None:
            try:
                await asyncio.wait_for(all_indexes(), timeout=float(deadline))
            except asyncio.TimeoutError:
                raise _JobFailed("DeadlineExceeded", "Job was active longer than specified deadline") from None
        else:
            await all_indexes()

    async def _run_pod(self, r: _RJob, j: int, g: int, idx: int, restart: int, total: int,
                       job_name: str, on_start) -> tuple[bool, str]:
        spec = self.obj["spec"]
        meta = self.obj["metadata"]
        ns = meta.get("namespace") or self.controller.namespace
        pod_tmpl = ((r.spec.get("template") or {}).get("spec") or {}).get("template") or {}
        pmeta = pod_tmpl.get("metadata") or {}
        pspec = pod_tmpl.get("spec") or {}
        network = spec.get("network") or {}
        dns = network.get("enableDNSHostnames", True) is not False
        subdomain = network.get("subdomain") or self.name
        js_keys = {
            "jobset.sigs.k8s.io/jobset-name": self.name,
            "jobset.sigs.k8s.io/jobset-uid": meta.get("uid", ""),
            "jobset.sigs.k8s.io/replicatedjob-name": r.name,
            "jobset.sigs.k8s.io/replicatedjob-replicas": str(r.replicas),
            "jobset.sigs.k8s.io/job-index": str(j),
            "jobset.sigs.k8s.io/job-global-index": str(g),
            "jobset.sigs.k8s.io/global-replicas": str(total),
            "jobset.sigs.k8s.io/restart-attempt": str(restart),
            "jobset.sigs.k8s.io/job-key": hashlib.sha256(f"{ns}/{job_name}".encode()).hexdigest(),
            "batch.kubernetes.io/job-completion-index": str(idx),
        }
        coord = spec.get("coordinator")
        if coord:
            js_keys["jobset.sigs.k8s.io/coordinator"] = (
                f"{self.name}-{coord.get('replicatedJob')}-{coord.get('jobIndex', 0)}-"
                f"{coord.get('podIndex', 0)}.{subdomain}")
        labels = {**(pmeta.get("labels") or {}), **js_keys,
                  "batch.kubernetes.io/job-name": job_name, "job-name": job_name}
        annotations = {**(pmeta.get("annotations") or {}), **js_keys}
        labels = {k: str(v) for k, v in labels.items()}
        annotations = {k: str(v) for k, v in annotations.items()}
        hostname = f"{job_name}-{idx}"
        pod = PodSpec(
            name=f"{job_name}-{idx}-{random_suffix()}",
            namespace=ns,
            uid=str(uuid.uuid4()),
            containers=list(pspec.get("containers") or []),
            init_containers=list(pspec.get("initContainers") or []),
            volumes=list(pspec.get("volumes") or []),
            hostname=pspec.get("hostname") or (hostname if dns else ""),
            subdomain=(pspec.get("subdomain") or subdomain) if dns else "",
            labels=labels,
            annotations=annotations,
            service_account=pspec.get("serviceAccountName") or "default",
            active_deadline=(float(pspec["activeDeadlineSeconds"])
                             if pspec.get("activeDeadlineSeconds") is not None else None),
            termination_grace=pspec.get("terminationGracePeriodSeconds"),
            extra_env={"JOB_COMPLETION_INDEX": str(idx)},
            display=f"{self.name}/{r.name}-{j}",
        )
        self.pod_names.append(pod.name)
        self._emit(f"pod {pod.name} started (job {job_name}, restart-attempt {restart})")
        on_start()
        try:
            res = await self.controller.pods.run(pod)
        except PodError as e:  # the pod cannot even be created: it counts as a failed pod
            self._emit(f"pod {pod.name} failed: {e}")
            return False, f"pod {pod.name}: {e}"
        if res.phase == "Succeeded":
            self._emit(f"pod {pod.name} succeeded")
            return True, ""
        self._emit(f"pod {pod.name} failed: {res.message}" + (f" ({res.reason})" if res.reason != "Error" else ""))
        return False, f"pod {pod.name}: {res.message}"


class JobSetController:
    """All JobSets created during one run (the 'API server' for them)."""

    def __init__(self, pods: PodRunner, namespace: str, on_event: ev.EventCallback,
                 backoff_scale: float = 1.0):
        self.pods = pods
        self.namespace = namespace
        self.on_event = on_event
        self.backoff_scale = backoff_scale
        self.jobsets: dict[tuple[str, str], JobSet] = {}

    def create(self, obj: dict, owner: dict | None = None) -> JobSet:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + random_suffix()
        ns = meta.get("namespace") or self.namespace
        meta["namespace"] = ns
        key = (ns, meta["name"])
        if key in self.jobsets:
            raise JobSetError(f'Error from server (AlreadyExists): jobsets.{GROUP} "{meta["name"]}" already exists')
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
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
        obj["status"] = {}
        js = JobSet(obj, self)
        self.jobsets[key] = js
        js.task = asyncio.ensure_future(js.run())
        self.on_event(ev.Event(ev.JOBSET, node=meta["name"], message="created"))
        return js

    def get(self, name: str, namespace: str | None = None) -> JobSet | None:
        return self.jobsets.get((namespace or self.namespace, name))

    async def delete(self, name: str, namespace: str | None = None) -> bool:
        js = self.jobsets.pop((namespace or self.namespace, name), None)
        if js is None:
            return False
        if js.task and not js.task.done():
            js.task.cancel()
            await asyncio.gather(js.task, return_exceptions=True)
        self.on_event(ev.Event(ev.JOBSET, node=name, message="deleted"))
        return True

    async def shutdown(self) -> None:
        """The run is over: JobSets owned by it die with it."""
        tasks = [js.task for js in self.jobsets.values() if js.task and not js.task.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
