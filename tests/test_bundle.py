"""The deploy bundle: CronWorkflow, Sensor, Role/RoleBinding and Workflow beside the template.

Asserts on parsed YAML of small generated flows (and the checked-in examples).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys

import pytest
import yaml

from flowtools import EXAMPLES, compile_file, compile_source, pod_command, script, write_flow
from mfargo.base import validation
from mfargo.compiler import naming
from shared_schemas import SHARED_AVAILABLE, SHARED_DIR, run_shared_validator

HEAD = "from metaflow import FlowSpec, Parameter, step, parallel, kubernetes, schedule, trigger, trigger_on_finish\n"

LINEAR = """
    @step
    def start(self):
        self.next(self.end)

    @step
    def end(self):
        pass
"""

GANG = """
    @step
    def start(self):
        self.next(self.train, num_parallel=2)

    @parallel
    @step
    def train(self):
        self.next(self.join)

    @step
    def join(self, inputs):
        self.next(self.end)

    @step
    def end(self):
        pass
"""


def flow_source(decorators: str, body: str = LINEAR, params: str = "", name: str = "BundleFlow") -> str:
    return HEAD + "\n%s\nclass %s(FlowSpec):\n%s%s\n\nif __name__ == \"__main__\":\n    %s()\n" % (
        decorators, name, params, body, name)


def kinds(docs):
    return [d["kind"] for d in docs]


def by_kind(docs):
    return {d["kind"]: d for d in docs}


def env_of(doc):
    return {e["name"]: e.get("value") for e in doc["spec"]["templateDefaults"]["container"]["env"]}


def sanitized(name: str) -> str:
    """Metaflow's sanitized event name, written out independently of mfargo."""
    digest = base64.b32encode(hashlib.sha1(name.encode()).digest()).decode()[:4].lower()
    return "%s_%s" % (name.replace(".", "").replace("-", "").replace("@", "").replace("+", ""), digest)


# --- kinds and order ------------------------------------------------------------------------


def test_plain_flow_is_only_a_workflow_template(tmp_path):
    docs = compile_source(tmp_path, flow_source(""))
    assert kinds(docs) == ["WorkflowTemplate"]
    assert "hooks" not in docs[0]["spec"]


def test_every_kind_in_fixed_order(tmp_path):
    src = flow_source("@schedule(hourly=True)", GANG)
    docs = compile_source(tmp_path, src, "--workflow")
    assert kinds(docs) == ["WorkflowTemplate", "CronWorkflow", "Role", "RoleBinding", "Workflow"]
    src = flow_source('@trigger(event="go")', GANG)
    docs = compile_source(tmp_path, src, "--workflow")
    assert kinds(docs) == ["WorkflowTemplate", "Sensor", "Role", "RoleBinding", "Workflow"]
    assert validation.validate_documents(docs) == []


def test_workflow_document_references_the_template(tmp_path):
    docs = compile_source(tmp_path, flow_source(""), "--workflow", "--service-account", "runner")
    wt, wf = docs
    assert wf["metadata"]["generateName"] == wt["metadata"]["name"] + "-"
    assert wf["spec"] == {"serviceAccountName": "runner", "workflowTemplateRef": {"name": wt["metadata"]["name"]}}


# --- @schedule ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "deco, expected",
    [
        ('@schedule(cron="0 3 * * *", timezone="Europe/Berlin")', "0 3 * * *"),
        ("@schedule(hourly=True)", "0 * * * ?"),
        ("@schedule(daily=True)", "0 0 * * ?"),
        ("@schedule(weekly=True)", "0 0 ? * SUN"),
        ('@schedule(cron="15 4 * * 1-5 *")', "15 4 * * 1-5"),  # the year field is dropped, as core does
    ],
)
def test_schedule_becomes_a_cron_workflow(tmp_path, deco, expected):
    docs = compile_source(tmp_path, flow_source(deco))
    assert kinds(docs) == ["WorkflowTemplate", "CronWorkflow"]
    wt, cron = docs
    name = wt["metadata"]["name"]
    assert cron["metadata"]["name"] == name
    spec = cron["spec"]
    assert spec["schedules"] == [expected] and "schedule" not in spec
    assert spec["workflowSpec"] == {"workflowTemplateRef": {"name": name}}
    assert spec["suspend"] is False and spec["startingDeadlineSeconds"] == 3540
    tz = "Europe/Berlin" if "Berlin" in deco else None
    assert spec.get("timezone") == tz
    assert json.loads(wt["metadata"]["annotations"]["metaflow/cron"]) == {"schedule": expected, "tz": tz or ""}


def test_schedule_disabled_emits_no_cron(tmp_path):
    docs = compile_source(tmp_path, flow_source("@schedule(daily=False)"))
    assert kinds(docs) == ["WorkflowTemplate"]


def test_argo_37_gets_the_singular_schedule_field(tmp_path):
    """--argo-version 3.7 writes `schedule: X` (Argo 4 removed it); the default 4.1 the list."""
    docs = compile_source(tmp_path, flow_source("@schedule(hourly=True)"), "--argo-version", "3.7")
    spec = by_kind(docs)["CronWorkflow"]["spec"]
    assert spec["schedule"] == "0 * * * ?" and "schedules" not in spec
    assert validation.validate_documents(docs, argo_version="3.7") == []
    # Argo 4.1's schema has no `schedule`: the same document is refused there.
    assert any("schedule" in p for p in validation.validate_documents(docs, argo_version="4.1"))
    if SHARED_AVAILABLE:  # Argo 3.7's schema has the singular field
        path = tmp_path / "old.yaml"
        path.write_text(yaml.safe_dump_all(docs))
        proc = run_shared_validator([path], argo_schema=SHARED_DIR / "schemas" / "argo-workflows" / "schema-v3.7.18.json")
        assert proc.returncode == 0, proc.stdout


# --- @trigger / @trigger_on_finish ----------------------------------------------------------------

PARAMS = """
    table = Parameter("table", required=True)
    rows = Parameter("rows", default=5, type=int)
"""


def test_trigger_sensor_maps_payload_to_parameters(tmp_path):
    deco = '@trigger(event={"name": "data.ready", "parameters": {"table": "tbl", "rows": "n_rows"}})'
    docs = compile_source(tmp_path, flow_source(deco, params=PARAMS))
    assert kinds(docs) == ["WorkflowTemplate", "Sensor"]
    wt, sensor = docs
    name, dep = wt["metadata"]["name"], sanitized("data.ready")
    assert sensor["metadata"]["name"] == name
    assert sensor["metadata"]["labels"]["app.kubernetes.io/name"] == "metaflow-sensor"
    # the dependency: the event's name, and the required parameter's field must be present
    [dependency] = sensor["spec"]["dependencies"]
    assert dependency["name"] == dep
    assert dependency["eventName"] == "metaflow-event" and dependency["eventSourceName"] == "argo-events-webhook"
    exprs = dependency["filters"]["exprs"]
    assert exprs[0] == {"expr": "name == 'data.ready'", "fields": [{"name": "name", "path": "body.payload.name"}]}
    assert exprs[1:] == [{"expr": "true == true", "fields": [{"name": "field", "path": "body.payload.tbl"}]}]
    # the trigger: create a Workflow from the template, parameters from the payload
    [trig] = sensor["spec"]["triggers"]
    k8s = trig["template"]["k8s"]
    assert k8s["operation"] == "create"
    resource = k8s["source"]["resource"]
    assert resource["kind"] == "Workflow" and resource["spec"]["workflowTemplateRef"] == {"name": name}
    assert resource["metadata"]["generateName"] == name + "-"
    args = {p["name"]: p.get("value") for p in resource["spec"]["arguments"]["parameters"]}
    assert args == {"table": None, "rows": "5", dep: "null"}
    mapping = {p["dest"]: p["src"] for p in k8s["parameters"]}
    assert set(mapping) == {"spec.arguments.parameters.#(name=%s).value" % n for n in ("table", "rows", dep)}
    rows = mapping["spec.arguments.parameters.#(name=rows).value"]
    assert rows["dependencyName"] == dep and rows["value"] == "5"
    assert '(hasKey $.Input.body.payload "n_rows")' in rows["dataTemplate"]
    assert '(get $.Input.body.payload "n_rows")' in rows["dataTemplate"]
    assert "value" not in mapping["spec.arguments.parameters.#(name=table).value"]
    assert mapping["spec.arguments.parameters.#(name=%s).value" % dep] == {
        "dependencyName": dep, "dataKey": "body.payload", "value": "null"}
    # the template: the event's payload parameter, its env var, the annotations
    wt_params = {p["name"]: p.get("value") for p in wt["spec"]["arguments"]["parameters"]}
    assert wt_params[dep] == "null"
    assert env_of(wt)["METAFLOW_ARGO_EVENT_PAYLOAD_event_%s" % dep] == '{{=toBase64(workflow.parameters["%s"])}}' % dep
    ann = wt["metadata"]["annotations"]
    assert json.loads(ann["metaflow/triggers"]) == [{"name": "data.ready", "type": "event"}]
    assert ann["metaflow/sensor_name"] == name


def test_single_event_without_mapping_maps_every_parameter_by_name(tmp_path):
    docs = compile_source(tmp_path, flow_source('@trigger(event="go")', params=PARAMS))
    k8s = by_kind(docs)["Sensor"]["spec"]["triggers"][0]["template"]["k8s"]
    templates = {p["dest"]: p["src"].get("dataTemplate") for p in k8s["parameters"]}
    for name in ("table", "rows"):
        assert '(get $.Input.body.payload "%s")' % name in templates["spec.arguments.parameters.#(name=%s).value" % name]


def test_sensor_uses_metaflow_argo_events_config(tmp_path):
    from flowtools import clean_env

    env = clean_env(METAFLOW_ARGO_EVENTS_EVENT="ev", METAFLOW_ARGO_EVENTS_EVENT_SOURCE="src",
                    METAFLOW_ARGO_EVENTS_SERVICE_ACCOUNT="sa", METAFLOW_ARGO_EVENTS_EVENT_BUS="bus",
                    METAFLOW_ARGO_EVENTS_SENSOR_NAMESPACE="events")
    docs = compile_source(tmp_path, flow_source('@trigger(events=["a", "b"])'), env=env)
    sensor = by_kind(docs)["Sensor"]
    assert sensor["metadata"]["namespace"] == "events"
    assert sensor["spec"]["eventBusName"] == "bus" and sensor["spec"]["template"]["serviceAccountName"] == "sa"
    assert [(d["name"], d["eventName"], d["eventSourceName"]) for d in sensor["spec"]["dependencies"]] == [
        (sanitized("a"), "ev", "src"), (sanitized("b"), "ev", "src")]


def test_trigger_on_finish_listens_for_the_upstream_end_event(tmp_path):
    docs = compile_source(tmp_path, flow_source('@trigger_on_finish(flow="UpstreamFlow")'))
    wt, sensor = docs
    event = "metaflow.UpstreamFlow.end"
    [dependency] = sensor["spec"]["dependencies"]
    assert dependency["name"] == sanitized(event)
    exprs = [e["expr"] for e in dependency["filters"]["exprs"]]
    # JSON true in Metaflow's events: a boolean literal (core's 'True' never matches one)
    assert exprs == ["name == '%s'" % event, "field == true"]
    assert dependency["filters"]["exprs"][1]["fields"] == [{"name": "field", "path": "body.payload.auto-generated-by-metaflow"}]
    assert json.loads(wt["metadata"]["annotations"]["metaflow/triggers"]) == [{"name": event, "type": "run"}]
    assert "METAFLOW_ARGO_EVENT_PAYLOAD_run_%s" % sanitized(event) in env_of(wt)


def test_trigger_errors_are_one_line(tmp_path):
    src = flow_source('@trigger(event="a")\n@trigger_on_finish(flow="B")')
    proc = compile_file(write_flow(tmp_path, src), check=False)
    assert proc.returncode == 1 and "@trigger and @trigger_on_finish" in proc.stderr
    src = flow_source('@trigger(event={"name": "a", "parameters": {"nope": "x"}})', params=PARAMS)
    proc = compile_file(write_flow(tmp_path, src), check=False)
    assert proc.returncode == 1 and "'nope'" in proc.stderr and "not a flow parameter" in proc.stderr


# --- RBAC for @parallel ---------------------------------------------------------------------------


def test_gang_gets_exactly_the_jobset_rbac(tmp_path):
    docs = compile_source(tmp_path, flow_source("", GANG))
    assert kinds(docs) == ["WorkflowTemplate", "Role", "RoleBinding"]
    wt, role, binding = docs
    name = wt["metadata"]["name"] + "-jobset"
    assert role["apiVersion"] == "rbac.authorization.k8s.io/v1"
    assert role["metadata"]["name"] == name
    assert role["rules"] == [
        {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["create", "get", "delete"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list"]},  # the failure report
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},  # why a rank never ran
        {"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"], "verbs": ["create", "patch"]},
        # the run's gang watch (templates/queue_watch.py): the run's JobSets, and why it let one go
        {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
    assert [(s["kind"], s["name"]) for s in binding["subjects"]] == [("ServiceAccount", "default")]
    assert role["metadata"].get("namespace") == binding["metadata"].get("namespace") == wt["metadata"].get("namespace")


def test_service_account_option_is_the_binding_subject(tmp_path):
    docs = compile_source(tmp_path, flow_source("@schedule(daily=True)", GANG), "--service-account", "trainer")
    d = by_kind(docs)
    jobset_binding, gang_pods_binding = [doc for doc in docs if doc["kind"] == "RoleBinding"]
    assert [s["name"] for s in jobset_binding["subjects"]] == ["trainer"]
    # the gang's pods run as the namespace's `default`: they get only what they read themselves
    assert [s["name"] for s in gang_pods_binding["subjects"]] == ["default"]
    assert d["CronWorkflow"]["spec"]["workflowSpec"]["serviceAccountName"] == "trainer"
    # trigger's Workflow names only the template: the template itself carries the account.
    assert d["WorkflowTemplate"]["spec"]["serviceAccountName"] == "trainer"


def test_without_the_option_runs_keep_the_namespace_default_account(tmp_path):
    docs = compile_source(tmp_path, flow_source("", GANG))
    d = by_kind(docs)
    assert "serviceAccountName" not in d["WorkflowTemplate"]["spec"]
    assert [s["name"] for s in d["RoleBinding"]["subjects"]] == ["default"]


GANG_POD_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]  # gang_control.py


@pytest.mark.parametrize("workflow_account, step_account, expected", [
    (None, "gang-sa", None),  # its failure report runs as gang-sa: the workflow's Role is bound to it
    ("trainer", None, ["default"]),
    ("trainer", "trainer", None),  # the workflow's Role already covers them
    (None, None, None),
])
def test_gang_pods_may_list_pods_as_their_own_service_account(tmp_path, workflow_account, step_account, expected):
    """A worker reads its control's pod (gang_control.py) as the gang pod's service account."""
    body = GANG.replace("    @parallel\n", "    @kubernetes(service_account=%r)\n    @parallel\n" % step_account
                        if step_account else "    @parallel\n")
    options = ("--service-account", workflow_account) if workflow_account else ()
    docs = compile_source(tmp_path, flow_source("", body), *options)
    roles = {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "Role"}
    bindings = {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "RoleBinding"}
    name = docs[0]["metadata"]["name"] + "-gang-pods"
    if expected is None:
        assert name not in roles and name not in bindings and len(roles) == 1
        return
    assert roles[name]["rules"] == GANG_POD_RULES
    assert bindings[name]["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
    assert [s["name"] for s in bindings[name]["subjects"]] == expected


@pytest.mark.parametrize("workflow_account, step_account, expected", [
    (None, "gang-sa", ["default", "gang-sa"]),
    ("trainer", "gang-sa", ["trainer", "gang-sa"]),
    ("trainer", None, ["trainer"]),  # the report runs as the workflow's account
    ("trainer", "trainer", ["trainer"]),
])
def test_the_failure_report_may_read_the_gang_as_its_own_service_account(tmp_path, workflow_account, step_account,
                                                                           expected):
    """The report pod runs as its gang step's account: the Role it reads the JobSet, Jobs,
    pods and events with is bound to that account (it was bound to the workflow's only)."""
    body = GANG.replace("    @parallel\n", "    @kubernetes(service_account=%r)\n    @parallel\n" % step_account
                        if step_account else "    @parallel\n")
    options = ("--service-account", workflow_account) if workflow_account else ()
    docs = compile_source(tmp_path, flow_source("", body), *options)
    wt = docs[0]
    name = wt["metadata"]["name"] + "-jobset"
    binding = next(d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == name)
    assert [s["name"] for s in binding["subjects"]] == expected
    report = next(t for t in wt["spec"]["templates"] if t["name"] == naming.gang_report_template_name("train"))
    assert report.get("serviceAccountName", workflow_account or "default") in expected


def test_checked_in_gang_example_has_rbac():
    docs = list(yaml.safe_load_all((EXAMPLES / "distributed_training.yaml").read_text()))
    assert kinds(docs) == ["WorkflowTemplate", "Role", "RoleBinding"]


# --- exit hooks and notifications ---------------------------------------------------------------

HOOKS = '''
def ok(run=None):
    pass


def bad(run=None):
    pass


@exit_hook(on_success=[ok], on_error=[bad, "pkg.mod.alert"])
'''


def test_exit_hooks_run_metaflow_exit_hook_script(tmp_path):
    src = flow_source("from metaflow import exit_hook\n" + HOOKS)
    [wt] = compile_source(tmp_path, src, "--code-in-image", "/app")
    hooks = wt["spec"]["hooks"]
    on_error = "workflow.status == 'Error' || workflow.status == 'Failed'"
    assert hooks == {
        "0-on-success-ok": {"expression": "workflow.status == 'Succeeded'", "template": "0-on-success-ok"},
        "0-on-error-bad": {"expression": on_error, "template": "0-on-error-bad"},
        "0-on-error-pkg-mod-alert": {"expression": on_error, "template": "0-on-error-pkg-mod-alert"},
    }
    templates = {t["name"]: t for t in wt["spec"]["templates"]}
    for hook in hooks.values():
        assert hook["template"] in templates
    command = pod_command(wt, templates["0-on-success-ok"])  # the code first: templateDefaults' shared command
    assert command[:2] == ["bash", "-c"] and "cd /app" in command[2]
    assert "python -m metaflow.plugins.exit_hook.exit_hook_script flow.py ok 'BundleFlow/argo-{{workflow.name}}'" in command[-1]
    assert "exit_hook_script flow.py pkg.mod.alert " in script(templates["0-on-error-pkg-mod-alert"])


def test_notifications_take_secrets_by_reference_only(tmp_path):
    flow = write_flow(tmp_path, flow_source(""))
    out = compile_file(flow, "--notify-on-error", "--notify-on-success",
                       "--notify-slack-webhook-url-secret", "slack-hook:webhook",
                       "--notify-pager-duty-integration-key-secret", "pd").stdout
    [wt] = list(yaml.safe_load_all(out))
    templates = {t["name"]: t for t in wt["spec"]["templates"]}
    assert set(wt["spec"]["hooks"]) == {"0-notify-slack-on-error", "0-notify-slack-on-success",
                                        "0-notify-pager-duty-on-error", "0-notify-pager-duty-on-success"}
    env = {e["name"]: e for e in templates["0-notify-slack-on-error"]["container"]["env"]}
    assert env["SLACK_WEBHOOK_URL"] == {"name": "SLACK_WEBHOOK_URL",
                                        "valueFrom": {"secretKeyRef": {"name": "slack-hook", "key": "webhook"}}}
    env = {e["name"]: e for e in templates["0-notify-pager-duty-on-success"]["container"]["env"]}
    assert env["PAGER_DUTY_ROUTING_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "pd", "key": "integration-key"}}
    assert json.loads(wt["metadata"]["annotations"]["metaflow/notify_on_error"]) == {
        "slack": True, "pager_duty": True, "incident_io": False}
    assert validation.validate_documents([wt]) == []


def test_secret_values_are_refused_and_nothing_is_written(tmp_path):
    flow = write_flow(tmp_path, flow_source(""))
    target = tmp_path / "out.yaml"
    secret = "https://hooks.slack.com/services/T000/B000/SECRETVALUE"
    proc = compile_file(flow, "--notify-on-error", "--notify-slack-webhook-url", secret,
                        "--output-file", str(target), check=False)
    assert proc.returncode == 1 and "Secret" in proc.stderr
    assert not target.exists() and "SECRETVALUE" not in proc.stdout
    proc = compile_file(flow, "--notify-on-error", check=False)
    assert proc.returncode == 1 and "--notify-slack-webhook-url-secret" in proc.stderr


# --- --check ----------------------------------------------------------------------------------------


def test_check_exit_codes_and_diff(tmp_path):
    flow = write_flow(tmp_path, flow_source("@schedule(hourly=True)"))
    target = tmp_path / "bundle.yaml"
    image = ("--code-in-image", "/app")  # nothing to upload
    # missing file: stale, and --check does not create it
    proc = compile_file(flow, *image, "--output-file", str(target), "--check", check=False)
    assert proc.returncode == 1 and not target.exists()
    compile_file(flow, *image, "--output-file", str(target))
    before = target.read_bytes()
    proc = compile_file(flow, *image, "--output-file", str(target), "--check", check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    # edit the flow: the check fails with a unified diff and leaves the file alone
    flow.write_text(flow.read_text().replace("hourly=True", "weekly=True"))
    proc = compile_file(flow, *image, "--output-file", str(target), "--check", check=False)
    assert proc.returncode == 1
    assert proc.stdout.startswith("--- %s\n+++ %s (compiled)\n" % (target, target))
    removed = [l for l in proc.stdout.splitlines() if l.startswith("-") and not l.startswith("---")]
    added = [l for l in proc.stdout.splitlines() if l.startswith("+") and not l.startswith("+++")]
    assert any("0 * * * ?" in l for l in removed) and any("0 0 ? * SUN" in l for l in added)
    assert target.read_bytes() == before
    proc = compile_file(flow, "--only-yaml", "--check", check=False)
    assert proc.returncode == 1 and "--output-file" in proc.stderr


def test_console_script_check_for_pre_commit(tmp_path):
    from flowtools import REPO, clean_env

    flow = write_flow(tmp_path, flow_source(""))
    target = tmp_path / "flow.yaml"
    base = [sys.executable, "-m", "mfargo.cli", "compile", str(flow), "-o", str(target), "--code-in-image", "/app",
            "--datastore", "s3", "--datastore-root", "s3://bkt/m"]
    assert subprocess.run(base, env=clean_env(), capture_output=True).returncode == 0
    proc = subprocess.run(base + ["--check"], env=clean_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    flow.write_text(flow.read_text().replace("BundleFlow", "OtherFlow"))
    proc = subprocess.run(base + ["--check"], env=clean_env(), capture_output=True, text=True)
    assert proc.returncode == 1 and "+  name: otherflow" in proc.stdout
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert [(h["id"], h["entry"], h["pass_filenames"]) for h in hooks] == [
        ("mfargo-check", "mfargo compile --check", False)]


# --- --graph ----------------------------------------------------------------------------------------


def test_graph_prints_mermaid_with_the_gang_as_one_node(tmp_path):
    flow = write_flow(tmp_path, flow_source("", GANG))
    out = compile_file(flow, "--graph").stdout
    assert out.startswith("flowchart TD\n")
    assert 's_train[["train<br/>JobSet: control x1 / worker xN-1"]]' in out
    assert 's_start -->|"gang of N"| s_train' in out
    assert "apiVersion" not in out


def test_graph_of_nested_foreach_has_nested_subgraphs():
    out = compile_file(EXAMPLES / "nested_foreach.py", "--graph").stdout
    assert out.count("subgraph") == 2 and '-->|"foreach"|' in out


# --- the shared validator, determinism --------------------------------------------------------------


@pytest.mark.skipif(not SHARED_AVAILABLE, reason="../shared is not beside this checkout")
def test_shared_validator_accepts_bundles(tmp_path):
    paths = []
    for i, (deco, body, args) in enumerate([
        ("@schedule(hourly=True)", GANG, ("--workflow",)),
        ('@trigger(event={"name": "x", "parameters": {"table": "t"}})', LINEAR, ("--workflow",)),
        ('@trigger_on_finish(flow="Up")', GANG, ()),
    ]):
        src = flow_source(deco, body, params=PARAMS if "@trigger(" in deco else "")
        proc = compile_file(write_flow(tmp_path, src, "f%d.py" % i), *args)
        path = tmp_path / ("b%d.yaml" % i)
        path.write_text(proc.stdout)
        paths.append(path)
    proc = run_shared_validator(paths)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_bundle_bytes_are_stable(tmp_path):
    from flowtools import clean_env

    params = PARAMS.replace("required=True", "default='t'")
    src = flow_source('@schedule(daily=True)\n@trigger(events=["a", "b"])', GANG, params=params)
    flow = write_flow(tmp_path, src)
    one = compile_file(flow, "--workflow").stdout
    two = compile_file(flow, "--workflow", env=clean_env(PYTHONHASHSEED="7")).stdout
    assert one == two and one.count("\n---\n") == 5


def test_incident_io_alerts_read_the_api_key_from_a_secret(tmp_path):
    flow = write_flow(tmp_path, flow_source(""))
    out = compile_file(flow, "--notify-on-error", "--notify-incident-io-api-key-secret", "incident",
                       "--incident-io-alert-source-config-id", "01ABC", "--incident-io-metadata", "team=ml").stdout
    [wt] = list(yaml.safe_load_all(out))
    templates = {t["name"]: t for t in wt["spec"]["templates"]}
    assert set(wt["spec"]["hooks"]) == {"0-notify-incident-io-on-error"}
    env = {e["name"]: e for e in templates["0-notify-incident-io-on-error"]["container"]["env"]}
    assert env["INCIDENT_IO_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "incident", "key": "api-key"}}
    assert env["MFARGO_INCIDENT_IO_SOURCE"]["value"] == "01ABC"
    assert json.loads(env["MFARGO_INCIDENT_IO_METADATA"]["value"]) == {"team": "ml"}
    assert json.loads(wt["metadata"]["annotations"]["metaflow/notify_on_error"])["incident_io"] is True
    compile(templates["0-notify-incident-io-on-error"]["container"]["command"][2], "<notify>", "exec")
    assert validation.validate_documents([wt]) == []
    missing = compile_file(flow, "--notify-on-error", "--notify-incident-io-api-key-secret", "incident", check=False)
    assert missing.returncode != 0 and "--incident-io-alert-source-config-id" in missing.stderr


def test_console_script_passes_other_create_options_through(tmp_path):
    """`mfargo compile` forwards what it does not know to `argo-workflows create`."""
    from flowtools import clean_env

    flow = write_flow(tmp_path, flow_source("@schedule(hourly=True)"))
    target = tmp_path / "flow.yaml"
    base = [sys.executable, "-m", "mfargo.cli", "compile", str(flow), "-o", str(target), "--code-in-image", "/app",
            "--datastore", "s3", "--datastore-root", "s3://bkt/m"]
    proc = subprocess.run(base + ["--argo-version", "3.7", "--max-workers", "7"], env=clean_env(),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    docs = {d["kind"]: d for d in yaml.safe_load_all(target.read_text())}
    assert docs["CronWorkflow"]["spec"]["schedule"] == "0 * * * ?" and "schedules" not in docs["CronWorkflow"]["spec"]
    assert docs["WorkflowTemplate"]["spec"]["parallelism"] == 7
    proc = subprocess.run(base + ["--jobset-version", "0.5"], env=clean_env(), capture_output=True, text=True)
    assert proc.returncode == 1 and "mfargo needs JobSet v0.6 or newer" in proc.stderr


# --- the pods mfargo adds are pods of their step ----------------------------------------------

PRIVATE = '@kubernetes(image="registry.example/team/flow:1", image_pull_secrets=["regcred"], ' \
          'service_account="runner", node_selector={"pool": "private"}, secrets=["team-creds"])'

def pod_templates(wt: dict) -> dict[str, dict]:
    """Every template that runs a pod of its own (a container or a script), by name."""
    return {t["name"]: t for t in wt["spec"]["templates"] if "container" in t or "script" in t}


def test_every_pod_of_a_private_image_flow_can_pull_it_and_has_a_deadline(tmp_path):
    """@kubernetes(image_pull_secrets=...) on every step: the gang's pods, the failure report,
    the @exit_hook and notification pods all carry the pull secret, the step's service account
    and node selector, and a deadline; only the pods that run the flow's code get its Secrets.
    The run's gang watch (a daemon of every gang flow) pulls the start image and runs where it
    can too, but as the workflow's account (the one its Role is bound to), until Argo stops it
    when the run's DAG ends: no deadline (templates/pod.py INHERITS, common.daemon_template)."""
    body = GANG.replace("    @step\n", "    %s\n    @step\n" % PRIVATE)
    flow = write_flow(tmp_path, flow_source("from metaflow import exit_hook\n" + HOOKS, body))
    out = compile_file(flow, "--notify-on-error", "--notify-slack-webhook-url-secret", "slack-hook:webhook").stdout
    docs = list(yaml.safe_load_all(out))
    wt = docs[0]
    pods = pod_templates(wt)
    watch = naming.queue_watch_template_name()
    assert {"start", "0-failure-report-train", "0-on-success-ok", "0-on-error-bad", "0-notify-slack-on-error",
            watch} <= set(pods)
    for name, t in pods.items():
        assert json.loads(t["podSpecPatch"]) == {"imagePullSecrets": [{"name": "regcred"}]}, name
        assert t["nodeSelector"] == {"pool": "private"}, name
        if name == watch:
            assert "serviceAccountName" not in t and "serviceAccountName" not in wt["spec"], name  # the workflow's
            assert t["daemon"] is True and "activeDeadlineSeconds" not in t, name
            [binding] = [d for d in docs if d["kind"] == "RoleBinding" and d["roleRef"]["name"].endswith("-jobset")]
            assert ("ServiceAccount", "default") in [(s["kind"], s["name"]) for s in binding["subjects"]]
        else:
            assert t["serviceAccountName"] == "runner", name
            assert isinstance(t["activeDeadlineSeconds"], int) and t["activeDeadlineSeconds"] > 0, name
        secrets = [e["secretRef"]["name"] for e in t["container"].get("envFrom") or []]
        assert ("team-creds" in secrets) == (not name.startswith("0-notify-")), name
    # the gang's own pods, inside the JobSet manifest of its resource template
    [train] = [t for t in wt["spec"]["templates"] if t["name"] == "train"]
    manifest = yaml.safe_load(re.sub(r"\{\{[^}]*\}\}", "x", train["resource"]["manifest"]))
    for job in manifest["spec"]["replicatedJobs"]:
        spec = job["template"]["spec"]
        assert spec["activeDeadlineSeconds"] > 0
        assert spec["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
        assert spec["template"]["spec"]["serviceAccountName"] == "runner"
    assert pods["0-failure-report-train"]["activeDeadlineSeconds"] == 600
    assert validation.validate_documents([wt]) == []


def test_the_failure_report_runs_the_start_image_so_a_gang_image_that_cannot_be_pulled_is_reported(tmp_path):
    """Only the gang step has the private image: its report pulls the start step's image (with
    the start step's pull settings) and keeps the rest of its step's pod."""
    body = GANG.replace("    @parallel\n", "    %s\n    @parallel\n" % PRIVATE)
    flow = write_flow(tmp_path, flow_source("", body))
    wt = next(yaml.safe_load_all(compile_file(flow).stdout))
    pods = pod_templates(wt)
    start, report = pods["start"], pods["0-failure-report-train"]
    assert report["container"]["image"] == start["container"]["image"] != "registry.example/team/flow:1"
    assert "podSpecPatch" not in report and "podSpecPatch" not in start  # no pull secret for the start image
    assert report["serviceAccountName"] == "runner" and report["nodeSelector"] == {"pool": "private"}
    assert [e["secretRef"]["name"] for e in report["container"]["envFrom"]] == ["team-creds"]


def test_trigger_on_finish_names_are_checked_before_they_are_quoted(tmp_path):
    """Project and branch names go into the Sensor's filter expressions between quotes: one
    carrying a quote is refused in one line, not written."""
    src = flow_source('@trigger_on_finish(flow={"name": "UpstreamFlow", "project": "p\'q", "project_branch": "b"})')
    proc = compile_file(write_flow(tmp_path, src), check=False)
    assert proc.returncode == 1, proc.stdout
    line = proc.stderr.strip().splitlines()[-1]  # after Metaflow's banner
    assert line.startswith("mfargo: @trigger_on_finish: project name \"p'q\" cannot be quoted"), line
    assert not proc.stdout
    # A user branch carries the user's name as Metaflow has it, '@' included: kept, quoted.
    src = flow_source('@trigger_on_finish(flow={"name": "UpstreamFlow", "project": "p", "project_branch": "a@b"})')
    wt, sensor = compile_source(tmp_path, src)
    exprs = [e["expr"] for e in sensor["spec"]["dependencies"][0]["filters"]["exprs"]]
    assert exprs == ["name == 'metaflow.p.a@b.UpstreamFlow.end'", "field == true", "field == 'p'", "field == 'a@b'"]
