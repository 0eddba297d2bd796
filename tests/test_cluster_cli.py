"""`python flow.py argo-workflows create|trigger|status|terminate|suspend|unsuspend|delete|
list-workflow-templates` against the loopback fake Kubernetes API, asserting on the
requests really sent, production tokens, and one-line errors (exit 1, no traceback);
and `list-runs` on the real engine (marked `cluster`; tests/test_list_runs.py has the rest)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from clustertools import flow_cmd, wait_workflow
from flowtools import clean_env, linear_flow
from k8s_fake import kube  # noqa: F401 - fixture
from test_cluster_deploy import RUN_TIMEOUT, SMALL_STEPS, deployed, start, unique

NS = "/namespaces/ns1"
FLOW = '''
from metaflow import FlowSpec, JSONType, Parameter, step

class HelloFlow(FlowSpec):
    """Says hello."""
    who = Parameter("who", default="world")
    times = Parameter("times", default=1, type=int)
    loud = Parameter("loud", default=False, type=bool)
    extra = Parameter("extra", default='{"a": 1}', type=JSONType)

    @step
    def start(self):
        self.next(self.end)

    @step
    def end(self):
        pass

if __name__ == "__main__":
    HelloFlow()
'''
TOP = ("--datastore=s3", "--datastore-root=s3://mfargo-test/cluster")


class Env:
    def __init__(self, kube, tmp_path: Path, source: str = FLOW):
        self.kube, self.dir = kube, tmp_path
        (tmp_path / "flow.py").write_text(textwrap.dedent(source))
        self.kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")
        self.home = tmp_path / "mfhome"

    def run(self, *args: str, user: str = "alice", check: bool = True, **env) -> subprocess.CompletedProcess:
        e = clean_env(home=self.home, USER=user, KUBECONFIG=str(self.kubeconfig), METAFLOW_KUBERNETES_NAMESPACE="ns1",
                      **env)
        e.pop("KUBERNETES_SERVICE_HOST", None)
        cmd = [sys.executable, "flow.py", *TOP, "argo-workflows", *args]
        proc = subprocess.run(cmd, cwd=self.dir, env=e, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError("%s failed (%d):\n%s" % (args, proc.returncode, proc.stderr[-3000:]))
        return proc

    def create(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return self.run("create", "--code-in-image", "/app", *args, **kw)

    def stored_token(self, prefix: str = "helloflow") -> str | None:
        path = self.home / prefix
        return json.loads(path.read_text())["production_token"] if path.exists() else None


def one_line_error(proc) -> str:
    """The error line; asserts exit 1 and no traceback."""
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("mfargo: ")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def template_of(kube) -> dict:
    return kube.get("workflowtemplates", "helloflow", "ns1")


def env_of(doc: dict) -> dict:
    return {e["name"]: e.get("value") for e in doc["spec"]["templateDefaults"]["container"]["env"]}


@pytest.fixture
def env(kube, tmp_path):  # noqa: F811
    return Env(kube, tmp_path)


# -- create ------------------------------------------------------------------------------------


def test_create_deploys_the_template_with_a_production_token(env, kube):  # noqa: F811
    proc = env.create()
    assert kube.summary() == [
        ("GET", NS + "/workflowtemplates/helloflow"),  # the previous deployment's token
        ("GET", "/apis/argoproj.io/v1alpha1"),  # is Argo installed (API discovery), before creating anything
        ("GET", NS + "/workflowtemplates/helloflow"),  # create-or-replace, and what to restore on a failure
        ("GET", NS + "/cronworkflows/helloflow"),  # no @schedule: no stale schedule may keep running
        ("POST", NS + "/workflowtemplates"),
    ]
    body = kube.calls("POST")[0].body
    assert body["kind"] == "WorkflowTemplate" and body["metadata"]["name"] == "helloflow"
    token = env.stored_token()
    assert token and token.startswith("helloflow-")
    ann = body["metadata"]["annotations"]
    assert ann["metaflow/production_token"] == token and ann["metaflow/owner"] == "alice"
    assert ann["metaflow/flow_name"] == "HelloFlow"
    assert json.loads(ann["metaflow/parameters"])["times"] == {
        "python_var_name": "times", "name": "times", "type": "int", "description": None, "is_required": False}
    # Every run carries who deployed it with which token (terminate/suspend check them).
    assert body["spec"]["workflowMetadata"]["annotations"]["metaflow/production_token"] == token
    assert body["spec"]["workflowMetadata"]["annotations"]["metaflow/owner"] == "alice"
    assert env_of(body)["METAFLOW_PRODUCTION_TOKEN"] == token
    assert "production:%s" % token in proc.stderr

    # Redeploying by the same user replaces it with the live resourceVersion and keeps the token.
    kube.reset_log()
    env.create("--max-workers", "7")
    [put] = kube.calls("PUT")
    assert put.path == "/apis/argoproj.io/v1alpha1" + NS + "/workflowtemplates/helloflow"
    assert put.body["metadata"]["resourceVersion"] and put.body["spec"]["parallelism"] == 7
    assert put.body["metadata"]["annotations"]["metaflow/production_token"] == token
    assert not kube.calls("POST")


def test_another_user_needs_the_token(env, kube):  # noqa: F811
    env.create()
    token = env.stored_token()
    env.home.joinpath("helloflow").unlink()  # bob has no cached token
    kube.reset_log()
    line = one_line_error(env.create(user="bob", check=False))
    assert line == ("mfargo: helloflow in namespace ns1 was deployed by alice with a production token you do not "
                    "have; ask them for it and run `argo-workflows create --authorize TOKEN`")
    assert [r.method for r in kube.requests] == ["GET"]  # nothing was written
    assert template_of(kube)["metadata"]["annotations"]["metaflow/owner"] == "alice"

    env.create("--authorize", "production:" + token, user="bob")
    ann = template_of(kube)["metadata"]["annotations"]
    assert ann["metaflow/owner"] == "bob" and ann["metaflow/production_token"] == token
    assert env.stored_token() == token  # cached: bob needs --authorize only once
    env.create(user="bob")


def test_new_tokens(env, kube):  # noqa: F811
    env.create()
    first = env.stored_token()
    env.create("--generate-new-token")
    second = template_of(kube)["metadata"]["annotations"]["metaflow/production_token"]
    assert second != first and second.startswith("helloflow-") and env.stored_token() == second
    env.create("--new-token", "production:mine")
    assert template_of(kube)["metadata"]["annotations"]["metaflow/production_token"] == "mine"
    assert env_of(template_of(kube))["METAFLOW_PRODUCTION_TOKEN"] == "mine"
    line = one_line_error(env.create("--generate-new-token", check=False))
    assert "--generate-new-token cannot follow a token given with --new-token" in line


def test_only_yaml_touches_no_cluster_and_has_no_token_unless_asked(env, kube):  # noqa: F811
    plain = env.create("--only-yaml").stdout
    assert "production_token" not in plain and "PRODUCTION_TOKEN" not in plain
    asked = list(yaml.safe_load_all(env.create("--only-yaml", "--new-token", "tok-1").stdout))
    assert asked[0]["metadata"]["annotations"]["metaflow/production_token"] == "tok-1"
    assert env_of(asked[0])["METAFLOW_PRODUCTION_TOKEN"] == "tok-1"
    assert "metaflow/owner" not in asked[0]["metadata"]["annotations"]
    # A generated token is minted once: the pods' env and the annotation agree (they differed).
    minted = list(yaml.safe_load_all(env.create("--only-yaml", "--generate-new-token").stdout))[0]
    token = minted["metadata"]["annotations"]["metaflow/production_token"]
    assert token.startswith("helloflow-") and env_of(minted)["METAFLOW_PRODUCTION_TOKEN"] == token
    assert kube.requests == []
    assert env.stored_token() is None


def test_existing_non_metaflow_template_is_not_overwritten(env, kube):  # noqa: F811
    kube.put({"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate",
              "metadata": {"name": "helloflow"}, "spec": {}}, namespace="ns1")
    line = one_line_error(env.create(check=False))
    assert "a WorkflowTemplate named helloflow that was not deployed by Metaflow exists in namespace ns1" in line
    assert [r.method for r in kube.requests] == ["GET"]


def test_create_deploys_every_document_of_the_bundle(kube, tmp_path):  # noqa: F811
    source = FLOW.replace("from metaflow import", "from metaflow import schedule,").replace(
        "class HelloFlow", "@schedule(hourly=True)\nclass HelloFlow")
    env = Env(kube, tmp_path, source)
    docs = list(yaml.safe_load_all(env.create("--only-yaml").stdout))
    kinds = [d["kind"] for d in docs]
    assert kinds == ["WorkflowTemplate", "CronWorkflow"]
    env.create()
    posted = [(r.path.rsplit("/", 1)[1], r.body["kind"], r.body["metadata"]["name"]) for r in kube.calls("POST")]
    assert posted == [(Path(p).name, k, n) for p, k, n in [
        ("workflowtemplates", "WorkflowTemplate", "helloflow"), ("cronworkflows", "CronWorkflow", "helloflow")]]
    assert not kube.calls("DELETE")
    assert kube.get("cronworkflows", "helloflow", "ns1")["spec"]


# -- trigger and runs --------------------------------------------------------------------------


def test_trigger_status_suspend_unsuspend_terminate(env, kube):  # noqa: F811
    env.create()
    kube.reset_log()
    run_id_file = env.dir / "run-id"
    proc = env.run("trigger", "--who", "bob & co", "--times", "3", "--loud", "True", "--extra", '{"b": [1, 2]}',
                   "--run-id-file", str(run_id_file))
    [post] = kube.calls("POST")
    assert post.path == "/apis/argoproj.io/v1alpha1" + NS + "/workflows"
    assert post.body["kind"] == "Workflow"
    assert post.body["metadata"]["generateName"] == "helloflow-"
    assert post.body["spec"]["workflowTemplateRef"] == {"name": "helloflow"}
    # The strings `python flow.py run --x VALUE` takes, which is what the template's pods expect.
    assert {p["name"]: p["value"] for p in post.body["spec"]["arguments"]["parameters"]} == {
        "who": "bob & co", "times": "3", "loud": "True", "extra": '{"b": [1, 2]}'}
    assert json.loads(post.body["metadata"]["annotations"]["metaflow/triggered_by_user"]) == {
        "type": "user", "name": "alice"}
    name = next(k[4] for k in kube.objects if k[3] == "workflows")
    run_id = run_id_file.read_text()
    assert run_id == "argo-" + name and run_id in proc.stderr

    # The workflow controller would copy workflowMetadata onto the run; the fake does not.
    wf = kube.get("workflows", name, "ns1")
    wf["metadata"]["annotations"].update(template_of(kube)["spec"]["workflowMetadata"]["annotations"])
    assert env.run("status", run_id).stdout == "Pending\n"  # not picked up by the controller yet
    wf["status"] = {"phase": "Error", "finishedAt": None}
    assert env.run("status", run_id).stdout == "Failed\n"
    wf["status"] = {"phase": "Running"}
    assert env.run("status", run_id).stdout == "Pending\n"  # Metaflow does not know the run yet

    kube.reset_log()
    env.run("suspend", run_id)
    env.run("unsuspend", run_id)
    env.run("terminate", run_id)
    patches = kube.calls("PATCH")
    assert [(p.path.rsplit("/", 1)[1], p.body) for p in patches] == [
        (name, {"spec": {"suspend": True}}), (name, {"spec": {"suspend": None}}),
        (name, {"spec": {"shutdown": "Terminate"}})]
    assert {p.headers["content-type"] for p in patches} == {"application/merge-patch+json"}

    # Someone else may not terminate it without the token...
    env.home.joinpath("helloflow").unlink()
    line = one_line_error(env.run("terminate", run_id, user="bob", check=False))
    assert "was started by a deployment of alice with a production token you do not have" in line
    # ...and a finished run cannot be terminated.
    wf = kube.get("workflows", name, "ns1")
    wf["spec"].pop("shutdown")
    wf["status"] = {"phase": "Succeeded", "finishedAt": "2024-01-01T00:00:00Z"}
    line = one_line_error(env.run("terminate", run_id, check=False))
    assert line == "mfargo: cannot terminate run %s: it already finished (Succeeded)" % run_id


def test_trigger_needs_a_deployment_and_run_ids_need_the_prefix(env, kube):  # noqa: F811
    line = one_line_error(env.run("trigger", check=False))
    assert line == ("mfargo: workflow helloflow is not deployed in namespace ns1: run `argo-workflows create` "
                    "first")
    assert not kube.calls("POST")
    assert "begin with 'argo-'" in one_line_error(env.run("status", "helloflow-x", check=False))
    assert one_line_error(env.run("status", "argo-helloflow-x", check=False)) == (
        "mfargo: no run argo-helloflow-x in namespace ns1")
    assert one_line_error(env.run("suspend", "argo-helloflow-x", check=False)) == (
        "mfargo: no run argo-helloflow-x in namespace ns1")


# -- delete, list --------------------------------------------------------------------------------


def test_delete_and_list(env, kube):  # noqa: F811
    env.create()
    kube.put({"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate",
              "metadata": {"name": "someone-else", "annotations": {"metaflow/flow_name": "OtherFlow"}}},
             namespace="ns1")
    assert env.run("list-workflow-templates").stdout == "helloflow\n"
    assert env.run("list-workflow-templates", "--all").stdout == "helloflow\nsomeone-else\n"
    kube.reset_log()
    env.run("delete")
    assert kube.summary() == [
        ("GET", NS + "/workflowtemplates/helloflow"),
        ("DELETE", NS + "/cronworkflows/helloflow"),
        ("DELETE", NS + "/sensors/helloflow"),
        ("DELETE", NS + "/workflowtemplates/helloflow"),
    ]
    assert kube.names("workflowtemplates", "ns1") == ["someone-else"]
    assert one_line_error(env.run("delete", check=False)) == (
        "mfargo: workflow helloflow does not exist in namespace ns1")


# -- API errors ------------------------------------------------------------------------------------


def test_forbidden_create_is_one_line(env, kube):  # noqa: F811
    kube.fail("POST", "/workflowtemplates$", 403, 'workflowtemplates.argoproj.io is forbidden: User "alice" cannot '
              'create resource "workflowtemplates" in API group "argoproj.io" in the namespace "ns1"')
    line = one_line_error(env.create(check=False))
    assert line == ('mfargo: deploy of helloflow failed, nothing changed: create workflowtemplates helloflow: '
                    'forbidden (403) from the API server at %s: workflowtemplates.argoproj.io is forbidden: User '
                    '"alice" cannot create resource "workflowtemplates" in API group "argoproj.io" in the namespace '
                    '"ns1"' % kube.url)
    assert env.stored_token() is None  # not deployed: the token is not cached


def test_conflict_and_not_found_are_one_line(env, kube):  # noqa: F811
    env.create()
    kube.fail("PUT", "/workflowtemplates/helloflow$", 409, 'Operation cannot be fulfilled on workflowtemplates.'
              'argoproj.io "helloflow": the object has been modified')
    assert ("replace workflowtemplates helloflow: conflict (409) from the API server at %s: Operation cannot be "
            "fulfilled" % kube.url) in one_line_error(env.create(check=False))
    kube.fail("POST", "/workflows$", 404, 'namespaces "ns1" not found')
    assert one_line_error(env.run("trigger", check=False)) == (
        'mfargo: create workflows helloflow-: not found (404) from the API server at %s: namespaces "ns1" not found'
        % kube.url)


def test_no_kube_config_and_connection_refused(env, kube, tmp_path):  # noqa: F811
    env.kubeconfig = tmp_path / "missing"
    line = one_line_error(env.create(check=False))
    assert line.startswith("mfargo: no Kubernetes configuration: ") and line.endswith(
        "missing does not exist (set KUBECONFIG or create ~/.kube/config)")
    env.kubeconfig = kube.kubeconfig(tmp_path / "kc2")
    url = kube.url
    kube.close()
    line = one_line_error(env.run("status", "argo-helloflow-abc", check=False))
    assert line == ("mfargo: get workflows helloflow-abc: cannot reach the Kubernetes API at %s: connection refused"
                    % url)


# -- resume --------------------------------------------------------------------------------------


def test_resume_starts_a_run_with_the_origin_and_its_parameters(env, kube):  # noqa: F811
    env.create()
    env.run("trigger", "--who", "bob")
    [origin] = [k[4] for k in kube.objects if k[3] == "workflows"]
    wf = kube.get("workflows", origin, "ns1")
    wf["metadata"]["annotations"].update(template_of(kube)["spec"]["workflowMetadata"]["annotations"])
    origin_id = "argo-" + origin

    # Not ended yet: nothing is started.
    kube.reset_log()
    line = one_line_error(env.run("resume", "--origin-run-id", origin_id, check=False))
    assert line == ("mfargo: run %s has not ended: resume it once it has (`argo-workflows terminate %s` ends it)"
                    % (origin_id, origin_id))
    wf["status"] = {"phase": "Failed", "finishedAt": "2024-01-01T00:00:00Z"}
    assert one_line_error(env.run("resume", "nope", "--origin-run-id", origin_id, check=False)) == (
        "mfargo: STEP_TO_RERUN 'nope' is not a step of HelloFlow")
    assert one_line_error(env.run("resume", "--origin-run-id", "argo-helloflow-gone", check=False)) == (
        "mfargo: no run argo-helloflow-gone in namespace ns1")
    assert not kube.calls("POST")

    run_id_file = env.dir / "resumed"
    proc = env.run("resume", "end", "--origin-run-id", origin_id, "--run-id-file", str(run_id_file))
    [post] = kube.calls("POST")
    assert post.body["spec"]["workflowTemplateRef"] == {"name": "helloflow"}
    assert {p["name"]: p["value"] for p in post.body["spec"]["arguments"]["parameters"]} == {
        "who": "bob", "times": "1", "loud": "False", "extra": '{"a": 1}',  # the origin's, as it was started
        "mfargo-origin-run-id": origin_id, "mfargo-resume-step": "end"}
    resumed = run_id_file.read_text()
    assert resumed != origin_id and resumed in proc.stderr and origin_id in proc.stderr

    # A run of another template (same flow) is not this deployment's to resume.
    wf["spec"]["workflowTemplateRef"] = {"name": "helloflow-other"}
    assert one_line_error(env.run("resume", "--origin-run-id", origin_id, check=False)) == (
        "mfargo: run %s is not a run of the workflow helloflow (it was started from helloflow-other)" % origin_id)

    # A run submitted with no arguments (`argo submit --from`): only the resume parameters are set.
    wf["spec"]["workflowTemplateRef"] = {"name": "helloflow"}
    wf["spec"]["arguments"] = None
    kube.reset_log()
    env.run("resume", "--origin-run-id", origin_id)
    [post] = kube.calls("POST")
    assert {p["name"]: p["value"] for p in post.body["spec"]["arguments"]["parameters"]} == {
        "mfargo-origin-run-id": origin_id, "mfargo-resume-step": ""}


# -- list-runs on the cluster ------------------------------------------------------------------------

MAYBE_FAILS = linear_flow("MaybeFailsFlow", 'if self.fail:\n    raise Exception("asked to fail")',
                          members='fail = Parameter("fail", default=False, type=bool)')


@pytest.mark.cluster
def test_list_runs_on_the_cluster(cluster_env, tmp_path):
    """On the real engine, `list-runs` finds a deployment's runs (by the label `trigger` puts on
    them, whichever Argo release runs), newest first, with Argo's final phases; --status filters."""
    flow = tmp_path / "maybe_fails.py"
    flow.write_text(MAYBE_FAILS)
    env = {**cluster_env, "METAFLOW_DECOSPECS": SMALL_STEPS}
    name = unique("list-runs")

    def list_runs(*args: str) -> list[dict]:
        return json.loads(flow_cmd(env, flow, "argo-workflows", "--name", name, "list-runs", "--json", *args).stdout)

    with deployed(env, flow, name) as runs:
        succeeding = start(env, flow, name, runs)
        time.sleep(1)  # creation times have whole seconds: the second run is the newer one
        failing = start(env, flow, name, runs, "--fail", "True")
        finished = {run_id: wait_workflow(env, run_id, timeout=RUN_TIMEOUT)["status"] for run_id in runs}
        assert {r: status["phase"] for r, status in finished.items()} == {succeeding: "Succeeded", failing: "Failed"}
        listed = list_runs()
        assert [(r["run_id"], r["status"], r["trigger"]) for r in listed] == [
            (failing, "Failed", "manual"), (succeeding, "Succeeded", "manual")]
        assert [(r["started_at"], r["finished_at"]) for r in listed] == [
            (finished[r]["startedAt"], finished[r]["finishedAt"]) for r in (failing, succeeding)]
        assert all(r["duration_seconds"] >= 0 for r in listed)
        assert [r["run_id"] for r in list_runs("--status", "Failed")] == [failing]
