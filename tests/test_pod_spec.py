"""@pod_spec: a pod's priority class, affinity, topology spread constraints and any other field
of its spec mfargo's contract leaves free, on any step and both roles of a gang; checked against
Kubernetes' PodSpec schema at compile time; a PriorityClass that is not in the cluster is
refused before anything is deployed; `mfargo run` ignores where pods run and refuses the rest."""

from __future__ import annotations

import json

import pytest
from k8s_fake import kube  # noqa: F401 - fixture
from test_cluster_cli import FLOW, Env, one_line_error

from flowtools import compile_source, gang_flow
from flowtools import templates as template_map
from mfargo.compiler import CompileError, decorators, naming
from test_pod_model import emit_manifest

AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}}
SPREAD = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
           "labelSelector": {"matchLabels": {"team_name": "ml"}}}]  # a label key stays as written
CHANGED = {"priority_class_name": "high", "affinity": AFFINITY, "topology_spread_constraints": SPREAD,
           "patch": {"runtimeClassName": "gvisor"}}


def pod_spec(attributes: dict):
    from metaflow_extensions.mfargo.plugins.pod_spec_decorator import PodSpecDecorator

    return PodSpecDecorator(attributes=dict(attributes))


def compute(*decos):
    return decorators.compute("train", list(decos), "python:3.11", None)


def test_the_table_has_every_attribute_of_the_decorator():
    from metaflow_extensions.mfargo.plugins.pod_spec_decorator import PodSpecDecorator

    assert sorted(decorators.POD_SPEC_ATTRIBUTES) == sorted(PodSpecDecorator.defaults) == sorted(CHANGED)


@pytest.mark.parametrize("attribute", sorted(CHANGED))
def test_each_attribute_changes_the_field_its_row_names(attribute):
    field = decorators.POD_SPEC_ATTRIBUTES[attribute].removeprefix("compute.")
    before = getattr(compute(pod_spec({})), field)
    after = getattr(compute(pod_spec({attribute: CHANGED[attribute]})), field)
    assert before is None and after is not None, (attribute, after)
    if attribute != "priority_class_name":
        assert json.loads(after) == {"patch": CHANGED["patch"]}.get(attribute, CHANGED[attribute])


GANG = gang_flow("PlacedFlow", decorators="@pod_spec(priority_class_name=%r, affinity=%r, "
                                          "topology_spread_constraints=%r)" % ("high", AFFINITY, SPREAD),
                 start_decorators="@pod_spec(patch={'runtimeClassName': 'gvisor'})")


def test_a_step_and_both_roles_of_a_gang_carry_them_and_the_pods_mfargo_adds_their_placement(tmp_path):
    templates = template_map(compile_source(tmp_path, GANG)[0])
    train = emit_manifest(templates[naming.template_name("train")])
    for job in train["spec"]["replicatedJobs"]:
        spec = job["template"]["spec"]["template"]["spec"]
        assert (spec["priorityClassName"], spec["affinity"], spec["topologySpreadConstraints"]) \
            == ("high", AFFINITY, SPREAD)
    report = templates[naming.gang_report_template_name("train")]
    assert (report["priorityClassName"], report["affinity"]) == ("high", AFFINITY)  # it runs where the gang can
    assert "podSpecPatch" not in report  # the gang's spread is the gang's own
    start = templates[naming.template_name("start")]
    assert json.loads(start["podSpecPatch"]) == {"runtimeClassName": "gvisor"}
    assert "priorityClassName" not in templates[naming.template_name("join")]


@pytest.mark.parametrize("attributes, words", [
    ({"patch": {"containers": []}}, "patch: containers is mfargo's container's"),
    ({"patch": {"volumes": []}}, "patch: volumes is the volumes @kubernetes and mfargo mount's"),
    ({"patch": {"serviceAccountName": "x"}}, "@kubernetes(service_account=...)"),
    ({"patch": {"subdomain": "x"}}, "a gang's host names"),
    ({"patch": {"priorityClassName": "x"}}, "@pod_spec(priority_class_name=...)"),
    ({"patch": {"runtimeClassName": 3}}, "runtimeClassName: 3 is not of type 'string'"),
    ({"patch": {"bogus": 1}}, "Additional properties are not allowed ('bogus' was unexpected)"),
    ({"patch": "x"}, "patch must be a dict"),
    ({"topology_spread_constraints": [{"maxSkew": "1", "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule"}]},
     "topologySpreadConstraints[0].maxSkew: '1' is not of type 'integer'"),
    ({"topology_spread_constraints": {"maxSkew": 1}}, "topology_spread_constraints must be a list"),
    ({"affinity": {"nodeAffinity": {"required": 1}}}, "affinity.nodeAffinity: Additional properties"),
    ({"affinity": {1: {}}}, "affinity has a key 1 that is not a string"),
    ({"priority_class_name": "High Priority"}, "priority_class_name 'High Priority' is not a Kubernetes object name"),
    ({"priority_class_name": 1000}, "priority_class_name must be a PriorityClass's name, not 1000"),
])
def test_what_kubernetes_or_mfargos_contract_refuses_is_one_line_naming_step_and_decorator(attributes, words):
    with pytest.raises(CompileError) as e:
        compute(pod_spec(attributes))
    assert words in str(e.value) and "step *train* @pod_spec" in str(e.value), str(e.value)


PRIORITY_FLOW = FLOW.replace("from metaflow import", "from metaflow import pod_spec,").replace(
    "    @step\n    def start", '    @pod_spec(priority_class_name="high")\n    @step\n    def start', 1)


def test_a_priority_class_missing_from_the_cluster_is_refused_before_anything_is_deployed(kube, tmp_path):  # noqa: F811
    env = Env(kube, tmp_path, PRIORITY_FLOW)
    line = one_line_error(env.create(check=False))
    assert "no PriorityClass high (named by @pod_spec(priority_class_name=...))" in line, line
    assert kube.names("workflowtemplates", "ns1") == []
    kube.put({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"},
              "value": 1000}, group="scheduling.k8s.io", version="v1", plural="priorityclasses", namespace=None)
    env.create()
    assert kube.get("workflowtemplates", "helloflow", "ns1")["spec"]["templates"]


def test_mfargo_run_ignores_where_pods_run_and_refuses_a_patch(tmp_path):
    from mfargo.runner import preflight
    from mfargo.runner.model import WorkflowDoc, WorkflowError

    placed = gang_flow("RunPlacedFlow", decorators="@pod_spec(priority_class_name=%r, affinity=%r, "
                                                   "topology_spread_constraints=%r)" % ("high", AFFINITY, SPREAD),
                       start_decorators="@pod_spec(priority_class_name='high', topology_spread_constraints=%r)"
                       % SPREAD)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    preflight.check(WorkflowDoc(compile_source(tmp_path / "a", placed)[0]))
    patched = compile_source(tmp_path / "b", GANG)[0]
    with pytest.raises(WorkflowError, match="podSpecPatch field 'runtimeClassName' is not supported by the local runner"):
        preflight.check(WorkflowDoc(patched))
