"""The pod model (templates/pod.py): which pods carry a step's attribute is one table,
``pod.INHERITS``, and what is written follows it.

For every attribute a user can set on a step (every field of ``ir.Compute``), and every
kind of pod, the rendered pod changes with the attribute exactly when the table gives the
pod that attribute from that step; then, on a compiled flow with every kind of pod, each
pod carries the placement, pull and Secret attributes of the step the table names.
"""
from __future__ import annotations

import dataclasses
import json
import re

import pytest
import yaml

from flowtools import clean_env, compile_source, gang_flow
from flowtools import templates as template_map
from mfargo.compiler import ir, naming
from mfargo.templates import emit, pod

BASE = ir.Compute(image="registry.example/flow:1", cpu="1", memory_mb=4096, disk_mb=10240, gpu=1,
                  tmpfs_size_mb=1024)
# A value other than BASE's for every field a user can set on a step.
OTHER = {
    "image": "registry.example/other:2",
    "image_pull_policy": "Always",
    "cpu": "2",
    "memory_mb": 8192,
    "disk_mb": 20480,
    "gpu": 2,
    "gpu_vendor": "amd",
    "qos": "Guaranteed",
    "service_account": "trainer",
    "namespace": "elsewhere",
    "secrets": ("creds",),
    "node_selector": (("pool", "gpu"),),
    "tolerations": (ir.Toleration(key="gpu", operator="Exists"),),
    "labels": (("team", "ml"),),
    "annotations": (("note", "x"),),
    "shared_memory_mb": 512,
    "port": 29500,
    "persistent_volume_claims": (("data", "/data"),),
    "tmpfs_size_mb": 2048,
    "tmpfs_path": "/scratch",
    "tmpfs_tempdir": False,
    "extended_resources": (("vpc.amazonaws.com/efa", "2"),),
    "priority_class_name": "high",
    "affinity": '{"nodeAffinity": {}}',
    "topology_spread_constraints": '[{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]',
    "pod_patch": '{"runtimeClassName": "gvisor"}',
    "security_context": (("runAsUser", 1000),),
    "image_pull_secrets": ("regcred",),
}
FIELDS = [f.name for f in dataclasses.fields(ir.Compute)]


def render(kind: pod.Kind, step: ir.Compute, start: ir.Compute) -> str:
    size = ("1", 512) if kind is pod.Kind.EXIT_HOOK else None
    p = pod.lower(kind, step, start, args=["run"], env=({"name": "A", "value": "1"},), hook_size=size)
    if kind is pod.Kind.GANG:
        rendered = pod.jobset_pod(p, "js", {}, {})
    elif kind is pod.Kind.LAUNCHER:
        rendered = pod.launcher_metadata(p, {})
    elif kind is pod.Kind.SENSOR:
        rendered = pod.sensor_container(p)
    else:
        rendered = pod.argo_template(p, name="t")
    return json.dumps(emit.ordered(rendered), sort_keys=True)


def test_every_attribute_of_a_step_is_in_the_table_or_named_as_no_pod_field():
    in_table = {name for row in pod.INHERITS.values() for name in row}
    assert sorted(in_table | set(pod.NOT_A_POD_FIELD)) == sorted(FIELDS)
    assert not in_table & set(pod.NOT_A_POD_FIELD)
    assert sorted(OTHER) == sorted(FIELDS)  # a new field needs a value here, and a row in INHERITS


@pytest.mark.parametrize("kind", list(pod.Kind), ids=lambda k: k.name)
@pytest.mark.parametrize("field", FIELDS)
def test_a_pod_carries_an_attribute_exactly_when_the_table_says_and_from_where(kind, field):
    changed = dataclasses.replace(BASE, **{field: OTHER[field]})
    before = render(kind, BASE, BASE)
    from_step = render(kind, changed, BASE) != before
    from_start = render(kind, BASE, changed) != before
    source = pod.INHERITS[kind].get(field)
    assert (from_step, from_start) == (source == pod.STEP, source == pod.START), (kind, field, source)


GANG_FLOW = gang_flow(
    "PodsFlow", imports="def notify_me(run=None):\n    pass\n",
    flow_decorators="@exit_hook(on_error=[notify_me])",
    start_decorators='@kubernetes(image="registry.example/start:1", image_pull_secrets=["start-cred"], '
                     'service_account="start-sa", node_selector={"pool": "cpu"}, secrets=["start-secret"], '
                     'image_pull_policy="Always")',
    decorators='@kubernetes(image="registry.example/gpu:1", image_pull_secrets=["gpu-cred"], service_account="gpu-sa", '
               'node_selector={"pool": "gpu"}, secrets=["gpu-secret"], image_pull_policy="IfNotPresent")\n'
               '@jobset(queue="team-a")',
)

# What the compiled YAML says of each attribute, for an Argo template and for a JobSet pod spec.
READ = {
    "image": lambda t, c: c["image"],
    "image_pull_policy": lambda t, c: c.get("imagePullPolicy"),
    "image_pull_secrets": lambda t, c: [s["name"] for s in (
        json.loads(t["podSpecPatch"])["imagePullSecrets"] if "podSpecPatch" in t else t.get("imagePullSecrets", []))],
    "service_account": lambda t, c: t.get("serviceAccountName"),
    "node_selector": lambda t, c: t.get("nodeSelector"),
    "secrets": lambda t, c: [e["secretRef"]["name"] for e in c.get("envFrom", [])],
}
START = {"image": "registry.example/start:1", "image_pull_policy": "Always", "image_pull_secrets": ["start-cred"],
         "service_account": "start-sa", "node_selector": {"pool": "cpu"}, "secrets": ["start-secret"]}
TRAIN = {"image": "registry.example/gpu:1", "image_pull_policy": "IfNotPresent", "image_pull_secrets": ["gpu-cred"],
         "service_account": "gpu-sa", "node_selector": {"pool": "gpu"}, "secrets": ["gpu-secret"]}
EMPTY = {"image_pull_policy": None, "image_pull_secrets": [], "service_account": None, "node_selector": None,
         "secrets": []}


def test_every_pod_of_a_compiled_flow_carries_what_the_table_gives_it(tmp_path):
    # With Metaflow's metadata service the run has a heartbeat; with a queued gang, a queue watch.
    top = ("--metadata=service", "--datastore=s3", "--datastore-root=s3://mfargo-examples/metaflow")
    docs = compile_source(tmp_path, GANG_FLOW, "--notify-on-error", "--notify-slack-webhook-url-secret", "slack:url",
                          top_args=top, env=clean_env(METAFLOW_SERVICE_URL="http://metadata.example:8080"))
    wt = docs[0]
    templates = template_map(wt)
    jobset = emit_manifest(templates[naming.template_name("train")])
    gang_spec = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pods = {
        pod.Kind.STEP: (templates[naming.template_name("start")], "start"),
        pod.Kind.GANG: ({**gang_spec, "container": gang_spec["containers"][0]}, "train"),
        pod.Kind.REPORT: (templates[naming.gang_report_template_name("train")], "train"),
        pod.Kind.EXIT_HOOK: (next(t for n, t in templates.items() if "notify-me" in n), "start"),
        pod.Kind.NOTIFY: (next(t for n, t in templates.items() if "slack" in n), "start"),
        pod.Kind.HEARTBEAT: (templates[naming.heartbeat_template_name()], "start"),
        pod.Kind.QUEUE_WATCH: (templates[naming.queue_watch_template_name()], "start"),
    }
    # The launcher's and the Sensor's pods run Argo's and Argo Events' own images, as their accounts.
    others = {pod.Kind.LAUNCHER, pod.Kind.SENSOR}
    assert sorted(k.name for k in pods) == sorted(k.name for k in pod.Kind if k not in others)
    assert all(not (set(pod.INHERITS[k]) & set(READ)) for k in others)
    for kind, (template, step) in pods.items():
        container = template["container"]
        for attribute, read in READ.items():
            source = pod.INHERITS[kind].get(attribute)
            expected = {pod.START: START, pod.STEP: START if step == "start" else TRAIN}.get(source)
            if expected is None:
                if attribute == "image":
                    continue  # its own image (@exit_hook's, --notify-image's: the start image by default)
                expected = EMPTY
            assert read(template, container) == expected[attribute], (kind, attribute)
        # Whatever the table says: every pod can pull the image it runs, and ends.
        image = READ["image"](template, container)
        assert READ["image_pull_secrets"](template, container) == IMAGE_SECRETS[image], kind
        deadline = template.get("activeDeadlineSeconds") or (kind is pod.Kind.GANG and jobset_deadline(jobset))
        assert deadline or template.get("daemon"), kind


IMAGE_SECRETS = {START["image"]: START["image_pull_secrets"], TRAIN["image"]: TRAIN["image_pull_secrets"]}


def jobset_deadline(jobset: dict) -> int:
    return jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["activeDeadlineSeconds"]


def emit_manifest(template: dict) -> dict:
    """A gang's JobSet, its Argo tags (in strings and the bare replicas) as plain text."""
    return yaml.safe_load(re.sub(r"\{\{[^}]*\}\}", "x", template["resource"]["manifest"]))
