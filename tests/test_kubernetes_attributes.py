"""Every attribute of Metaflow's @kubernetes and @resources reaches the IR field mfargo's table
(``compiler.decorators.KUBERNETES_ATTRIBUTES``) names, and from there every pod of its step
(tests/test_pod_model.py holds the IR field to the pods). The table is read against
Metaflow's own decorators, so an attribute a Metaflow upgrade adds fails here until it has
a row: none is silently ignored.
"""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from flowtools import compile_source, gang_flow
from flowtools import templates as template_map
from test_pod_model import emit_manifest
from mfargo.compiler import CompileError, decorators, ir, naming
from mfargo.templates import pod

# A value other than the default for each attribute, as a user writes it in @kubernetes(...).
CHANGED = {
    "cpu": 3,
    "memory": 8000,
    "disk": 20000,
    "gpu": 2,
    "gpu_vendor": "amd",
    "qos": "Guaranteed",
    "extended_resources": {"vpc.amazonaws.com/efa": "2"},
    "image": "registry.example/other:2",
    "image_pull_policy": "Always",
    "image_pull_secrets": ["regcred"],
    "service_account": "trainer",
    "secrets": ["creds"],
    "node_selector": {"pool": "gpu"},
    "compute_pool": "pool-a",
    "tolerations": [{"key": "gpu", "operator": "Exists"}],
    "labels": {"team": "ml"},
    "annotations": {"note": "x"},
    "namespace": "mfargo-ns",
    "use_tmpfs": True,
    "tmpfs_size": 1000,
    "tmpfs_path": "/scratch",
    "tmpfs_tempdir": False,
    "persistent_volume_claims": {"data": "/data"},
    "shared_memory": 512,
    "port": 29500,
    "security_context": {"run_as_user": 1000},
    "hostname_resolution_timeout": 30,
    "executable": "/opt/venv/bin/python",
}
# With tmpfs on, so that what only a tmpfs uses (its path, METAFLOW_TEMPDIR) shows.
BASE = {"use_tmpfs": True}


def kubernetes(attributes: dict):
    """@kubernetes as Metaflow hands it to a compiler: its init() run (config defaults, compute_pool)."""
    from metaflow.plugins.kubernetes.kubernetes_decorator import KubernetesDecorator

    deco = KubernetesDecorator(attributes=dict(attributes))
    deco.init()
    return deco


def resources(attributes: dict):
    from metaflow.plugins.resources_decorator import ResourcesDecorator

    return ResourcesDecorator(attributes=dict(attributes))


def read(decos, field: str):
    """The IR field a row names, for a step with ``decos``."""
    compute = decorators.compute("train", decos, "python:3.11", None)  # no workflow namespace to match
    if field == "compute":
        return compute
    if field == "executable":
        return decorators.executable("train", decos)
    if field.startswith("gang."):
        return decorators.placement("train", decos, compute).control_wait_seconds
    return getattr(compute, field.removeprefix("compute."))


def test_the_table_has_every_attribute_of_metaflows_decorators():
    from metaflow.plugins.kubernetes.kubernetes_decorator import KubernetesDecorator
    from metaflow.plugins.resources_decorator import ResourcesDecorator

    assert sorted(decorators.KUBERNETES_ATTRIBUTES) == sorted(KubernetesDecorator.defaults)
    assert sorted(decorators.RESOURCES_ATTRIBUTES) == sorted(ResourcesDecorator.defaults)
    assert sorted(CHANGED) == sorted(KubernetesDecorator.defaults)  # a new attribute needs a value here
    compute_fields = {f.name for f in dataclasses.fields(ir.Compute)}
    for field in decorators.KUBERNETES_ATTRIBUTES.values():
        assert not field.startswith("compute.") or field.removeprefix("compute.") in compute_fields, field


@pytest.mark.parametrize("attribute", sorted(CHANGED))
def test_each_kubernetes_attribute_changes_the_field_its_row_names(attribute):
    field = decorators.KUBERNETES_ATTRIBUTES[attribute]
    base = {} if attribute == "use_tmpfs" else BASE
    before = read([kubernetes(base)], field)
    after = read([kubernetes({**base, attribute: CHANGED[attribute]})], field)
    assert before != after, (attribute, field, before)


@pytest.mark.parametrize("attribute", sorted(decorators.RESOURCES_ATTRIBUTES))
def test_each_resources_attribute_changes_the_field_its_row_names(attribute):
    field = decorators.RESOURCES_ATTRIBUTES[attribute]
    value = {"gpu": 1}.get(attribute, 90000)  # above @kubernetes' defaults: @resources wins by max()
    before = read([kubernetes({}), resources({})], field)
    after = read([kubernetes({}), resources({attribute: value})], field)
    assert before != after, (attribute, field, before)


def test_extended_resources_are_requested_and_limited_alike_beside_gpus_and_guaranteed_limits():
    compute = read([kubernetes({"gpu": 1, "qos": "Guaranteed", "disk": 1000,
                                "extended_resources": {"vpc.amazonaws.com/efa": 2, "hugepages-2Mi": "64Mi"}})],
                   "compute")
    assert pod.resources_of(compute) == {
        "requests": {"cpu": "1", "memory": "4096M", "ephemeral-storage": "1000M",
                     "vpc.amazonaws.com/efa": "2", "hugepages-2Mi": "64Mi"},
        "limits": {"cpu": "1", "memory": "4096M", "ephemeral-storage": "1000M", "nvidia.com/gpu": "1",
                   "vpc.amazonaws.com/efa": "2", "hugepages-2Mi": "64Mi"},
    }


@pytest.mark.parametrize("value, words", [
    ({"efa": "2"}, "'efa' is not a container resource"),
    ({"kubernetes.io/efa": "2"}, "not an extended resource name"),
    ({"example.com/dev": "-1"}, "'-1' is negative"),
    ({"example.com/dev": "1.5"}, "must be a whole number"),
    ({"example.com/dev": "lots"}, "not a resource quantity"),
    ({"example.com/dev": 2.0}, "not a quantity"),
    ({"cpu": "2"}, "'cpu' is set by the cpu attribute"),
    ({"ephemeral-storage": "2Gi"}, "set by the disk attribute"),
    ({"nvidia.com/gpu": "1"}, "already asked for by gpu="),
    (["example.com/dev"], "must be a dict"),
])
def test_an_extended_resource_kubernetes_would_refuse_is_one_line_naming_step_and_attribute(value, words):
    with pytest.raises(CompileError) as e:
        read([kubernetes({"gpu": 1, "extended_resources": value})], "compute")
    assert words in str(e.value) and "train" in str(e.value) and "@kubernetes" in str(e.value)
    assert "extended_resources" in str(e.value) or "must be a dict" in str(e.value)


@pytest.mark.parametrize("value", ["python -c 'import os'", "$(id)", "py;rm", "-m", ""])
def test_an_executable_that_is_not_one_plain_word_is_refused(value):
    decos = [kubernetes({"executable": value})]
    if not value:
        assert decorators.executable("train", decos) is None  # unset: the environment's
        return
    with pytest.raises(CompileError, match="executable"):
        decorators.executable("train", decos)


STEPS = {
    "efa": '@kubernetes(extended_resources={"vpc.amazonaws.com/efa": "2"}, cpu=0.5)',
    "own_python": '@kubernetes(executable="/opt/venv/bin/python")',
    "no_tempdir": "@kubernetes(use_tmpfs=True, tmpfs_tempdir=False)",
    "pooled": '@kubernetes(compute_pool="pool-a")',
}


def test_the_pods_of_a_compiled_flow_carry_each_attribute(tmp_path):
    """The new attributes end to end, through Metaflow's CLI: in the pod of their step, nowhere else."""
    names = ["start", *STEPS, "end"]
    decos = {"start": "", **STEPS, "end": ""}
    source = "from metaflow import *\n\n\nclass AttributesFlow(FlowSpec):\n" + "".join(
        "    %s\n    @step\n    def %s(self):\n        %s\n\n" % (decos[name], name,
                                                               "self.next(self.%s)" % nxt if nxt else "pass")
        for name, nxt in zip(names, names[1:] + [None])) + "\nif __name__ == '__main__':\n    AttributesFlow()\n"
    wt = compile_source(tmp_path, source)[0]
    templates = template_map(wt)
    assert "resources" not in wt["spec"]["templateDefaults"]["container"]
    for name, template in templates.items():
        if "container" not in template:
            continue
        container = template["container"]
        res = container["resources"]
        efa = name == naming.template_name("efa")
        assert (res["requests"].get("vpc.amazonaws.com/efa"), (res.get("limits") or {}).get("vpc.amazonaws.com/efa")) \
            == (("2", "2") if efa else (None, None)), name
        env = [e["name"] for e in container.get("env", [])]
        assert ("METAFLOW_TEMPDIR" in env) is False, name  # tmpfs only on no_tempdir, which turns it off
        mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
        assert ("/metaflow_temp" in mounts) == (name == naming.template_name("no_tempdir")), name
        assert (template.get("nodeSelector") == {"outerbounds.co/compute-pool": "pool-a"}) \
            == (name == naming.template_name("pooled")), name
        script = " ".join(container.get("args", []))
        assert ("/opt/venv/bin/python flow.py" in script) == (name == naming.template_name("own_python")), name


def test_a_gang_pod_carries_its_extended_resources(tmp_path):
    source = gang_flow("EfaGangFlow", decorators='@kubernetes(extended_resources={"vpc.amazonaws.com/efa": "4"})')
    templates = template_map(compile_source(tmp_path, source)[0])
    manifest = emit_manifest(templates[naming.template_name("train")])
    container = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"]["vpc.amazonaws.com/efa"] == "4"
    assert container["resources"]["limits"]["vpc.amazonaws.com/efa"] == "4"
    report = templates[naming.gang_report_template_name("train")]["container"]["resources"]
    assert "vpc.amazonaws.com/efa" not in str(report)  # the report runs no user code


EVERY_KUBERNETES_ATTRIBUTE = (
    '@kubernetes(cpu=0.5, memory=600, disk=2000, gpu=1, gpu_vendor="amd", qos="Guaranteed", '
    'extended_resources={"vpc.amazonaws.com/efa": "1", "hugepages-2Mi": "64Mi"}, image="registry.example/flow:1", '
    'image_pull_policy="IfNotPresent", image_pull_secrets=["regcred"], service_account="trainer", secrets=["creds"], '
    'node_selector={"pool": "gpu"}, compute_pool="pool-a", tolerations=[{"key": "gpu", "operator": "Exists"}], '
    'labels={"team": "ml"}, annotations={"note": "x"}, use_tmpfs=True, tmpfs_size=100, tmpfs_path="/scratch", '
    'tmpfs_tempdir=False, persistent_volume_claims={"data": "/data"}, shared_memory=64, port=29500, '
    'security_context={"run_as_user": 1000}, hostname_resolution_timeout=30, executable="/usr/bin/python3")'
)
EVERY_JOBSET_ATTRIBUTE = (
    '@jobset(queue="team-a", priority_class="high", exclusive_topology="kubernetes.io/hostname", max_restarts=1, '
    'retry_on=["disruption", "error"], control={"cpu": 1, "memory": 700, "gpu": 0, "disk": 3000, '
    '"image": "registry.example/control:1", "node_selector": {"pool": "cpu"}, '
    '"tolerations": [{"key": "cpu", "operator": "Exists"}]}, start_window=120)'
)


def test_mfargo_run_reads_a_flow_setting_every_field_of_the_step_model(tmp_path):
    """What templates/ writes for every @kubernetes and @jobset attribute is what the runner's
    dialect (runner/dialect.py) takes: its preflight and its JobSet check accept all of it."""
    from engine_tools import gang_manifests
    from mfargo.runner import jobset, preflight
    from mfargo.runner.model import WorkflowDoc

    source = gang_flow("EveryFieldFlow", decorators=EVERY_KUBERNETES_ATTRIBUTE + "\n" + EVERY_JOBSET_ATTRIBUTE,
                       start_decorators=EVERY_KUBERNETES_ATTRIBUTE)
    text = "".join(compile_proc(tmp_path, source))
    wt = next(d for d in yaml.safe_load_all(text) if d["kind"] == "WorkflowTemplate")
    preflight.check(WorkflowDoc(wt))
    manifests = gang_manifests(text)
    assert manifests
    for _, manifest in manifests:
        assert jobset.essential_problems(yaml.safe_load(manifest)) == []


def compile_proc(tmp_path, source):
    from flowtools import compile_file, write_flow

    return compile_file(write_flow(tmp_path, source)).stdout
