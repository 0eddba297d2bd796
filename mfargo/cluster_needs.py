"""Asks the cluster for what a bundle needs (``mfargo.prerequisites``) before `create`
creates anything, whether Kueue could ever admit its queued gangs (``mfargo.kueue_fit``), and
whether its other gangs could ever start whole on the nodes (``mfargo.node_fit``, a warning):
each object once, through ``mfargo.cluster.Cluster``."""

from __future__ import annotations

from functools import partial

from mfargo import kueue_fit, node_fit, prerequisites
from mfargo.cluster import ARGO_GROUP, ARGO_VERSION, PLURALS, Cluster, ClusterError, Resource


def unmet(cluster: Cluster, docs: list[dict], namespace: str) -> tuple[list[str], list[str]]:
    """(what is missing, what the user may not read: 403), each as one phrase."""
    answers: dict = {}  # each object asked for once; the queue checks read the LocalQueues found first
    checks = [(need.describe(), partial(_missing, cluster, need, answers))
              for need in prerequisites.needs(docs, namespace)]
    checks += [("the ClusterQueue of LocalQueue %s/%s" % (gang.namespace, gang.queue),
                partial(_unadmittable, cluster, gang, answers))
               for gang in kueue_fit.gang_requests(docs, namespace)]
    missing, unchecked = [], []
    for what, check in checks:
        try:
            problem = check()
        except ClusterError as e:
            if e.status != 403:
                raise
            unchecked.append(what)
            continue
        if problem:
            missing.append(problem)
    return missing, unchecked


def node_warnings(cluster: Cluster, docs: list[dict]) -> list[str]:
    """One phrase for each gang not queued in Kueue (Kueue judges those) that could never start
    whole on the nodes it may use; one saying the nodes could not be read, if they could not."""
    found = [g for g in node_fit.gangs(docs) if not g.queued]
    if not found:
        return []
    try:
        nodes = cluster.nodes()
    except ClusterError as e:
        return ["could not list the cluster's nodes to check that each gang fits them (%s)" % e]
    return [p + ": it would wait for its start window, then fail" for p in (node_fit.never_fits(g, nodes)
                                                                              for g in found) if p]


def _unadmittable(cluster: Cluster, gang: kueue_fit.GangRequest, answers: dict) -> str | None:
    """Why Kueue would never admit ``gang``, read from the ClusterQueue behind its LocalQueue;
    None also when the LocalQueue is missing (already said) or names no ClusterQueue."""
    local_queue = answers.get((prerequisites.LOCAL_QUEUE, gang.namespace, gang.queue))
    name = ((local_queue or {}).get("spec") or {}).get("clusterQueue")
    if not name:
        return None
    need = prerequisites.Need(prerequisites.CLUSTER_QUEUE, prerequisites.CLUSTER_SCOPED, name)
    problem = _missing(cluster, need, answers)  # asked for once, as every Kueue object
    if problem:
        return "%s (of LocalQueue %s/%s)" % (problem, gang.namespace, gang.queue)
    return kueue_fit.never_admitted(gang, answers[(need.kind, need.namespace, need.name)])


def _missing(cluster: Cluster, need, answers: dict) -> str | None:
    """Why ``need`` is not met, or None; each object is asked for once (``answers``)."""
    if need.is_api:
        if need.name not in answers:
            answers[need.name] = cluster.served(*need.name.split("/", 1))
        return None if need.key in (answers[need.name] or ()) else "no " + need.describe()
    where = (need.kind, need.namespace, need.name)
    if where not in answers:
        if need.kind == "Secret":
            answers[where] = cluster.secret_keys(need.name, need.namespace)
        elif need.kind == "ServiceAccount":
            answers[where] = cluster.has_service_account(need.name, need.namespace) or None
        elif need.kind == prerequisites.PRIORITY_CLASS:
            answers[where] = cluster.get_cluster_scoped(Resource(*prerequisites.PRIORITY_CLASSES), need.name) or None
        elif need.kind in prerequisites.KUEUE_PLURALS:
            version = _kueue_version(cluster, answers)
            if version is None:
                return ("no %s API (%s in %s %s: install Kueue), for %s"
                        % (need.kind, prerequisites.KUEUE_PLURALS[need.kind], prerequisites.KUEUE_GROUP,
                           "/".join(prerequisites.KUEUE_VERSIONS), need.describe()))
            res = Resource(prerequisites.KUEUE_GROUP, version, prerequisites.KUEUE_PLURALS[need.kind])
            if need.namespace == prerequisites.CLUSTER_SCOPED:
                found = cluster.get_cluster_scoped(res, need.name)
            else:
                found = cluster.get(res, need.name, need.namespace)
            answers[where] = found or None
        else:  # an Argo Events object
            found = cluster.get(Resource(ARGO_GROUP, ARGO_VERSION, PLURALS[need.kind]), need.name, need.namespace)
            answers[where] = found or None
    if answers[where] is None:
        hint = {prerequisites.LOCAL_QUEUE: " (named by @jobset(queue=...))",
                prerequisites.WORKLOAD_PRIORITY_CLASS: " (named by @jobset(priority_class=...))",
                prerequisites.PRIORITY_CLASS: " (named by @pod_spec(priority_class_name=...))"}.get(need.kind, "")
        return "no %s %s%s" % (need.kind, need.where, hint)
    if need.key and need.key not in answers[where]:
        return "%s %s/%s has no key %s" % (need.kind, need.namespace, need.name, need.key)
    return None


def _kueue_version(cluster: Cluster, answers: dict) -> str | None:
    """The newest Kueue API version the cluster serves (its LocalQueues, asked once), or None: no Kueue."""
    if prerequisites.KUEUE_GROUP not in answers:
        answers[prerequisites.KUEUE_GROUP] = next(
            (v for v in prerequisites.KUEUE_VERSIONS
             if "localqueues" in (cluster.served(prerequisites.KUEUE_GROUP, v) or ())), None)
    return answers[prerequisites.KUEUE_GROUP]
