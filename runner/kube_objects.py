"""The Job and Pod objects of a JobSet's current generation, as the API server holds them.

The JobSet controller (``jobset.py``) records here what the Job controller and the
kubelet would write: a Job's ``Failed``/``Complete`` condition (reason, message,
lastTransitionTime) and a pod's ``phase``, ``reason``, conditions and its containers'
``terminated`` state (exit code, reason such as ``OOMKilled``, finishedAt). A restart
deletes the previous generation's Jobs and pods, as the JobSet controller does.
``kube_api.py`` serves them to pods (the gang failure report reads them).
"""
from __future__ import annotations

import copy
import time

from . import job_policy
from .model import rfc3339
from .pod import PodSpec

# What the kubelet writes on the pod itself (status.reason) for these outcomes.
_POD_REASONS = {"DeadlineExceeded", "Evicted"}


def now() -> str:
    return rfc3339(time.time())


class Generation:
    """Jobs and pods by name, of one JobSet's current restart attempt."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict] = {}
        self.pods: dict[str, dict] = {}

    def reset(self) -> None:
        self.jobs.clear()
        self.pods.clear()

    def job_started(self, name: str, namespace: str, labels: dict[str, str]) -> None:
        self.jobs[name] = {"apiVersion": "batch/v1", "kind": "Job",
                           "metadata": {"name": name, "namespace": namespace, "labels": dict(labels),
                                        "creationTimestamp": now()},
                           "status": {"active": 1, "failed": 0, "succeeded": 0}}

    def job_finished(self, name: str, failure: BaseException | None) -> None:
        """Complete, or Failed with the failure's ``reason`` and ``message`` (the Job's condition)."""
        job = self.jobs.get(name)
        if job is None:
            return
        status = job["status"]
        status["active"] = 0
        if failure is not None:
            status["failed"] += 1
            status["conditions"] = [{"type": "Failed", "status": "True", "reason": getattr(failure, "reason", "Failed"),
                                     "message": getattr(failure, "message", str(failure)),
                                     "lastTransitionTime": now()}]
        else:
            status["succeeded"] += 1
            status["conditions"] = [{"type": "Complete", "status": "True", "lastTransitionTime": now()}]

    def pod_started(self, pod: PodSpec) -> None:
        self.pods[pod.name] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid,
                         "labels": dict(pod.labels), "annotations": dict(pod.annotations),
                         "creationTimestamp": now()},
            "status": {"phase": "Running", "startTime": now()}}

    def pod_finished(self, outcome: job_policy.PodOutcome) -> None:
        pod = self.pods.get(outcome.pod)
        if pod is None:
            return
        status = pod["status"] = {"phase": outcome.phase, "startTime": pod["status"].get("startTime")}
        if outcome.phase == "Failed" and outcome.reason in _POD_REASONS:
            status["reason"], status["message"] = outcome.reason, outcome.message
        if outcome.conditions:
            status["conditions"] = [{**c, "lastTransitionTime": now()} for c in outcome.conditions]
        if outcome.exit_code is not None:
            status["containerStatuses"] = [{"name": outcome.container, "ready": False, "state": {"terminated": {
                "exitCode": outcome.exit_code, "reason": outcome.reason, "finishedAt": now()}}}]

    def select(self, kind: str, labels: dict[str, str]) -> list[dict]:
        """Jobs or pods carrying every label in ``labels`` (an equality label selector)."""
        store = self.jobs if kind == "jobs" else self.pods
        return [copy.deepcopy(o) for o in store.values()
                if all(o["metadata"]["labels"].get(k) == v for k, v in labels.items())]
