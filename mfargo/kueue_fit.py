"""Could Kueue ever admit a gang into its queue? Judged before `create` deploys, from the
JobSets in the bundle and the ClusterQueue behind each one's LocalQueue.

Kueue admits a gang only when its ClusterQueue covers every resource the gang's pods
request and has quota for all of them at once. A gang asking for a resource the queue does
not cover stays Pending for ever ("couldn't assign flavors to pod set rank: resource
ephemeral-storage unavailable in ClusterQueue"), and so does one whose single pod asks for
more than the queue holds. Its Jobs are suspended while it waits, so their deadline
(@timeout) does not run: only the workflow's timeout would end the run. Every mfargo pod
requests ephemeral-storage (Metaflow's default disk is 10,240 MB), so a queue covering only
cpu and memory admits no mfargo gang at all.

Only what can never be admitted is refused. The gang's size is a run-time value (a tag in
the manifest), so totals are not judged here, and a ClusterQueue in a cohort may borrow
beyond its own quota, so only coverage is judged for it. Pure: no cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Iterator

from kubernetes.utils.quantity import parse_quantity

from mfargo.compiler.constants import JobSetKey, Label
from mfargo.base.validation.report import parse_manifest


@dataclass(frozen=True)
class GangRequest:
    """What one pod of a gang step asks for, and the LocalQueue it is queued in."""

    step: str
    namespace: str
    queue: str
    pod: tuple[tuple[str, str], ...]  # (resource, quantity), sorted: the largest pod of the gang, per resource


def gang_requests(docs: list[dict], namespace: str) -> list[GangRequest]:
    """Every queued gang in ``docs`` (the JobSet manifests of their resource templates)."""
    found = []
    for doc in docs:
        ns = (doc.get("metadata") or {}).get("namespace") or namespace
        for template in (doc.get("spec") or {}).get("templates") or []:
            manifest = (template.get("resource") or {}).get("manifest")
            if isinstance(manifest, str):
                found.extend(_queued(manifest, ns))
    return sorted(set(found), key=lambda g: (g.namespace, g.queue, g.step))


def _queued(manifest: str, ns: str) -> Iterator[GangRequest]:
    objects, _ = parse_manifest(manifest)
    for obj in objects:
        meta = obj.get("metadata") or {}
        queue = (meta.get("labels") or {}).get(JobSetKey.KUEUE_QUEUE)
        if not isinstance(queue, str) or "__argo_tag_" in queue:
            continue
        largest: dict[str, Decimal] = {}
        for job in (obj.get("spec") or {}).get("replicatedJobs") or []:
            pod = ((((job.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec")) or {}
            for resource, amount in pod_request(pod).items():
                largest[resource] = max(amount, largest.get(resource, Decimal(0)))
        step = (meta.get("annotations") or {}).get(Label.STEP_NAME, meta.get("name", "?"))
        yield GangRequest(step, meta.get("namespace") or ns, queue,
                          tuple(sorted((r, str(q)) for r, q in largest.items())))


def pod_request(pod: dict) -> dict[str, Decimal]:
    """As Kueue counts a pod: its containers' requests summed, or an init container's if larger."""
    total: dict[str, Decimal] = {}
    for container in pod.get("containers") or []:
        for resource, amount in _requests(container).items():
            total[resource] = total.get(resource, Decimal(0)) + amount
    for container in pod.get("initContainers") or []:
        for resource, amount in _requests(container).items():
            total[resource] = max(total.get(resource, Decimal(0)), amount)
    return total


def _requests(container: dict) -> dict[str, Decimal]:
    """Its requests, a limit standing for a request it lacks (as the API server and Kueue do:
    mfargo writes a GPU as a limit only)."""
    resources = container.get("resources") or {}
    requests = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {r: parse_quantity(q) for r, q in requests.items() if "__argo_tag_" not in str(q)}


def never_admitted(gang: GangRequest, cluster_queue: dict) -> str | None:
    """Why Kueue would never admit ``gang`` into ``cluster_queue`` (a ClusterQueue object), or None."""
    spec = cluster_queue.get("spec") or {}
    name = (cluster_queue.get("metadata") or {}).get("name", "?")
    where = "ClusterQueue %s (of LocalQueue %s/%s)" % (name, gang.namespace, gang.queue)
    covered: dict[str, Decimal] = {}  # resource -> the most one flavor holds
    for group in spec.get("resourceGroups") or []:
        for resource in group.get("coveredResources") or []:
            covered.setdefault(resource, Decimal(0))
        for flavor in group.get("flavors") or []:
            for quota in flavor.get("resources") or []:
                amount = parse_quantity(quota.get("nominalQuota", 0))
                covered[quota.get("name")] = max(amount, covered.get(quota.get("name"), Decimal(0)))
    pod = {r: Decimal(q) for r, q in gang.pod}
    uncovered = sorted(r for r, q in pod.items() if q > 0 and r not in covered)
    if uncovered:
        return "%s does not cover %s, which step %s's pods request: Kueue would never admit the gang" % (
            where, ", ".join(uncovered), gang.step)
    if spec.get("cohort") or spec.get("cohortName"):
        return None  # it may borrow from its cohort
    too_big = sorted(r for r, q in pod.items() if q > covered.get(r, q))
    if too_big:
        return "%s holds less %s than one pod of step %s requests (%s): Kueue would never admit the gang" % (
            where, ", ".join(too_big), gang.step,
            ", ".join("%s %s > %s" % (r, plain(pod[r]), plain(covered[r])) for r in too_big))
    return None


def plain(amount: Decimal) -> str:
    return format(amount.normalize(), "f")
