"""Play the JobSet controller (and the Job controller under it) for one run.

A resource template that creates a ``jobset.x-k8s.io/v1alpha2`` JobSet ends up
here.  Behaviour follows the JobSet docs/README in shared/schemas:

* every replicatedJob gets ``replicas`` Jobs ``<js>-<rjob>-<i>``; each Job runs
  ``completions`` (default 1) indexed pods, ``parallelism`` at a time, named
  ``<job>-<index>-<5 random>``, hostname ``<job>-<index>`` and subdomain
  ``network.subdomain`` (default: the JobSet name); all Jobs start at once (gang);
* pods carry the JobSet labels and annotations (``jobset_pod.py``); the Jobs and pods
  of the current generation are kept as API objects (``kube_objects.py``);
* a failed pod counts against the Job's ``backoffLimit`` (default 6); beyond it
  (or past the Job's ``activeDeadlineSeconds``) the Job fails;
* every Job complete (mfargo's ``successPolicy: {operator: All}``; ``jobset_checks.py``
  refuses fields mfargo never writes) -> terminalState Completed; a failed Job -> ``failurePolicy.rules`` / ``maxRestarts`` (default 0):
  restart the whole gang (kill all pods, restarts + 1, new pods with
  restart-attempt + 1) or terminalState Failed;
* when the JobSet finishes, still-running pods are killed.

The live object is what Argo's success/failure conditions read.
"""
from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import events as ev
from . import job_policy, jobset_pod, jobset_policy, kube_objects, limits
from .jobset_checks import API_VERSION, GROUP, essential_problems, validate  # noqa: F401 - the API
from .pod import PodError, PodSpec

if TYPE_CHECKING:
    from .jobset_controller import JobSetController

JOB_BACKOFF_SECONDS = 10.0  # the Job controller's pod-failure back-off base


def gang_sizes(obj: dict) -> tuple[int, int]:
    """(pods that run at once: each Job's min(parallelism, completions), pods in all) over
    every replica of every replicatedJob."""
    at_once = total = 0
    for rj in obj["spec"]["replicatedJobs"]:
        job = (rj.get("template") or {}).get("spec") or {}
        completions = int(job.get("completions") or 1)
        replicas = int(rj.get("replicas", 1))
        at_once += replicas * min(completions, max(int(job.get("parallelism") or completions), 1))
        total += replicas * completions
    return at_once, total


def gang_problem(obj: dict, max_workers: int) -> str:
    """Why this JobSet cannot run here ('' if it can): more pods than limits.MAX_GANG_SIZE,
    or more at once than --max-workers (a gang runs whole or not at all)."""
    try:
        at_once, total = gang_sizes(obj)
    except (TypeError, ValueError, KeyError, AttributeError):
        return ""  # the JobSet's own validation words it
    if total > limits.MAX_GANG_SIZE:
        return limits.over("its pods (replicas x completions)", total, limits.MAX_GANG_SIZE)
    if at_once > max_workers:
        return (f"its gang of {at_once:,} pods that run at once is more than --max-workers {max_workers}; "
                f"run with --max-workers {at_once} or more")
    return ""


class JobSetError(Exception):
    """kubectl-like failure (AlreadyExists, NotFound, invalid object)."""


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


class _JobFailed(Exception):
    """A Job's Failed condition (reason, message) and the pod that made it fail."""

    def __init__(self, reason: str, message: str, pod: job_policy.PodOutcome | None = None):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.pod = pod


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
        self.first_failure: jobset_policy.Failure | None = None  # set when the JobSet failed
        self.objects = kube_objects.Generation()  # its Jobs and pods, as the API server shows them

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
            while True:
                outcome = await self._attempt(int(self.status["restarts"]))
                if outcome is None:
                    self._finish("Completed", "AllJobsCompleted", "jobset completed successfully")
                    return
                failure: jobset_policy.Failure = outcome
                action = jobset_policy.failure_action(fp, failure.rjob, failure.reason)
                counted = int(self.status["restartsCountTowardsMax"])
                self._emit(f"Job {failure.job} failed ({failure.reason}): {failure.message}")
                if action == "RestartJobSetAndIgnoreMaxRestarts" or (
                        action == "RestartJobSet" and counted < max_restarts):
                    self.status["restarts"] = int(self.status["restarts"]) + 1
                    if action == "RestartJobSet":
                        self.status["restartsCountTowardsMax"] = counted + 1
                    self._emit(f"{jobset_policy.ACTION_MESSAGES[action]} (first failed job: {failure.job}): restarting the "
                               f"gang (restart {self.status['restarts']}, maxRestarts {max_restarts})")
                    self.bump()
                    continue
                # The JobSet controller's Failed condition: reason and message name the first failed Job.
                reason, message = jobset_policy.failed_condition(fp, action)
                self.first_failure = failure
                self._finish("Failed", reason, f"{message} (first failed job: {failure.job})")
                return
        finally:
            self.settled = True
            self.bump()

    def _finish(self, state: str, reason: str, message: str) -> None:
        st = self.status
        st["terminalState"] = state
        st.setdefault("conditions", []).append({
            "type": state, "status": "True", "reason": reason, "message": message,
            "lastTransitionTime": kube_objects.now()})
        self._emit(f"{state}: {message}")

    def _emit(self, message: str) -> None:
        self.controller.on_event(ev.Event(ev.JOBSET, node=self.name, message=message))

    def _publish(self, rjobs: list[_RJob]) -> None:
        self.status["replicatedJobsStatus"] = [
            {"name": r.name, "ready": r.ready, "succeeded": r.succeeded, "failed": r.failed,
             "active": r.active, "suspended": 0} for r in rjobs]
        self.bump()

    async def _attempt(self, restart: int):
        """Run one generation of all Jobs, its pods admitted together (runner.slots; the
        controller refused a gang larger than them); None on success else (rjob, reason, message)."""
        async with self.controller.pods.slots.admit(self.gang_size()):
            return await self._generation(restart)

    def gang_size(self) -> int:
        return gang_sizes(self.obj)[0]

    async def _generation(self, restart: int):
        spec = self.obj["spec"]
        self.objects.reset()  # a restart deletes the previous generation's Jobs and pods
        rjobs = [_RJob(i, rj["name"], rj, int(rj.get("replicas", 1))) for i, rj in enumerate(spec["replicatedJobs"])]
        total = sum(r.replicas for r in rjobs)
        for r in rjobs:
            r.active = r.replicas
        self._publish(rjobs)

        tasks: dict[asyncio.Task, tuple[_RJob, int]] = {}
        global_index = 0
        starters = []
        for r in rjobs:
            for j in range(r.replicas):
                starters.append((r, j, global_index))
                global_index += 1

        for r, j, g in starters:
            t = asyncio.ensure_future(self._run_job(r, j, g, restart, total, rjobs))
            tasks[t] = (r, j)
        try:
            pending = set(tasks)
            while True:
                if all(r.succeeded >= r.replicas for r in rjobs):
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
                    self.objects.job_finished(f"{self.name}-{r.name}-{j}", exc)
                    if exc is None:
                        r.succeeded += 1
                        self._publish(rjobs)
                        continue
                    if not isinstance(exc, _JobFailed):
                        raise exc
                    r.failed += 1
                    self._publish(rjobs)
                    return jobset_policy.Failure(r.name, f"{self.name}-{r.name}-{j}", exc.reason, exc.message, exc.pod)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _run_job(self, r: _RJob, j: int, g: int, restart: int, total: int, rjobs: list[_RJob]) -> None:
        job_spec = (r.spec.get("template") or {}).get("spec") or {}
        completions = int(job_spec.get("completions") or 1)
        parallelism = int(job_spec.get("parallelism") or completions)
        bl = job_spec.get("backoffLimit")
        backoff_limit = 6 if bl is None else int(bl)
        deadline = job_spec.get("activeDeadlineSeconds")
        policy = job_spec.get("podFailurePolicy")
        job_name = f"{self.name}-{r.name}-{j}"
        self.objects.job_started(job_name, self.obj["metadata"]["namespace"], jobset_pod.job_keys(
            self.obj, self.controller.namespace, r.name, r.replicas, j, g, restart, total))
        sem = asyncio.Semaphore(max(parallelism, 1))
        failures = 0
        started = 0

        async def run_index(idx: int) -> None:
            nonlocal failures
            while True:
                async with sem:
                    pod = await self._run_pod(r, j, g, idx, restart, total, job_name, on_start)
                if pod.phase == "Succeeded":
                    return
                act, why = job_policy.action(policy, pod)
                if why:
                    self._emit(f"Job {job_name}: {why}")
                if act in ("FailJob", "FailIndex"):
                    raise _JobFailed("PodFailurePolicy", why, pod)
                if act == "Ignore":
                    continue
                failures += 1
                if failures > backoff_limit:
                    raise _JobFailed("BackoffLimitExceeded", "Job has reached the specified backoff limit", pod)
                await asyncio.sleep(JOB_BACKOFF_SECONDS * 2 ** (failures - 1) * self.controller.backoff_scale)

        def on_start() -> None:
            nonlocal started
            started += 1
            if started == min(completions, max(parallelism, 1)):
                r.ready += 1
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
                       job_name: str, on_start) -> job_policy.PodOutcome:
        pod_tmpl = ((r.spec.get("template") or {}).get("spec") or {}).get("template") or {}
        pmeta = pod_tmpl.get("metadata") or {}
        pod = jobset_pod.build(self.obj, self.controller.namespace, r.name, r.replicas, j, g, idx, restart, total)
        pod.gang_admitted = True  # _attempt holds the gang's slots
        self.pod_names.append(pod.name)
        self.objects.pod_started(pod)
        self._emit(f"pod {pod.name} started (job {job_name}, restart-attempt {restart})")
        on_start()
        container = pod.container.get("name") or ""
        try:
            fault = job_policy.faults(pmeta.get("annotations") or {}).get((r.name, j, restart))
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
