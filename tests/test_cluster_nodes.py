"""Gangs on two nodes (e2e/cluster runs a second kubelet with its own containerd, bridge and pod
addresses, tainted so that only pods tolerating it run there): ranks on different nodes meet
over cluster DNS, `@jobset(exclusive_topology=...)` puts each job on a node of its own, a node
selector with a toleration pins a gang to the second node, and a gang asking for more nodes
than there are ends at its deadline, its report naming the rank that could not start. Where
each rank ran is read from its pod.

Exclusive placement keeps every other JobSet's pod off a node one of its Jobs uses (and waits
for nodes that no other JobSet uses), so beside other gang tests these waited minutes and held
theirs up: conftest.py runs this module last of the cluster tests, on the Argo release the
session ends with (its tests are about JobSet and the scheduler; Argo only creates the JobSet)."""

from __future__ import annotations

import json
import re

import pytest
from clustertools import LAST_ARGO, failed_nodes, kubectl, wait_workflow
from test_cluster_e2e import read_run
from test_cluster_gangs import MEET, SMALL, deployed, jobsets, nodes_by_name, write_flow

pytestmark = [pytest.mark.cluster, pytest.mark.parametrize("cluster_env", [LAST_ARGO], indirect=True, scope="module",
                                                          ids=["argo-" + LAST_ARGO])]

HOSTNAME = "kubernetes.io/hostname"


def placed(decorators: str) -> str:
    """MEET (ranks exchange numbers through the control's JobSet host name) with ``decorators``
    in place of its @kubernetes. A rank may wait minutes for its node: with exclusive placement
    JobSet keeps every other Job's pod, other tests' gangs included, off a node in use."""
    assert SMALL in MEET and "wait=120" in MEET
    return (MEET.replace(SMALL, decorators).replace("import FlowSpec,", "import FlowSpec, jobset,")
            .replace("wait=120", "wait=480"))


def tolerating(env: dict, **kubernetes: str) -> str:
    toleration = {"key": env["MFARGO_E2E_SECOND_NODE_TAINT"], "operator": "Exists", "effect": "NoSchedule"}
    args = "".join(", %s=%s" % (k, v) for k, v in kubernetes.items())
    return "@kubernetes(cpu=0.25, memory=300, port=29500, tolerations=[%r]%s)" % (toleration, args)


def rank_nodes(env: dict, jobset: str) -> dict[str, str]:
    """Pod name -> the node it ran on, for the pods of ``jobset``."""
    pods = json.loads(kubectl(env, "get", "pods", "-n", env["METAFLOW_KUBERNETES_NAMESPACE"], "-o", "json",
                              "-l", "jobset.sigs.k8s.io/jobset-name=" + jobset))["items"]
    return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods}


def test_gangs_spread_over_both_nodes_or_pinned_to_one_meet_over_dns(cluster_env, tmp_path):
    first, second = cluster_env["MFARGO_E2E_NODES"].split()
    spread = write_flow(tmp_path, "GangSpreadFlow", placed(
        tolerating(cluster_env) + '\n    @jobset(exclusive_topology="%s")' % HOSTNAME))
    pinned = write_flow(tmp_path, "GangPinnedFlow", placed(tolerating(cluster_env, node_selector={HOSTNAME: second})))
    with deployed(cluster_env, spread, pinned) as start:
        runs, wfs = {}, {}
        # One after the other: the exclusive gang's Job keeps the pinned gang's pods off the node
        # it uses and they keep it off that node, so run together one waits for the other anyway
        # (376-394 s in a run, against about 2 minutes one after the other).
        for what, flow in (("spread", spread), ("pinned", pinned)):
            runs[what] = start(flow)
            wfs[what] = wait_workflow(cluster_env, runs[what], timeout=600)
        where, got = {}, {}
        for what, run in runs.items():
            assert wfs[what]["status"]["phase"] == "Succeeded", (what, failed_nodes(wfs[what]))
            [js] = [j["metadata"]["name"] for j in jobsets(cluster_env, run)]
            where[what] = sorted(rank_nodes(cluster_env, js).values())
            flow = "GangSpreadFlow" if what == "spread" else "GangPinnedFlow"
            got[what] = read_run(cluster_env, "%s/%s" % (flow, run), "{'ok': run.successful, 'got': run['join'].task.data.got}")
    assert where == {"spread": sorted([first, second]), "pinned": [second, second]}, where
    for what in runs:
        assert got[what] == {"ok": True, "got": [[0, 2, 1], [1, 2, 1]]}, (what, got)


def test_a_gang_wanting_more_nodes_than_there_are_ends_at_its_deadline_naming_the_rank_left_out(cluster_env, tmp_path):
    """Three ranks, each wanting a node of its own, two nodes: two ranks start and wait for the
    third (holding their nodes), which is never scheduled; the step's @timeout ends every Job at
    once, and the report names the rank that never started and the scheduler's reason, not a
    rank that was only waiting for it."""
    flow = write_flow(tmp_path, "GangCrowdedFlow", placed(
        tolerating(cluster_env) + '\n    @jobset(exclusive_topology="%s")\n    @timeout(seconds=60)' % HOSTNAME)
        .replace("import FlowSpec,", "import FlowSpec, timeout,"))
    with deployed(cluster_env, flow) as start:
        wf = wait_workflow(cluster_env, start(flow, "--nodes", "3"), timeout=600)
    assert wf["status"]["phase"] == "Failed", failed_nodes(wf)
    [report] = nodes_by_name(wf)["train-Failure-report"]
    assert re.search(r"gang step train: rank \d \(\w+\) failed first: DeadlineExceeded, no exit code: never started: "
                     r"FailedScheduling: 0/2 nodes are available: .*anti-affinity", report["message"]), report["message"]
