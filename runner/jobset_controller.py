"""The JobSets of one run, as the API server holds them: create (with the defaults the
JobSet webhook fills in), get, delete; each JobSet then runs itself (``jobset.py``)."""
from __future__ import annotations

import asyncio
import copy
import uuid

from . import events as ev
from . import kube_objects
from .jobset import GROUP, JobSet, JobSetError, gang_problem
from .model import random_suffix
from .pod import PodRunner


class JobSetController:
    """All JobSets created during one run (the 'API server' for them)."""

    def __init__(self, pods: PodRunner, namespace: str, on_event: ev.EventCallback,
                 backoff_scale: float = 1.0):
        self.pods = pods
        self.namespace = namespace
        self.on_event = on_event
        self.backoff_scale = backoff_scale
        self.jobsets: dict[tuple[str, str], JobSet] = {}
        self.deleted: list[JobSet] = []  # still in the run's record

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
        meta["creationTimestamp"] = kube_objects.now()
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
        js = JobSet(obj, self)
        self.jobsets[key] = js
        js.task = asyncio.ensure_future(js.run())
        self.on_event(ev.Event(ev.JOBSET, node=meta["name"], message="created"))
        return js

    def get(self, name: str, namespace: str | None = None) -> JobSet | None:
        return self.jobsets.get((namespace or self.namespace, name))

    def delete(self, name: str, namespace: str) -> bool:
        """Forget a finished JobSet (its pods have ended), as the gang failure report asks;
        False for one still running: mfargo never deletes those."""
        js = self.jobsets.get((namespace, name))
        if js is None or js.terminal_state is None:
            return False
        self.deleted.append(self.jobsets.pop((namespace, name)))
        return True

    async def shutdown(self) -> None:
        """The run is over: JobSets owned by it die with it."""
        tasks = [js.task for js in self.jobsets.values() if js.task and not js.task.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
