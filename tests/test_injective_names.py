"""Issue 29: two different Metaflow objects never get one Kubernetes/Argo name, and values
arrive exactly or are refused (the one-line refusals are in test_bad_input's table; here,
what needs a gang, a @project branch or the emitted YAML)."""
from __future__ import annotations

import shlex

import pytest
import yaml

from flowtools import compile_file, gang_flow, linear_flow, load_flow, write_flow
from mfargo import pipeline
from mfargo.base import k8s_syntax
from mfargo.compiler import CompileError, CompileOptions, naming, rules

from metaflow_extensions.mfargo.plugins import step_argv

OPTIONS = CompileOptions(datastore="s3", datastore_root="s3://bkt/m", code_in_image="/app")

BRANCHES = ["x_y", "x__y", "x___y", "_x", "x_", "x", "x.y", "X_y"]

PROJECT_FLOW = linear_flow("LFlow", flow_decorators='@project(name="proj")')


def test_names_that_sanitising_changes_get_a_digest_of_the_name_as_given():
    made = {raw: naming.workflow_template_name("proj.test.%s.LFlow" % raw) for raw in BRANCHES}
    assert made["x_y"] == "proj.test.x-y.lflow"  # plain: as it always was (existing deployments keep it)
    assert made["x"] == "proj.test.x.lflow"
    for raw in ("x__y", "x___y", "_x", "x_"):
        assert made[raw].count("--") == 1 and made[raw].startswith("proj.test.x"), made[raw]
    # x_y and X_y differ in case only: one name (Kubernetes names are lowercase; a deploy
    # refuses to replace another flow's template)
    assert made["X_y"] == made["x_y"]
    distinct = [made[raw] for raw in BRANCHES if raw != "X_y"]
    assert len(set(distinct)) == len(distinct), made
    for name in made.values():
        assert k8s_syntax.is_dns1123_subdomain(name) and len(name) <= naming.MAX_TEMPLATE_NAME, name
    assert made == {raw: naming.workflow_template_name("proj.test.%s.LFlow" % raw) for raw in BRANCHES}


@pytest.mark.parametrize("raw", ["a__b", "A--b", "_a", "a.", "a..b", "a.-b", "A" * 80 + "__", "x" * 80 + "__y"])
def test_a_changed_name_never_equals_a_plain_one(raw):
    made = naming.workflow_template_name(raw)
    assert "--" in made and k8s_syntax.is_dns1123_subdomain(made) and len(made) <= naming.MAX_TEMPLATE_NAME
    for plain in ("a-b", "a.b", "a", "x" * 80, "x" * 80 + "-y", "abc--12345"[:3]):
        assert "--" not in naming.workflow_template_name(plain)
    assert naming.changed_name_note(raw, made) and made in naming.changed_name_note(raw, made)
    assert naming.changed_name_note("proj.test.x_y.LFlow", "proj.test.x-y.lflow") is None


@pytest.mark.parametrize("raw", ["my--flow", "a.b-c", "x" * 45, "a--b--12345"])
def test_a_valid_kubernetes_name_is_kept_as_given(raw):
    assert naming.workflow_template_name(raw) == raw and naming.changed_name_note(raw, raw) is None


def test_branches_that_sanitise_alike_deploy_to_distinct_valid_templates(tmp_path):
    """Through the CLI, as the review did: each bundle passes validation (argo lint runs on
    every bundle the fast tests compile) and the names differ in the parsed YAML."""
    names = {}
    for branch in ("x_y", "x__y", "x___y", "_x", "x_"):
        flow = write_flow(_dir(tmp_path, "b%d" % len(names)), PROJECT_FLOW, "lflow.py")
        proc = compile_file(flow, top_args=("--datastore=s3", "--datastore-root=s3://bkt/m", "--branch", branch))
        doc = next(d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "WorkflowTemplate")
        names[branch] = doc["metadata"]["name"]
        notes = [line for line in proc.stderr.splitlines() if line.startswith("mfargo: note:")]
        assert len(notes) == (0 if branch == "x_y" else 1), proc.stderr
    assert names["x_y"] == "proj.test.x-y.lflow"
    assert len(set(names.values())) == len(names), names


def _dir(tmp_path, name):
    (tmp_path / name).mkdir()
    return tmp_path / name


def test_trigger_on_finish_of_distinct_flows_stays_distinct(tmp_path):
    flow = write_flow(tmp_path, PROJECT_FLOW.replace(
        "from metaflow import FlowSpec, project, step", "from metaflow import FlowSpec, step, trigger_on_finish").replace(
        '@project(name="proj")', "@trigger_on_finish(flows=['Up', 'Up2'])"), "down.py")
    docs = list(yaml.safe_load_all(compile_file(flow).stdout))
    sensor = next(d for d in docs if d and d["kind"] == "Sensor")
    from mfargo.compiler.flow_decorators import sanitized_event_name

    deps = sorted(dep["name"] for dep in sensor["spec"]["dependencies"])
    assert deps == sorted(sanitized_event_name(e) for e in ("metaflow.Up.end", "metaflow.Up2.end")), deps


def _gang(tmp_path, decorators: str):
    path = tmp_path / ("gang_%d.py" % abs(hash(decorators)))
    path.write_text(gang_flow("AttemptsFlow", decorators))
    flow = load_flow(path, "mfargo_attempts_%s" % path.stem)
    return pipeline.compile_ir(flow, flow._graph, OPTIONS)


@pytest.mark.parametrize("decorators", [
    "@jobset(max_restarts=8)",  # 9 generations, Metaflow stops at 6 attempts
    "@jobset(max_restarts=6)",
    "@jobset(max_restarts=2)\n@retry(times=2)",  # 3 x 3
    "@jobset(max_restarts=1)\n@retry(times=3)",  # 4 x 2
])
def test_restarts_times_retries_past_metaflows_attempts_are_one_line(tmp_path, decorators):
    with pytest.raises(CompileError) as err:
        _gang(tmp_path, decorators)
    line = str(err.value)
    assert "\n" not in line and "step *train* @jobset" in line and "MAX_ATTEMPTS" in line, line


@pytest.mark.parametrize("decorators, restarts", [
    ("@jobset(max_restarts=5)", 5),
    ("@jobset(max_restarts=2)\n@retry(times=1)", 2),  # 2 x 3 = 6
    ("@jobset(max_restarts=1)\n@retry(times=2)", 1),  # 3 x 2 = 6
])
def test_restarts_within_metaflows_attempts_compile(tmp_path, decorators, restarts):
    wf = _gang(tmp_path, decorators)
    placements = [s.inputs.placement for s in wf.steps.values() if hasattr(s.inputs, "placement")]
    assert [p.max_restarts for p in placements] == [restarts]


@pytest.mark.parametrize("times, limit", [(2, 2), ("3", 3), (0, 0), (2.0, 2)])
def test_retry_times_written_exactly(tmp_path, times, limit):
    flow = write_flow(tmp_path, PROJECT_FLOW.replace(
        "from metaflow import FlowSpec, project, step", "from metaflow import FlowSpec, retry, step").replace(
        '@project(name="proj")\n', "").replace("    @step\n    def start", "    @retry(times=%r)\n    @step\n    def start"
                                                % (times,)), "r.py")
    docs = list(yaml.safe_load_all(compile_file(flow).stdout))
    template = next(d for d in docs if d and d["kind"] == "WorkflowTemplate")
    start = next(t for t in template["spec"]["templates"] if t["name"] == "start")
    assert start["retryStrategy"]["limit"] == limit + rules.infrastructure_retries(limit)  # the budget beside it
    words = shlex.split(start["container"]["args"][0].splitlines()[-1])
    step = words[words.index("step"):]  # the start pod runs init, then its step
    assert step_argv.option(step, "--max-user-code-retries", "0") == str(limit)  # what @retry counts in the pod


def test_the_largest_backoff_go_holds_compiles_and_one_more_is_refused(tmp_path):
    from mfargo.compiler import rules

    assert rules.MAX_DURATION_MINUTES * 60 * 10**9 <= rules.INT64_MAX < (rules.MAX_DURATION_MINUTES + 1) * 60 * 10**9
    path = tmp_path / "backoff.py"
    source = gang_flow("BackoffFlow", "@retry(times=1, minutes_between_retries=%d)")
    for minutes, ok in ((rules.MAX_DURATION_MINUTES, True), (rules.MAX_DURATION_MINUTES + 1, False)):
        path.write_text(source % minutes)
        flow = load_flow(path, "mfargo_backoff_%d" % minutes)
        if ok:
            pipeline.compile_ir(flow, flow._graph, OPTIONS)
        else:
            with pytest.raises(CompileError, match="minutes_between_retries"):
                pipeline.compile_ir(flow, flow._graph, OPTIONS)


@pytest.mark.parametrize("name", ["MFARGO_OUTPUT_DIR", "Mfargo_x", "mfargo_paths"])
def test_mfargo_variable_names_are_refused_in_any_case(tmp_path, name):
    path = tmp_path / ("env_%s.py" % name)
    path.write_text(gang_flow("EnvFlow", "@environment(vars={%r: 'v'})" % name))
    flow = load_flow(path, "mfargo_env_%s" % name)
    with pytest.raises(CompileError) as err:
        pipeline.compile_ir(flow, flow._graph, OPTIONS)
    assert "step *train* @environment" in str(err.value) and "MFARGO_" in str(err.value)


@pytest.mark.parametrize("root", ["s3://bkt/m", "s3://my.bucket-1/x", "s3://" + "a" * 63, "gs://b/m", "/local/b"])
def test_valid_bucket_names_and_other_roots_pass(root):
    from mfargo.compiler import rules

    rules.s3_bucket("--datastore-root", root)


@pytest.mark.parametrize("root", ["s3://b/m", "s3://ab", "s3://" + "a" * 64, "s3://a..b", "s3://-ab", "s3://ab-",
                                  "s3://Abc", "s3://a_b", "s3://1.2.3.4", "s3://xn--abc", "s3://abc-s3alias", "s3:///m"])
def test_bucket_names_s3_refuses_are_one_line(root):
    from mfargo.compiler import rules

    with pytest.raises(CompileError) as err:
        rules.s3_bucket("--datastore-root", root)
    assert str(err.value).startswith("--datastore-root") and "\n" not in str(err.value)
