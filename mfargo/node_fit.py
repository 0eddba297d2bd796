"""Could a gang ever start whole on the nodes it may use? Judged before `create` deploys, from
the JobSets in the bundle and the cluster's Nodes (``cluster_needs.node_warnings``).

Without Kueue the scheduler places a gang's pods one by one: a rank no node can hold stays
Pending while the others hold theirs, until the run's gang watch lets the gang go at its
``@jobset(start_window=...)``. That is certain when one rank requests more of a resource than
any node it may use has allocatable (its node selector matches, it tolerates the node's
NoSchedule/NoExecute taints, the node is not cordoned), or when the ranks the manifest states
(a run-time gang size counts as one rank) request more than all those nodes hold together. It
is a warning, never a refusal: nodes come and go (an autoscaler adds them), and what the
nodes run already is not counted. Pure: no cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from mfargo.base.validation.report import parse_manifest
from mfargo.compiler.constants import JobSetKey, Label

from mfargo.kueue_fit import plain, pod_request  # as Kueue counts a pod


@dataclass(frozen=True)
class Rank:
    """One replicated job's pod: what it requests, where it may run, and how many of it there
    are at least (a run-time count: 1 for the rank job, 0 for the workers beside a control)."""

    job: str
    request: tuple[tuple[str, Decimal], ...]
    node_selector: tuple[tuple[str, str], ...]
    tolerations: tuple[dict, ...]
    count: int


@dataclass(frozen=True)
class Gang:
    step: str
    ranks: tuple[Rank, ...]
    queued: bool  # in a Kueue queue: kueue_fit judges it, Kueue admits it whole


def gangs(docs: list[dict]) -> list[Gang]:
    """Every gang in ``docs`` (the JobSet manifests of their resource templates)."""
    found = []
    for doc in docs:
        for template in (doc.get("spec") or {}).get("templates") or []:
            manifest = (template.get("resource") or {}).get("manifest")
            if not isinstance(manifest, str):
                continue
            objects, _ = parse_manifest(manifest)
            for obj in objects:
                if obj.get("kind") != "JobSet":
                    continue
                meta = obj.get("metadata") or {}
                step = (meta.get("annotations") or {}).get(Label.STEP_NAME, meta.get("name", "?"))
                queued = JobSetKey.KUEUE_QUEUE in (meta.get("labels") or {})
                found.append(Gang(step, tuple(_rank(job) for job in (obj.get("spec") or {}).get("replicatedJobs") or []),
                                  queued))
    return found


def _rank(job: dict) -> Rank:
    pod = ((((job.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec")) or {}
    replicas = job.get("replicas")
    count = replicas if isinstance(replicas, int) else (1 if job.get("name") == "rank" else 0)
    return Rank(job.get("name") or "?", tuple(sorted(pod_request(pod).items())),
                tuple(sorted((pod.get("nodeSelector") or {}).items())), tuple(pod.get("tolerations") or ()), count)


def _tolerates(tolerations, taint: dict) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t.get("key") == taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and t.get("operator", "Equal") == "Equal" \
                and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def usable(rank: Rank, nodes: list[dict]) -> list[dict]:
    """The nodes ``rank``'s pods may be placed on."""
    out = []
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        spec = node.get("spec") or {}
        if spec.get("unschedulable") or any(labels.get(k) != v for k, v in rank.node_selector):
            continue
        if any(t.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(rank.tolerations, t)
               for t in spec.get("taints") or []):
            continue
        out.append(node)
    return out


def _allocatable(node: dict) -> dict[str, Decimal]:
    from kubernetes.utils.quantity import parse_quantity

    return {r: parse_quantity(q) for r, q in ((node.get("status") or {}).get("allocatable") or {}).items()}


def never_fits(gang: Gang, nodes: list[dict]) -> str | None:
    """Why ``gang`` could never start whole on ``nodes`` (Node objects), or None."""
    totals: dict[str, Decimal] = {}
    pool: dict[str, dict] = {}
    for rank in gang.ranks:
        mine = usable(rank, nodes)
        request = dict(rank.request)
        if not mine:
            return "no node step %s's %s pods may use (node selector, taints)" % (gang.step, rank.job)
        held = [_allocatable(n) for n in mine]
        short = sorted(r for r, q in request.items() if q > 0 and all(q > a.get(r, Decimal(0)) for a in held))
        if short:
            return "one %s pod of step %s requests more than any node it may use has allocatable (%s)" % (
                rank.job, gang.step, ", ".join("%s %s > %s" % (r, plain(request[r]),
                                                             plain(max(a.get(r, Decimal(0)) for a in held)))
                                              for r in short))
        for r, q in request.items():
            totals[r] = totals.get(r, Decimal(0)) + q * rank.count
        pool.update({(n.get("metadata") or {}).get("name"): n for n in mine})
    whole = {}
    for node in pool.values():
        for r, q in _allocatable(node).items():
            whole[r] = whole.get(r, Decimal(0)) + q
    over = sorted(r for r, q in totals.items() if q > whole.get(r, Decimal(0)))
    if over:
        return "step %s's ranks request more than all the nodes they may use have allocatable together (%s)" % (
            gang.step, ", ".join("%s %s > %s" % (r, plain(totals[r]), plain(whole.get(r, Decimal(0)))) for r in over))
    return None
