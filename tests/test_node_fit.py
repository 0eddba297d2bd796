"""`create` warns (never refuses) when a gang could never start whole on the nodes it may use
(mfargo/node_fit.py, through cluster_needs.node_warnings): judged on fake Node lists and the
JobSets mfargo compiles."""

from __future__ import annotations

from flowtools import compile_source, gang_flow

from mfargo import cluster_needs, node_fit
from mfargo.cluster import ClusterError

TAINT = {"key": "mfargo-e2e/second-node", "value": "true", "effect": "NoSchedule"}


def node(name, cpu="2", memory="8Gi", labels=None, taints=(), unschedulable=False):
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"taints": list(taints), **({"unschedulable": True} if unschedulable else {})},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "ephemeral-storage": "100Gi", "pods": "110"}}}


class Cluster:
    def __init__(self, nodes=None, error=None):
        self._nodes, self.error, self.asked = nodes, error, 0

    def nodes(self):
        self.asked += 1
        if self.error:
            raise self.error
        return self._nodes


def test_a_rank_larger_than_every_node_it_may_use_is_named(tmp_path):
    docs = compile_source(tmp_path, gang_flow("BigRankFlow", "@kubernetes(cpu=3, memory=300)"))
    [gang] = node_fit.gangs(docs)
    assert (gang.step, gang.queued, [(r.job, r.count) for r in gang.ranks]) == ("train", False, [("rank", 1)])
    # The second node is larger, but tainted: the rank may not use it.
    nodes = [node("n1"), node("n2", cpu="8", taints=[TAINT]), node("n3", cpu="16", unschedulable=True)]
    assert node_fit.never_fits(gang, nodes) == (
        "one rank pod of step train requests more than any node it may use has allocatable (cpu 3 > 2)")
    assert node_fit.never_fits(gang, [node("n1"), node("n2", cpu="4")]) is None
    warnings = cluster_needs.node_warnings(Cluster(nodes), docs)
    assert warnings == ["one rank pod of step train requests more than any node it may use has allocatable "
                        "(cpu 3 > 2): it would wait for its start window, then fail"]


def test_ranks_that_fit_one_by_one_but_not_together_are_named(tmp_path):
    """A control of 2 CPUs and workers of 1: each fits a 2-CPU node, and the control and one
    worker (the ranks the manifest states: the worker count is a run-time value) need 3."""
    docs = compile_source(tmp_path, gang_flow("TogetherFlow", '@kubernetes(cpu=1, memory=300)\n'
                                                              '@jobset(control={"cpu": 2})'))
    [gang] = node_fit.gangs(docs)
    assert [(r.job, r.count) for r in gang.ranks] == [("control", 1), ("worker", 0)]
    assert node_fit.never_fits(gang, [node("n1")]) is None  # 2 CPUs: the control alone fits
    gang = node_fit.Gang(gang.step, (gang.ranks[0], node_fit.Rank(**{**vars(gang.ranks[1]), "count": 1})), False)
    assert node_fit.never_fits(gang, [node("n1"), node("n2", taints=[TAINT])]) == (
        "step train's ranks request more than all the nodes they may use have allocatable together (cpu 3 > 2)")
    assert node_fit.never_fits(gang, [node("n1"), node("n2")]) is None


def test_node_selectors_and_tolerations_choose_the_nodes():
    rank = node_fit.Rank("rank", (), (("pool", "gpu"),), ({"key": TAINT["key"], "operator": "Exists"},), 1)
    nodes = [node("plain"), node("gpu", labels={"pool": "gpu"}, taints=[TAINT]),
             node("gpu-other-taint", labels={"pool": "gpu"}, taints=[{"key": "x", "effect": "NoExecute"}]),
             node("gpu-soft-taint", labels={"pool": "gpu"}, taints=[{"key": "x", "effect": "PreferNoSchedule"}])]
    assert [n["metadata"]["name"] for n in node_fit.usable(rank, nodes)] == ["gpu", "gpu-soft-taint"]
    assert node_fit.never_fits(node_fit.Gang("train", (rank,), False), [node("plain")]) == (
        "no node step train's rank pods may use (node selector, taints)")


def test_nothing_to_say_without_gangs_a_queued_gang_or_nodes_unread(tmp_path):
    queued = compile_source(tmp_path, gang_flow("QueuedBigFlow", '@kubernetes(cpu=3, memory=300)\n@jobset(queue="q")'))
    cluster = Cluster([node("n1")])
    assert cluster_needs.node_warnings(cluster, queued) == [] and cluster.asked == 0  # Kueue's to judge
    big = compile_source(tmp_path, gang_flow("BigFlow", "@kubernetes(cpu=3, memory=300)"))
    assert cluster_needs.node_warnings(Cluster(error=ClusterError("list nodes: Forbidden", 403)), big) == [
        "could not list the cluster's nodes to check that each gang fits them (list nodes: Forbidden)"]
