"""YAML a reviewer can read (issue 19, item 5): no anchors or aliases in any document or
JobSet manifest, no line over emit.LINE_LIMIT characters but a shell script line
(``yamlreview`` defines it), and a one-field change is a short `--check` diff.

Checked here on every example and on flows with every kind of pod compiled in process;
``flowtools.compile_file`` checks every flow any test compiles with ``--only-yaml``."""

from __future__ import annotations

import pytest
import yaml

import yamlreview
from flowtools import EXAMPLES, compile_file, gang_flow, load_flow, templates, write_flow
from mfargo import pipeline
from mfargo.compiler import CompileOptions
from mfargo.templates import emit

OPTIONS = CompileOptions(datastore="s3", datastore_root="s3://mfargo-examples/metaflow", code_in_image="/app")
LONG = "a long annotation, " * 30  # ~570 characters with spaces: folded
SCRIPT_LINE = "exec python -m flow" + " --arg value" * 30


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_example_reads_well(example):
    assert yamlreview.problems(example.read_text()) == []


def test_the_gang_example_has_block_style_long_script_lines_and_no_anchor():
    doc = next(yaml.safe_load_all((EXAMPLES / "distributed_training.yaml").read_text()))
    manifest = templates(doc)["train"]["resource"]["manifest"]
    assert max(len(line) for line in manifest.splitlines()) > emit.LINE_LIMIT  # its exec line: exempt
    assert "\n  replicatedJobs:\n  - name: rank\n" in manifest
    assert "\n  failurePolicy:\n    maxRestarts: 0\n" in manifest
    events = list(yaml.parse(manifest.replace("{{inputs.parameters.num-parallel}}", "1")))
    assert not [e for e in events if isinstance(e, yaml.AliasEvent) or getattr(e, "anchor", None)]
    assert sum(isinstance(e, yaml.MappingStartEvent) and e.flow_style is False for e in events) > 15  # 19: one pod


# --- the checker finds what it should ------------------------------------------------


def test_the_checker_finds_an_alias_in_a_manifest_and_a_long_line():
    manifest = "a: &x {b: 1}\nc: *x\nd: [%s]\n" % ", ".join(["word"] * 60)
    text = emit.dump({"spec": {"templates": [{"name": "t", "resource": {"manifest": manifest}}]}})
    found = yamlreview.problems(text)
    assert [p.split(" at ")[0] for p in found[:2]] == ["in a manifest: YAML anchor or alias 'x'"] * 2
    assert any(p.startswith("line ") and "no shell script line" in p for p in found)


def test_a_long_line_is_allowed_only_in_a_container_script_block():
    script = "set -e\n%s\n" % SCRIPT_LINE
    ok = emit.dump({"container": {"args": [script]}, "script": {"source": script}})
    assert max(len(line) for line in ok.splitlines()) > emit.LINE_LIMIT
    assert yamlreview.problems(ok) == []
    not_a_script = emit.dump({"container": {"env": [{"name": "X", "value": script}]}})
    [problem] = yamlreview.problems(not_a_script)
    assert problem.startswith("line 6 has %d characters and is no shell script line" % (6 + len(SCRIPT_LINE)))


def test_the_checker_finds_a_tag_split_across_lines_in_a_manifest():
    manifest = "a: '{{inputs.\n  parameters.x}}'\n"
    text = emit.dump({"resource": {"manifest": manifest}})
    assert yamlreview.problems(text) == ["an Argo tag split across lines in a manifest: '{{inputs.\\n  parameters.x}}'"]


# --- flows with every kind of pod, compiled in process --------------------------------

FLOWS = {
    "gang_roles": gang_flow("RolesFlow", """
        @jobset(control={"cpu": 4, "memory": 8000, "image": "python:3.12", "node_selector": {"pool": "ps"},
                         "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ps", "effect": "NoSchedule"}]},
                queue="team-a", exclusive_topology="cloud.google.com/gke-nodepool", max_restarts=2)
        @kubernetes(cpu=2, memory=4096, use_tmpfs=True, shared_memory=1024, port=29500,
                    labels={"team": "ml"}, annotations={"note": %r},
                    tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}])
        @environment(vars={"LONG": %r, "SHORT": "x"})
        @retry(times=1)  # 2 x (1 + max_restarts) = 6 attempts, Metaflow's limit
        @timeout(hours=3)
    """ % (LONG, LONG), num_parallel=3),
    "gang_catch": gang_flow("CatchFlow", '@catch(var="failure")\n@kubernetes(memory=2048)'),
}


def compiled_text(tmp_path, name: str) -> str:
    path = write_flow(tmp_path, FLOWS[name], name + ".py")
    flow = load_flow(path, "mfargo_review_%s" % name)
    from mfargo.metaflow_cli.metaflow_inputs import flow_decorators

    return pipeline.as_yaml(pipeline.documents(pipeline.compile_ir(flow, flow._graph, OPTIONS, flow_decorators(flow))))


@pytest.mark.parametrize("name", sorted(FLOWS))
def test_compiled_flows_read_well(tmp_path, name):
    text = compiled_text(tmp_path, name)
    assert yamlreview.problems(text) == []
    doc = next(yaml.safe_load_all(text))
    manifest = templates(doc)["train"]["resource"]["manifest"]
    assert "\n  replicatedJobs:\n" in manifest
    if name == "gang_roles":  # the long text folded, and read back the same
        js = yaml.safe_load(manifest.replace("{{inputs.parameters.worker-count}}", "2"))
        pod = js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]
        assert pod["metadata"]["annotations"]["note"] == LONG
        assert {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}["LONG"] == LONG


# --- `--check`: a one-field change is a short diff ------------------------------------


def test_one_field_change_is_a_short_check_diff(tmp_path):
    flow = write_flow(tmp_path, gang_flow("G", "@kubernetes(cpu=2, memory=4096)\n@retry(times=1)", num_parallel=3))
    out = tmp_path / "flow.yaml"
    out.write_text(compile_file(flow, "--code-in-image", "/app").stdout)
    flow.write_text(flow.read_text().replace("memory=4096", "memory=6144"))
    proc = compile_file(flow, "--code-in-image", "/app", "--output-file", str(out), "--check", check=False)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    changed = [line for line in lines if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    # The memory of the gang's one pod: one line out, one in.
    assert sorted(line.replace(" ", "") for line in changed) == sorted(
        ["%sresources:{requests:{cpu:'2',ephemeral-storage:10240M,memory:%dM}}" % change
         for change in (("-", 4096), ("+", 6144))]), proc.stdout
    assert max(len(line) for line in lines) <= emit.LINE_LIMIT
