"""The compiler called directly, no subprocess: IR goldens for every example, the id
formulas of `naming`, and a shlex round trip of every command `command` renders.

Regenerate the IR goldens after a deliberate change with
`MFARGO_REGENERATE=1 pytest tests/test_compiler_inprocess.py` (never when CI is set).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import shlex

import pytest
import yaml

from flowtools import EXAMPLES, gang_flow, load_flow
from mfargo import pipeline
from mfargo.compiler import CompileError, CompileOptions, command as sh, ir, naming

GOLDENS = EXAMPLES.parent / "tests" / "goldens" / "ir"
EXAMPLE_FLOWS = sorted(EXAMPLES.glob("*.py"))
OPTIONS = CompileOptions(datastore="s3", datastore_root="s3://mfargo-examples/metaflow", code_in_image="/app")
HOSTILE = ("it's", 'a"b', "$(touch pwned)", "`id`", "a b\tc", "x\ny", "; rm -rf /", "\\", "{{workflow.name}}", "é")


def as_plain(value):
    """The IR as JSON-able data; each dataclass names its type, so a changed input
    source (FromParents -> FromBranches, say) changes the golden."""
    if dataclasses.is_dataclass(value):
        out = {"_type": type(value).__name__}
        out.update((f.name, as_plain(getattr(value, f.name))) for f in dataclasses.fields(value))
        return out
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): as_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_plain(v) for v in value]
    return value


def compile_example(flow_file):
    from mfargo.metaflow_cli.metaflow_inputs import flow_decorators

    flow = load_flow(flow_file)
    return pipeline.compile_ir(flow, flow._graph, OPTIONS, flow_decorators(flow))


@pytest.fixture(scope="module")
def workflows():
    return {path.stem: compile_example(path) for path in EXAMPLE_FLOWS}


@pytest.mark.parametrize("flow", EXAMPLE_FLOWS, ids=lambda p: p.stem)
def test_ir_matches_its_golden(flow, workflows):
    text = json.dumps(as_plain(workflows[flow.stem]), indent=1, sort_keys=True) + "\n"
    golden = GOLDENS / (flow.stem + ".json")
    if os.environ.get("MFARGO_REGENERATE") and not os.environ.get("CI"):
        golden.write_text(text)
    assert golden.exists(), "missing %s: run MFARGO_REGENERATE=1 pytest %s" % (golden.name, __file__)
    assert json.loads(golden.read_text()) == json.loads(text), "%s is stale: regenerate it" % golden.name


def test_templates_built_in_process_are_deterministic_and_valid(workflows):
    """`templates.build` called directly: twice the same bytes, one WorkflowTemplate first."""
    for name, workflow in workflows.items():
        first = pipeline.as_yaml(pipeline.documents(workflow))
        assert first == pipeline.as_yaml(pipeline.documents(workflow)), name
        docs = list(yaml.safe_load_all(first))
        assert docs[0]["kind"] == "WorkflowTemplate", name
        assert docs[0]["metadata"]["name"] == workflow.name, name


def test_the_gang_example_has_one_gang_object(workflows):
    steps = workflows["distributed_training"].steps
    gangs = [s for s in steps.values() if isinstance(s.gang, ir.Gang)]
    assert len(gangs) == 1
    gang = gangs[0].gang
    assert steps[gang.join].inputs is gang
    assert steps[gang.splitter].transition is ir.Transition.PARALLEL


# --- naming ------------------------------------------------------------------------


@pytest.mark.parametrize("step,ctx,iteration,expected", [
    ("start", "", None, "start"),
    ("train", "-3", None, "train-3"),
    ("train", "-3-1", None, "train-3-1"),
    ("loop", "", "2", "loop-r2"),
    ("loop", "-0", "7", "loop-0-r7"),
])
def test_task_id_formula(step, ctx, iteration, expected):
    assert naming.task_id(step, ctx, iteration) == expected


def test_task_ids_are_unique_across_steps_and_contexts():
    ids = [naming.task_id(s, c, i) for s in ("a", "b", "ab") for c in ("", "-1", "-1-2", "-12")
           for i in (None, "1", "12")]
    assert len(ids) == len(set(ids))
    assert not any(i.isdigit() for i in ids)  # Metaflow registers only non-numeric ids


def test_child_context_nests():
    assert naming.child_ctx(naming.child_ctx("", "3"), "1") == "-3-1"


def test_gang_ids_follow_metaflows_contract():
    assert naming.control_task_id("abc") == "control-abc-0"
    assert naming.worker_task_id("abc", "2") == "worker-abc-2"
    assert naming.jobset_name("abc", None) == "js-abc"
    assert naming.jobset_name("abc", "1") == "js-abc-1"
    assert naming.control_host("js-abc", "rank", "ns") == "js-abc-rank-0-0.js-abc.ns.svc.cluster.local"


@pytest.mark.parametrize("name", ["HelloFlow", "my_flow", "a" * 200, "Ünïcode Flow", "x.y"])
def test_workflow_template_names_are_kubernetes_names(name):
    out = naming.workflow_template_name(name)
    assert naming.VALID_NAME.match(out) and len(out) <= naming.MAX_TEMPLATE_NAME
    assert out == naming.workflow_template_name(name)  # stable


def test_long_names_differ_by_their_hash():
    a, b = naming.workflow_template_name("a" * 100 + "x"), naming.workflow_template_name("a" * 100 + "y")
    assert a != b and len(a) == len(b) == naming.MAX_TEMPLATE_NAME


def test_a_name_without_usable_characters_is_refused():
    with pytest.raises(CompileError):
        naming.workflow_template_name("!!!")


def test_template_names_have_no_underscores():
    assert naming.template_name("my_step") == "my-step"
    assert naming.foreach_template_name("fan_out") == "0-foreach-fan-out"
    assert naming.recursion_template_name("loop_it") == "0-loop-loop-it"


# --- command: every rendered command parses back to the words it was built from ----


@pytest.mark.parametrize("text", HOSTILE)
def test_a_literal_is_one_inert_word(text):
    assert shlex.split(sh.render([(sh.Lit(text),)])) == [text]


@pytest.mark.parametrize("text", HOSTILE)
def test_concatenated_literals_are_one_word(text):
    rendered = sh.render([(sh.Raw("echo"), sh.Cat((sh.Lit("pre-"), sh.Lit(text), sh.Lit("-post"))))])
    assert shlex.split(rendered) == ["echo", "pre-%s-post" % text]


def test_a_variable_is_quoted():
    assert shlex.split(sh.render([(sh.Raw("echo"), sh.Var("HOME"))])) == ["echo", "${HOME}"]


def test_every_script_of_every_example_is_bash_with_hostile_free_words(workflows):
    """Each container runs [bash, -c, SCRIPT] (its own, or templateDefaults' shared one with
    the step's script as its argument); each script line splits into words (no unbalanced
    quotes) and no `$(` is left for Kubernetes to expand."""
    for name, workflow in workflows.items():
        docs = pipeline.documents(workflow)
        shared = docs[0]["spec"]["templateDefaults"]["container"]["command"]
        assert shared[:2] == ["bash", "-c"] and shared[2].endswith('\neval "$1"') and len(shared) == 4
        for template in docs[0]["spec"]["templates"] + [docs[0]["spec"]["templateDefaults"]]:
            container = template.get("container")
            if not container:
                continue
            cmd = container.get("command") or shared
            assert cmd[:2] == ["bash", "-c"], (name, template.get("name"))
            assert not (container.get("command") and container.get("args")), (name, template.get("name"))
            for text in [cmd[2]] + container.get("args", []):
                for line in text.splitlines():
                    shlex.split(line.replace("$$", "$"), comments=True)


# --- per-role pods: the control's own size, checked like the step's ------------------


def compile_gang(tmp_path, control):
    path = tmp_path / ("roles_%d.py" % abs(hash(repr(control))))
    path.write_text(gang_flow("RolesFlow", "@jobset(control=%r)\n@kubernetes(cpu=1, memory=1000)" % (control,)))
    flow = load_flow(path, "mfargo_roles_%s" % path.stem)
    return pipeline.compile_ir(flow, flow._graph, OPTIONS)


@pytest.mark.parametrize("jobset,message", [
    ("max_restarts=1.7", "max_restarts must be a whole number"),  # was 1
    ("max_restarts=2**31", "more than 2,147,483,647"),  # failurePolicy.maxRestarts: int32
    ("queue='team a'", "queue: label value 'team a'"),
    ("priority_class='urgent!'", "priority_class: label value 'urgent!'"),
    ("exclusive_topology='bad key!'", "exclusive_topology: name 'bad key!'"),
    ("start_window=-5", "@jobset(start_window=...) takes a whole number of seconds > 0"),
    ("start_window=2**31", "(up to 2,147,483,647), not 2147483648"),  # an int32 at most
])
def test_jobset_values_the_cluster_would_refuse_are_one_line(tmp_path, jobset, message):
    path = tmp_path / ("jobset_%d.py" % abs(hash(jobset)))
    path.write_text(gang_flow("JobsetFlow", "@jobset(%s)" % jobset))
    flow = load_flow(path, "mfargo_jobset_%s" % path.stem)
    with pytest.raises(CompileError) as err:
        pipeline.compile_ir(flow, flow._graph, OPTIONS)
    assert message in str(err.value) and "step *train* @jobset" in str(err.value), str(err.value)


def test_a_gang_steps_environment_replaces_the_workflows_variable_and_never_the_contract(tmp_path):
    from mfargo.base.validation.report import parse_manifest

    path = tmp_path / "gang_env.py"
    path.write_text(gang_flow("GangEnvFlow", "@environment(vars={'METAFLOW_USER': 'me'})"))
    flow = load_flow(path, "mfargo_gang_env")
    docs = pipeline.documents(pipeline.compile_ir(flow, flow._graph, OPTIONS))
    train = next(t for t in docs[0]["spec"]["templates"] if t["name"] == "train")
    jobset = parse_manifest(train["resource"]["manifest"])[0][0]
    for job in jobset["spec"]["replicatedJobs"]:  # one entry per name (the JobSet API refuses two), the step's
        env = job["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
        assert [e.get("value") for e in env if e["name"] == "METAFLOW_USER"] == ["me"]
    path = tmp_path / "gang_contract.py"
    path.write_text(gang_flow("GangContractFlow", "@environment(vars={'MF_MASTER_ADDR': 'x'})"))
    flow = load_flow(path, "mfargo_gang_contract")
    with pytest.raises(CompileError, match=r"step \*train\* @environment: MF_MASTER_ADDR is set by mfargo"):
        pipeline.documents(pipeline.compile_ir(flow, flow._graph, OPTIONS))


def test_the_control_pod_gets_its_own_size(tmp_path):
    workflow = compile_gang(tmp_path, {"cpu": 4, "memory": 8000, "gpu": 1})
    control = workflow.steps["train"].gang.placement.control
    assert (control.cpu, control.memory_mb, control.gpu) == ("4", 8000, 1)
    assert workflow.steps["train"].compute.memory_mb == 1000  # workers keep the step's


@pytest.mark.parametrize("control,message", [
    ({"cpu": "abc"}, "control.cpu must be a number"),
    ({"memory": -1}, "control.memory"),
    ({"memory": 1e30}, "more than 1 PiB"),
    ({"image": " "}, "has whitespace"),
    ({"node_selector": {"bad key!": "x"}}, "bad key!"),
    # looser than @kubernetes once: 1.5 GPUs became '1', 0.5 MB became 0
    ({"gpu": 1.5}, "control.gpu must be a whole number"),
    ({"memory": 1000.5}, "control.memory=1000.5 must be a whole number of MB"),
    ({"disk": 0.5}, "control.disk=0.5 must be a whole number of MB"),
    ({"cpu": 0.0001}, "control.cpu=0.0001"),
    ({"tolerations": [{"key": "a", "operator": "Sometimes"}]}, "operator 'Sometimes' is not one of Equal, Exists"),
])
def test_a_bad_control_size_is_one_line_naming_the_step(tmp_path, control, message):
    with pytest.raises(CompileError) as err:
        compile_gang(tmp_path, control)
    text = str(err.value)
    assert message in text and "train" in text and "\n" not in text


# --- templates/expr: the only place Argo tags are spelled -----------------------------


def test_argo_tags_are_spelled_as_argo_reads_them():
    from mfargo.templates import expr

    assert expr.input_param("worker-count") == "{{inputs.parameters.worker-count}}"
    assert expr.task_output("a", "task-id") == "{{tasks.a.outputs.parameters.task-id}}"
    assert expr.workflow_field(ir.WorkflowField.NAME) == "{{workflow.name}}"
    assert expr.workflow_field(ir.WorkflowField.NAMESPACE) == "{{workflow.namespace}}"
    assert expr.parameter_base64("alpha") == '{{=toBase64(workflow.parameters["alpha"])}}'
    assert expr.RUN_ID == "argo-{{workflow.name}}"


def test_depends_expressions_name_outcomes():
    from mfargo.templates import expr

    assert expr.succeeded("a") == "a.Succeeded"
    assert expr.succeeded_or_skipped("a") == "(a.Succeeded || a.Skipped)"
    assert expr.any_branch(["a"]) == "a.Succeeded"
    assert expr.any_branch(["a", "b"]) == (
        "(a.Succeeded || a.Skipped || a.Omitted) && (b.Succeeded || b.Skipped || b.Omitted)"
        " && (a.Succeeded || b.Succeeded)")
