"""The pod the API server stores for each step is the pod the step asked for, and the pod
Metaflow's own compiler gets for it: one flow of mixed resource profiles (a step asking for an
extended resource the nodes advertise, three Guaranteed steps around a step asking for more
than their limit, a gang with its own size), deployed with mfargo's `create` and with Metaflow
2.19.39's own Argo compiler, both run on the loopback cluster, and their stored pods compared
field by field: resources, the volumes the decorators imply and their mounts, the tmpfs
variable, the step's labels and annotations, node selector, tolerations, security context,
service account, pull secrets and Secrets. They differ only where docs/cli.md says so (each
tool's own env, labels, annotations and volumes; the JobSet pod's container name).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import textwrap

import pytest

from clustertools import failed_nodes, kubectl
from flowtools import gang_flow
from test_cluster_deploy import deployed, start, succeeded, unique

pytestmark = pytest.mark.cluster

FLOW = '''
from metaflow import FlowSpec, current, kubernetes, parallel, step

ASKED = dict(labels={"team": "pods-test"}, annotations={"pods-test/note": "asked"},
             node_selector={"kubernetes.io/os": "linux"},
             tolerations=[{"key": "pods-test/never", "operator": "Exists", "effect": "NoSchedule"}],
             security_context={"allow_privilege_escalation": False})
GUARANTEED = dict(qos="Guaranteed", cpu=0.3, memory=500)  # 300 MB: a step process was OOM-killed


class PodsFlow(FlowSpec):
    @kubernetes(cpu=0.2, memory=300, extended_resources={%(device)r: "1"}, use_tmpfs=True, tmpfs_size=64,
                shared_memory=32, image_pull_secrets=[%(pull_secret)r], **ASKED)
    @step
    def start(self):
        self.next(self.first)

    @kubernetes(**GUARANTEED)
    @step
    def first(self):
        self.next(self.bigger)

    @kubernetes(cpu=0.4, memory=600)  # more than the Guaranteed steps' limits
    @step
    def bigger(self):
        self.next(self.last)

    @kubernetes(**GUARANTEED)
    @step
    def last(self):
        self.next(self.train, num_parallel=2)

    # No image_pull_secrets on a gang here: Metaflow 2.19.39's compiler fails on them
    # (kubernetes_jobsets.py: V1LocalObjectReference(secret), "takes 1 positional argument").
    @kubernetes(cpu=0.25, memory=300, extended_resources={%(device)r: "1"}, **ASKED)
    @parallel
    @step
    def train(self):
        self.rank = current.parallel.node_index
        self.next(self.join)

    @step
    def join(self, inputs):
        self.ranks = sorted(i.rank for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    PodsFlow()
'''
STEPS = ("start", "first", "bigger", "last", "train", "join", "end")
USER_LABELS = ("team",)
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
USER_ANNOTATIONS = ("pods-test/note",)
USER_TOLERATION = "pods-test/never"
# What the decorators mount: the tmpfs and /dev/shm.
USER_MOUNTS = ("/metaflow_temp", "/dev/shm")
# Core's gang step runs as the namespace's `default` account and brings no RBAC for it.
CORE_GANG_RULES = [{"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"],
                    "verbs": ["create", "get", "list", "watch", "patch", "update", "delete"]}]


def main_container(pod: dict) -> dict:
    """The step's container: Argo's `main`, or a JobSet pod's only one."""
    containers = pod["spec"]["containers"]
    return next((c for c in containers if c["name"] == "main"), containers[0])


def asked(pod: dict) -> dict:
    """What a step's decorators ask of its pod, as the API server stored it."""
    spec, c = pod["spec"], main_container(pod)
    volumes = {v["name"]: v.get("emptyDir") for v in spec.get("volumes", [])}
    meta = pod["metadata"]
    return {
        "resources": c.get("resources"),
        "mounts": {m["mountPath"]: volumes.get(m["name"]) for m in c.get("volumeMounts", [])
                   if m["mountPath"] in USER_MOUNTS},
        "tempdir": [e.get("value") for e in c.get("env", []) if e["name"] == "METAFLOW_TEMPDIR"],
        "labels": {k: v for k, v in meta.get("labels", {}).items() if k in USER_LABELS},
        "annotations": {k: v for k, v in meta.get("annotations", {}).items() if k in USER_ANNOTATIONS},
        "nodeSelector": spec.get("nodeSelector"),
        "tolerations": [t for t in spec.get("tolerations", []) if t.get("key") == USER_TOLERATION],
        "securityContext": c.get("securityContext"),
        "serviceAccountName": spec.get("serviceAccountName"),
        "imagePullSecrets": spec.get("imagePullSecrets"),
        "envFrom": c.get("envFrom"),
    }


def run_pods(env: dict, workflow: str) -> dict[str, list[dict]]:
    """{step name: its pods} of a run (Argo's pods, and for a gang its JobSet's pods, not the
    pod Argo runs its resource template in), and under "" the pods of no step (daemons)."""
    pods = json.loads(kubectl(env, "get", "pods", "-n", env["METAFLOW_KUBERNETES_NAMESPACE"], "-l",
                              "workflows.argoproj.io/workflow=" + workflow, "-o", "json"))["items"]
    out: dict[str, list[dict]] = {}
    for pod in pods:
        step = pod["metadata"].get("annotations", {}).get("metaflow/step_name", "")
        out.setdefault(step, []).append(pod)
    for step, mine in out.items():
        ranks = [p for p in mine if JOBSET_LABEL in p["metadata"].get("labels", {})]
        out[step] = ranks or mine
    return out


def core_deploy(env: dict, flow, name: str) -> list[dict]:
    """Metaflow's own compiler (mfargo's extension off): its WorkflowTemplate (its code package
    uploaded to the cluster's S3), and a Role on JobSets for the account its gang step runs as."""
    empty = flow.parent / "no-extensions"
    empty.mkdir(exist_ok=True)
    out = subprocess.run([sys.executable, flow.name, "argo-workflows", "--name", name, "create", "--only-json"],
                         cwd=flow.parent, env={**env, "METAFLOW_EXTENSIONS_SEARCH_DIRS": str(empty)},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    template = json.loads(out.stdout[out.stdout.index("{"):])
    assert "mfargo_internal" not in json.dumps(template), "core's compile went through mfargo"
    ns = env["METAFLOW_KUBERNETES_NAMESPACE"]
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name},
            "rules": CORE_GANG_RULES}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}]}
    docs = [template, role, binding]
    kubectl(env, "create", "-n", ns, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    return docs


def test_stored_pods_are_what_each_step_asked_for_and_what_core_gives_it(cluster_env, tmp_path):
    env = cluster_env
    ns = env["METAFLOW_KUBERNETES_NAMESPACE"]
    flow = tmp_path / "pods_flow.py"
    flow.write_text(textwrap.dedent(FLOW % {"device": env["MFARGO_E2E_DEVICE"],
                                            "pull_secret": env["MFARGO_E2E_PULL_SECRET"]}).lstrip())
    name, core_name = unique("pods"), unique("pods-core")
    core_docs = core_deploy(env, flow, core_name)
    core_run = core_name + "-" + secrets.token_hex(3)
    try:
        with deployed(env, flow, name, "--pod-gc", "Never") as runs:
            kubectl(env, "create", "-n", ns, "-f", "-", input=json.dumps(
                {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": core_run},
                 "spec": {"workflowTemplateRef": {"name": core_name}}}))
            ours = start(env, flow, name, runs).removeprefix("argo-")
            succeeded(env, "argo-" + ours)  # on the cluster that refused the third step's pod before
            core_wf = succeeded(env, "argo-" + core_run)
            assert core_wf["status"]["phase"] == "Succeeded", failed_nodes(core_wf)
            mine, theirs = run_pods(env, ours), run_pods(env, core_run)
            for step in STEPS:
                assert mine.get(step) and theirs.get(step), (step, sorted(mine), sorted(theirs))
                ours_asked = [asked(p) for p in mine[step]]
                assert all(a == ours_asked[0] for a in ours_asked), step  # every rank alike
                assert ours_asked[0] == asked(theirs[step][0]), step
            start_pod = asked(mine["start"][0])
            assert start_pod["resources"]["limits"] == {env["MFARGO_E2E_DEVICE"]: "1"}
            assert start_pod["tempdir"] == ["/metaflow_temp"]
            assert asked(mine["bigger"][0])["resources"] == {
                "requests": {"cpu": "400m", "ephemeral-storage": "10240M", "memory": "600M"}}
            for daemon in mine.get("", []):  # the heartbeat: its own size, no step's
                resources = main_container(daemon)["resources"]
                assert "limits" not in resources and resources["requests"]["cpu"] == "0", resources
    finally:
        kubectl(env, "delete", "workflow", core_run, "-n", ns, "--ignore-not-found", "--wait=false", check=False)
        kubectl(env, "delete", "-n", ns, "-f", "-", "--ignore-not-found", "--wait=false", check=False,
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": core_docs}))
        kubectl(env, "delete", "jobsets", "-n", ns, "-l", "workflows.argoproj.io/workflow=" + core_run,
                "--ignore-not-found", "--wait=false", check=False)


# Every pod of `start` and of the gang `train`: a priority class, a node affinity, a spread.
PLACEMENT = ('@kubernetes(cpu=0.2, memory=300, labels={"pods-test": "spread"})\n'
             '@pod_spec(priority_class_name=%(priority)r, affinity={"nodeAffinity": {'
             '"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": ['
             '{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}}, '
             'topology_spread_constraints=[{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", '
             '"whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"pods-test": "spread"}}}])')


def test_a_priority_class_an_affinity_and_a_spread_constraint_are_in_the_stored_pods(cluster_env, tmp_path):
    env = cluster_env
    priority = unique("pods-test-priority")
    kubectl(env, "create", "-f", "-", input=json.dumps(
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": priority},
         "value": 4242, "description": "tests/test_cluster_pods.py"}))
    try:
        flow = tmp_path / "placed_flow.py"
        placement = PLACEMENT % {"priority": priority}
        flow.write_text(gang_flow("PlacedFlow", decorators=placement, start_decorators=placement))
        name = unique("placed")
        with deployed(env, flow, name, "--pod-gc", "Never") as runs:
            run = start(env, flow, name, runs).removeprefix("argo-")
            succeeded(env, "argo-" + run)
            pods = run_pods(env, run)
        for step in ("start", "train"):
            assert len(pods[step]) == {"start": 1, "train": 2}[step]
            for pod in pods[step]:
                spec = pod["spec"]
                assert (spec["priorityClassName"], spec["priority"]) == (priority, 4242), step
                terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["linux"], step
                [spread] = spec["topologySpreadConstraints"]
                assert (spread["topologyKey"], spread["labelSelector"]) == (
                    "kubernetes.io/hostname", {"matchLabels": {"pods-test": "spread"}}), step
        for step in ("join", "end"):
            assert "priorityClassName" not in pods[step][0]["spec"] or \
                pods[step][0]["spec"]["priorityClassName"] != priority, step
    finally:
        kubectl(env, "delete", "priorityclass", priority, "--ignore-not-found", check=False)
