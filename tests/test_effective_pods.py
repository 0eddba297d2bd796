"""No pod gets what its step did not ask for: the pod Argo runs for each template (the template
with templateDefaults merged in, as Argo merges them) has exactly the resources its step
asked for, over random mixes of resource profiles across a flow's steps; the pods mfargo adds
keep their own small size.

The expectation is Metaflow's own (``kube_utils.qos_requests_and_limits``, plus GPUs and
extended resources as core's compiler adds them), not mfargo's formula; the merge is mfargo's
``base.template_defaults``, held to Argo's own merge (e2e/tools/argo-defaults) on every flow.
"""
from __future__ import annotations

import random
from decimal import Decimal

import pytest

from engine_tools import argo_merged
from flowtools import load_flow, write_flow
from mfargo import pipeline
from mfargo.base import k8s_syntax, template_defaults
from mfargo.compiler import CompileOptions, naming
from mfargo.metaflow_cli.metaflow_inputs import flow_decorators
from mfargo.templates import pod

# Profiles a step may have: (decorators, the @kubernetes attributes they amount to).
PROFILES = {
    "none": ("", {}),
    "gpu": ("@kubernetes(gpu=2)", {"gpu": 2}),
    "amd": ('@kubernetes(gpu=1, gpu_vendor="amd")', {"gpu": 1, "gpu_vendor": "amd"}),
    "guaranteed": ('@kubernetes(qos="Guaranteed", cpu=0.3, memory=300)', {"qos": "Guaranteed", "cpu": 0.3,
                                                                          "memory": 300}),
    "bigger": ("@kubernetes(cpu=0.4, memory=400)", {"cpu": 0.4, "memory": 400}),
    "disk": ("@kubernetes(disk=2048)", {"disk": 2048}),
    "device": ('@kubernetes(extended_resources={"example.com/dev": "1"})', {"extended": {"example.com/dev": "1"}}),
    "shm": ("@kubernetes(shared_memory=256)", {}),
    "resources": ("@resources(cpu=2, memory=8192)", {"cpu": 2, "memory": 8192}),
    "everything": ('@kubernetes(qos="Guaranteed", cpu=2, memory=1000, disk=500, gpu=1, '
                   'extended_resources={"vpc.amazonaws.com/efa": "4"})',
                   {"qos": "Guaranteed", "cpu": 2, "memory": 1000, "disk": 500, "gpu": 1,
                    "extended": {"vpc.amazonaws.com/efa": "4"}}),
}
SEEDS = range(24)
OPTIONS = CompileOptions(datastore="s3", datastore_root="s3://mfargo-examples/metaflow", code_in_image="/app")


def chain_flow(name: str, profiles: list[str]) -> str:
    """start -> s1 -> ... -> end, the i-th step under the i-th profile's decorators."""
    steps = ["start"] + ["s%d" % i for i in range(1, len(profiles) - 1)] + ["end"]
    body = "".join("    %s\n    @step\n    def %s(self):\n        %s\n\n"
                   % (PROFILES[p][0], s, "self.next(self.%s)" % n if n else "pass")
                   for s, n, p in zip(steps, steps[1:] + [None], profiles))
    return "from metaflow import *\n\n\nclass %s(FlowSpec):\n%s\nif __name__ == '__main__':\n    %s()\n" % (
        name, body, name)


def metaflows(attrs: dict) -> dict:
    """requests and limits as Metaflow's compiler writes them for these @kubernetes attributes."""
    from metaflow.plugins.kubernetes.kube_utils import qos_requests_and_limits

    requests, limits = qos_requests_and_limits(attrs.get("qos", "Burstable"), attrs.get("cpu", 1),
                                               attrs.get("memory", 4096), attrs.get("disk", 10240))
    requests, limits = {**requests, **attrs.get("extended", {})}, {**limits, **attrs.get("extended", {})}
    if attrs.get("gpu"):
        limits["%s.com/gpu" % attrs.get("gpu_vendor", "nvidia")] = str(attrs["gpu"])
    return {"requests": requests, "limits": limits}


def values(resources: dict | None) -> dict:
    """Quantities as numbers ('0.3' and '300m' are one request); empty maps as none."""
    return {kind: {k: k8s_syntax.quantity_value(str(v)) for k, v in (resources or {}).get(kind, {}).items()}
            for kind in ("requests", "limits") if (resources or {}).get(kind)}


def compiled(tmp_path, seed: int) -> tuple[dict, dict[str, str]]:
    rng = random.Random(seed)
    profiles = [rng.choice(sorted(PROFILES)) for _ in range(rng.randint(2, 6))]
    name = "Mix%dFlow" % seed
    flow = load_flow(write_flow(tmp_path, chain_flow(name, profiles)))
    wf = pipeline.compile_ir(flow, flow._graph, OPTIONS, flow_decorators(flow))
    wt = pipeline.documents(wf)[0]
    steps = ["start"] + ["s%d" % i for i in range(1, len(profiles) - 1)] + ["end"]
    return wt, {naming.template_name(s): p for s, p in zip(steps, profiles)}


@pytest.mark.parametrize("seed", SEEDS)
def test_every_pod_argo_runs_has_the_resources_its_step_asked_for(tmp_path, seed):
    wt, profile_of = compiled(tmp_path, seed)
    defaults = wt["spec"].get("templateDefaults")
    own_sizes = {}
    for kind, size in pod.OWN_SIZE.items():
        if size is not None:
            own_sizes.setdefault(str(values(size)), kind)
    seen = set()
    for template in wt["spec"]["templates"]:
        if "container" not in template:
            continue
        runs = template_defaults.merged(defaults, template)["container"].get("resources")
        name = template["name"]
        if name in profile_of:
            assert values(runs) == values(metaflows(PROFILES[profile_of[name]][1])), (name, profile_of[name], runs)
            seen.add(name)
        else:  # a pod mfargo adds: its own size, nothing of any step's
            assert str(values(runs)) in own_sizes, (name, runs)
    assert seen == set(profile_of)


def test_a_step_asking_for_more_than_a_guaranteed_steps_limit_runs_as_asked(tmp_path):
    """The flow the issue found failing on the cluster: three Guaranteed steps and a bigger one."""
    from flowtools import templates

    profiles = ["guaranteed", "guaranteed", "bigger", "guaranteed"]
    flow = load_flow(write_flow(tmp_path, chain_flow("GuaranteedMixFlow", profiles)))
    wt = pipeline.documents(pipeline.compile_ir(flow, flow._graph, OPTIONS, flow_decorators(flow)))[0]
    bigger = template_defaults.merged(wt["spec"]["templateDefaults"], templates(wt)["s2"])["container"]["resources"]
    assert values(bigger) == {"requests": {"cpu": Decimal("0.4"), "memory": Decimal(400 * 10**6),
                                           "ephemeral-storage": Decimal(10240 * 10**6)}}
    heartbeat_like = [t for t in wt["spec"]["templates"] if t.get("daemon")]
    for daemon in heartbeat_like:
        runs = template_defaults.merged(wt["spec"]["templateDefaults"], daemon)["container"]["resources"]
        assert "limits" not in runs


@pytest.mark.parametrize("seed", SEEDS[:6])
def test_mfargo_merges_templatedefaults_as_argo_does(tmp_path, seed):
    wt, _ = compiled(tmp_path, seed)
    argo, ours = argo_merged(wt)
    assert sorted(argo) == sorted(ours)
    for name in argo:
        assert ours[name] == argo[name], name


def test_mfargo_merges_every_example_as_argo_does():
    import yaml

    from flowtools import EXAMPLES

    for path in sorted(EXAMPLES.glob("*.yaml")):
        wt = next(d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "WorkflowTemplate")
        argo, ours = argo_merged(wt)
        assert ours == argo, path.name


def test_a_pod_argo_would_get_with_a_request_above_its_limit_is_refused_by_the_backstop_and_mfargo_run(tmp_path):
    """The YAML mfargo wrote before: Guaranteed resources in templateDefaults, a bigger step
    stating only its requests. Argo merges the limits into it; the API server refuses the pod
    ("must be less than or equal to cpu limit"). The compile-time backstop and `mfargo run`'s
    preflight judge the merged pod, and both refuse it, naming the template."""
    import copy

    from flowtools import templates
    from mfargo.base.validation import validate_documents
    from mfargo.runner import preflight
    from mfargo.runner.model import WorkflowDoc, WorkflowError

    profiles = ["guaranteed", "guaranteed", "bigger", "guaranteed"]
    flow = load_flow(write_flow(tmp_path, chain_flow("OldLeakFlow", profiles)))
    wt = pipeline.documents(pipeline.compile_ir(flow, flow._graph, OPTIONS, flow_decorators(flow)))[0]
    assert not list(validate_documents([wt]))
    old = copy.deepcopy(wt)
    guaranteed = templates(old)["start"]["container"]["resources"]
    old["spec"]["templateDefaults"]["container"]["resources"] = guaranteed
    for template in old["spec"]["templates"]:
        if template.get("container", {}).get("resources") == guaranteed:
            del template["container"]["resources"]
    templates(old)["s2"]["container"]["resources"].pop("limits", None)
    problems = [str(p) for p in validate_documents([old])]
    assert any("s2" in p and "more than the limit" in p for p in problems), problems
    with pytest.raises(WorkflowError, match=r"template 's2'.*requests.cpu.*more than the limit"):
        preflight.check(WorkflowDoc(old))
