"""Metaflow's decorator lifecycle as core's `create` runs it (issue 29, item 3): mutators,
`--with` and Config-driven decorators give each step's pod the resources core's own
compiler gives it, compared on the parsed output of both compilers for the same flow;
every step template carries core's `metaflow/step_name` annotation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flowtools import EXAMPLE_ARGS, clean_env, compile_file, write_flow

from mfargo.compiler import rules
from mfargo.templates import step as step_templates

CORE_OFFLINE = Path(__file__).resolve().parent.parent / "benchmarks" / "core_offline.py"

STEP_MUTATOR = """
from metaflow import FlowSpec, StepMutator, step

class bigger(StepMutator):
    \"\"\"Overrides the step's @kubernetes, if it has one (as Metaflow's own tests do).\"\"\"
    def mutate(self, mutable_step):
        for name, _, _, _ in mutable_step.decorator_specs:
            if name == "kubernetes":
                mutable_step.add_decorator("kubernetes", deco_kwargs={"cpu": 2, "memory": 8192},
                                           duplicates=mutable_step.OVERRIDE)

class MutatedFlow(FlowSpec):
    @bigger
    @step
    def start(self):
        self.next(self.end)

    @step
    def end(self):
        pass

if __name__ == "__main__":
    MutatedFlow()
"""

FLOW_MUTATOR = """
from metaflow import FlowMutator, FlowSpec, step, kubernetes

class sized(FlowMutator):
    def mutate(self, mutable_flow):
        for name, s in mutable_flow.steps:
            if name != "end":
                s.add_decorator("kubernetes", deco_kwargs={"cpu": 3, "memory": 6000, "disk": 20000,
                                                          "image": "python:3.12"},
                                duplicates=s.OVERRIDE)

@sized
class SizedFlow(FlowSpec):
    @kubernetes(cpu=0.5)
    @step
    def start(self):
        self.next(self.end)

    @step
    def end(self):
        pass

if __name__ == "__main__":
    SizedFlow()
"""

WITH_FLOW = """
from metaflow import FlowSpec, step, kubernetes, resources

class WithFlow(FlowSpec):
    @kubernetes(memory=3000)
    @step
    def start(self):
        self.next(self.middle)

    @resources(memory=16000)
    @step
    def middle(self):
        self.next(self.end)

    @step
    def end(self):
        pass

if __name__ == "__main__":
    WithFlow()
"""

CONFIG_FLOW = """
from metaflow import Config, FlowSpec, StepMutator, step, kubernetes, resources

class from_config(StepMutator):
    def mutate(self, mutable_step):
        size = mutable_step.flow.sizes.big
        for name, _, _, _ in mutable_step.decorator_specs:
            if name == "kubernetes":
                mutable_step.add_decorator("kubernetes", deco_kwargs=dict(size), duplicates=mutable_step.OVERRIDE)

class ConfigFlow(FlowSpec):
    sizes = Config("sizes", default_value={"small": {"cpu": 1.5, "memory": 2500},
                                           "big": {"cpu": 4, "memory": 10000, "image": "python:3.10"}})

    @kubernetes(cpu=sizes.small.cpu, memory=sizes.small.memory)
    @step
    def start(self):
        self.next(self.middle)

    @from_config
    @step
    def middle(self):
        self.next(self.end)

    @resources(cpu=sizes.small.cpu)
    @step
    def end(self):
        pass

if __name__ == "__main__":
    ConfigFlow()
"""

CASES = {
    "step mutator on a step without @kubernetes": (STEP_MUTATOR, ()),
    "flow mutator": (FLOW_MUTATOR, ()),
    "--with kubernetes": (WITH_FLOW, ("--with", "kubernetes:cpu=2,disk=30000")),
    "Config-driven decorators": (CONFIG_FLOW, ()),
    "Config-driven decorators, value given": (
        CONFIG_FLOW, ("--config-value", "sizes", json.dumps({"small": {"cpu": 2, "memory": 3000},
                                                             "big": {"cpu": 6, "memory": 12000}}))),
}


def _pods(template_doc: dict, steps: list[str]) -> dict[str, dict]:
    """Each step's effective pod: its template's container over the templateDefaults'."""
    default = (template_doc["spec"].get("templateDefaults") or {}).get("container") or {}
    by_name = {t["name"]: t for t in template_doc["spec"]["templates"]}
    pods = {}
    for name in steps:
        container = {**default, **(by_name[name].get("container") or {})}
        resources = container.get("resources") or {}
        pods[name] = {"image": container.get("image"),
                      **{kind: {k: _quantity(v) for k, v in (resources.get(kind) or {}).items()}
                         for kind in ("requests", "limits")}}
    return pods


def _quantity(value) -> float:
    """A Kubernetes quantity's value: core writes "2.0", "1.5" and "16000.0M" where mfargo
    writes "2", "1500m" and "16000M", the same quantities."""
    text = str(value)
    number = text.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    return float(number) * _UNITS[text[len(number):]]


_UNITS = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
          "Ti": 2**40}


def _core(flow: Path, top: tuple[str, ...]) -> dict:
    (flow.parent / "no-extensions").mkdir(exist_ok=True)
    env = clean_env(METAFLOW_EXTENSIONS_SEARCH_DIRS=str(flow.parent / "no-extensions"))
    proc = subprocess.run([sys.executable, str(CORE_OFFLINE), flow.name, *EXAMPLE_ARGS, *top, "argo-workflows",
                           "create", "--only-json"], cwd=flow.parent, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.mark.parametrize("case", CASES)
def test_pods_get_the_resources_core_gives_them(tmp_path, case):
    source, top = CASES[case]
    flow = write_flow(tmp_path, source)
    core = _core(flow, top)
    ours = [d for d in yaml.safe_load_all(compile_file(flow, "--code-in-image", "/app",
                                                       top_args=EXAMPLE_ARGS + top).stdout)
            if d["kind"] == "WorkflowTemplate"][0]
    steps = [t["name"] for t in core["spec"]["templates"] if "container" in t and t["name"] in source]
    assert len(steps) >= 2, steps
    assert _pods(ours, steps) == _pods(core, steps)


def test_the_step_mutator_really_overrode_what_create_attached(tmp_path):
    """The flow of the issue: core gives `start` cpu 2 / 8192M, and so must mfargo."""
    doc = [d for d in yaml.safe_load_all(compile_file(write_flow(tmp_path, STEP_MUTATOR), "--code-in-image",
                                                      "/app").stdout) if d["kind"] == "WorkflowTemplate"][0]
    pods = _pods(doc, ["start", "end"])
    assert pods["start"]["requests"]["cpu"] == 2 and pods["start"]["requests"]["memory"] == 8192e6
    assert pods["end"]["requests"]["cpu"] == 1 and pods["end"]["requests"]["memory"] == 4096e6


def test_pods_carry_the_annotations_metaflows_tools_read_as_cores_do(tmp_path):
    """Each step template's metaflow/step_name; on every pod, what Metaflow's `kubernetes
    list/kill` match pods by (flow name, run id, the user `argo-workflows`)."""
    flow = write_flow(tmp_path, WITH_FLOW)
    core = _core(flow, ())
    [ours] = [d for d in yaml.safe_load_all(compile_file(flow, "--code-in-image", "/app").stdout)
              if d["kind"] == "WorkflowTemplate"]
    for doc in (core, ours):
        by_name = {t["name"]: t for t in doc["spec"]["templates"]}
        for step in ("start", "middle", "end"):
            assert by_name[step]["metadata"]["annotations"]["metaflow/step_name"] == step
    read = ("metaflow/flow_name", "metaflow/run_id", "metaflow/user")
    pod_annotations = [{k: doc["spec"]["podMetadata"]["annotations"].get(k) for k in read} for doc in (core, ours)]
    assert pod_annotations[0] == pod_annotations[1] == {
        "metaflow/flow_name": "WithFlow", "metaflow/run_id": "argo-{{workflow.name}}", "metaflow/user": "argo-workflows"}


def test_created_decorators_are_not_forwarded_to_the_pods(tmp_path):
    """What `create` attaches (@kubernetes, an empty @environment) and what a mutator inserts
    (it runs again in the pod, as core's pods do) is not passed on with --with; a user's --with is."""
    flow = write_flow(tmp_path, STEP_MUTATOR.replace(
        "    def mutate(self, mutable_step):\n",
        "    def mutate(self, mutable_step):\n        mutable_step.add_decorator('timeout', deco_kwargs={'minutes': 7})\n"))
    doc = [d for d in yaml.safe_load_all(compile_file(flow, "--code-in-image", "/app",
                                                      top_args=EXAMPLE_ARGS + ("--with", "retry:times=1")).stdout)
           if d["kind"] == "WorkflowTemplate"][0]
    by_name = {t["name"]: t for t in doc["spec"]["templates"]}
    # the mutator's @timeout is compiled in (the pod's deadline is Metaflow's @timeout's, then the grace)
    assert by_name["start"]["activeDeadlineSeconds"] == 420 + step_templates.TIMEOUT_GRACE_SECONDS
    forwarded = _forwarded(doc)
    assert set(forwarded) == {"start", "end"}
    for step, specs in forwarded.items():
        assert [s.split(":")[0] for s in specs] == ["retry", "mfargo_internal"], (step, specs)


def _forwarded(doc: dict) -> dict[str, list[str]]:
    """Each step command's --with values, read from the parsed pod scripts."""
    import shlex

    found = {}
    for template in doc["spec"]["templates"]:
        script = " ".join(str(a) for a in (template.get("container") or {}).get("args") or ())
        for line in script.splitlines():
            argv = shlex.split(line) if " step " in line else []
            if "step" in argv:
                step = argv[argv.index("step") + 1]
                found[step] = [argv[i + 1] for i, a in enumerate(argv[:argv.index("step")]) if a == "--with"]
    return found


def test_a_step_left_without_kubernetes_is_refused_in_one_line(tmp_path):
    """--with kubernetes, then a StepMutator that overrides it: when `create` attaches
    @environment, Metaflow re-runs the mutator, which finds no @kubernetes to override and
    leaves none (core's own `create` fails with an IndexError). mfargo says so, naming the
    step, rather than giving the step the default pod."""
    out = tmp_path / "wf.yaml"
    proc = compile_file(write_flow(tmp_path, STEP_MUTATOR), "--code-in-image", "/app", "--output-file", str(out),
                        top_args=EXAMPLE_ARGS + ("--with", "kubernetes:cpu=5"), check=False)
    assert proc.returncode == 1 and not out.exists() and "Traceback" not in proc.stderr
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("mfargo:")]
    assert "start" in line and "@kubernetes" in line and "StepMutator" in line


def test_mfargo_compile_passes_with_on_as_metaflow_takes_it(tmp_path):
    """`mfargo compile FLOW --with SPEC` is `python FLOW --with SPEC argo-workflows create`."""
    flow = write_flow(tmp_path, WITH_FLOW)
    proc = subprocess.run([sys.executable, "-m", "mfargo.cli", "compile", str(flow), "--datastore", "s3",
                           "--datastore-root", "s3://mfargo-examples/metaflow", "--code-in-image", "/app",
                           "--with", "kubernetes:cpu=2,disk=30000", "--with", "retry:times=1"],
                          env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [ours] = [d for d in yaml.safe_load_all(proc.stdout) if d["kind"] == "WorkflowTemplate"]
    [direct] = [d for d in yaml.safe_load_all(compile_file(
        flow, "--code-in-image", "/app", top_args=EXAMPLE_ARGS + ("--with", "kubernetes:cpu=2,disk=30000",
                                                                   "--with", "retry:times=1")).stdout)
        if d["kind"] == "WorkflowTemplate"]
    pods = _pods(ours, ["start", "middle", "end"])
    assert pods == _pods(direct, ["start", "middle", "end"])
    assert pods["end"]["requests"]["cpu"] == 2 and pods["end"]["requests"]["ephemeral-storage"] == 30000e6
    retries = {t["name"]: (t.get("retryStrategy") or {}).get("limit") for t in ours["spec"]["templates"]}
    assert retries["end"] == 1 + rules.infrastructure_retries(1)  # --with retry:times=1, and the budget


def test_gang_pods_carry_the_annotations_metaflows_tools_read_as_cores_do(tmp_path):
    """JobSet pods are not Argo's (podMetadata does not reach them): their own template
    carries the step, flow name and user, as core's gang pods do."""
    import re

    from engine_tools import gang_manifests

    sys.path.insert(0, str(CORE_OFFLINE.parent))
    import compile_scale

    flow = write_flow(tmp_path, compile_scale.GANG_FLOW)
    core = _core(flow, ())
    [core_manifest] = [t["resource"]["manifest"] for t in core["spec"]["templates"] if t.get("resource")]
    core_manifest = re.sub(r"{{(.*?)}}", "x", core_manifest, flags=re.S)
    [(_, ours)] = gang_manifests(compile_file(flow, "--code-in-image", "/app").stdout)
    read = ("metaflow/step_name", "metaflow/flow_name", "metaflow/user")
    pods = []
    for manifest in (yaml.safe_load(core_manifest), yaml.safe_load(ours)):
        for job in manifest["spec"]["replicatedJobs"]:
            annotations = job["template"]["spec"]["template"]["metadata"]["annotations"]
            pods.append({k: annotations.get(k) for k in read})
    assert pods[0] == {"metaflow/step_name": "train", "metaflow/flow_name": "GangFlow", "metaflow/user": "argo-workflows"}
    assert all(p == pods[0] for p in pods)
