"""Every example, and the deployed-flow commands, on the real engine (e2e/cluster).

Each flow is deployed the way users do (`python flow.py argo-workflows create`, or Metaflow's
Deployer API) under a name of its own (`argo-workflows --name`), so tests of other engineers
sharing the cluster never meet these objects; every test deletes what it created. Step pods
ask for little (`METAFLOW_DECOSPECS`, Metaflow's own `--with`): the node has 2 CPUs.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import engine_tools
from clustertools import (DEFAULT_ARGO, ON_EVERY_ARGO, STATE, argo_target, failed_nodes, flow_cmd, kubectl, publish,
                          sensor_subscribed, started_by_event, until, wait_workflow, with_webhook)
from flowtools import EXAMPLES, linear_flow
from test_cluster_e2e import SMALL_GANG, read_run

from mfargo import cron_recheck, transaction
from mfargo.cluster import Cluster, Resource
from mfargo.compiler.constants import Label

pytestmark = pytest.mark.cluster

SMALL_STEPS = "kubernetes:cpu=0.25,memory=300"
RUN_TIMEOUT = 600  # s: the nested_foreach test (13 pods) took up to 314 s at load ~38 on 2 cores
BRIDGE_HOST = "10.77.0.1"  # e2e/layout.py: the host's address on the cluster's bridge, which pods reach


def unique(stem: str) -> str:
    """A Kubernetes name no other test (or engineer) on the shared cluster uses."""
    return "%s-%s" % (stem.replace("_", "-"), secrets.token_hex(3))


def kube_json(env: dict, *args: str) -> dict:
    return json.loads(kubectl(env, "get", *args, "-n", env["METAFLOW_KUBERNETES_NAMESPACE"], "-o", "json"))


def exists(env: dict, kind: str, name: str) -> bool:
    found = kubectl(env, "get", kind, name, "-n", env["METAFLOW_KUBERNETES_NAMESPACE"], "--ignore-not-found",
                    "-o", "name")
    return bool(found.strip())


@contextlib.contextmanager
def deployed(env: dict, flow: Path, name: str, *create_args: str):
    """`argo-workflows --name NAME create ARGS`; on leaving, the runs started and the deployment
    are deleted (`argo-workflows delete`, which removes the CronWorkflow, Sensor, Role...)."""
    runs: list[str] = []
    flow_cmd(env, flow, "argo-workflows", "--name", name, "create", *create_args)
    try:
        yield runs
    finally:
        undeploy(env, flow, runs, "--name", name)


def undeploy(env: dict, flow: Path, runs: list[str], *name_args: str) -> None:
    """Delete the runs' Workflows, then the deployment (`argo-workflows [--name NAME] delete`)."""
    for run_id in runs:
        kubectl(env, "delete", "workflow", run_id.removeprefix("argo-"), "-n", env["METAFLOW_KUBERNETES_NAMESPACE"],
                "--ignore-not-found", "--wait=false")
    subprocess.run([sys.executable, flow.name, "argo-workflows", *name_args, "delete"], cwd=flow.parent, env=env,
                   capture_output=True, timeout=120)


def start(env: dict, flow: Path, name: str, runs: list[str], *params: str) -> str:
    """`argo-workflows --name NAME trigger PARAMS`; the run id, also added to runs (deleted at the end)."""
    id_file = flow.parent / ("run-id-" + secrets.token_hex(3))
    flow_cmd(env, flow, "argo-workflows", "--name", name, "trigger", "--run-id-file", str(id_file), *params)
    runs.append(id_file.read_text().strip())
    return runs[-1]


def succeeded(env: dict, run_id: str) -> dict:
    wf = wait_workflow(env, run_id, timeout=RUN_TIMEOUT)
    assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
    return wf


def hook_nodes(wf: dict) -> dict[str, str]:
    """{hook template: phase} of the workflow-level hooks (spec.hooks) Argo ran."""
    templates = {h["template"] for h in wf["status"]["storedWorkflowTemplateSpec"].get("hooks", {}).values()}
    return {n["templateName"]: n["phase"] for n in wf["status"]["nodes"].values() if n.get("templateName") in templates}


# -- every example -------------------------------------------------------------------------------


def _branches(env, flow, name, runs):
    run_id = start(env, flow, name, runs)
    succeeded(env, run_id)
    got = read_run(env, f"BranchesFlow/{run_id}",
                   "{'ok': run.successful, 'steps': sorted(s.id for s in run), 'total': run.data.total}")
    assert got == {"ok": True, "steps": ["end", "join", "left", "right", "start"], "total": 112}, got


def _nested_foreach(env, flow, name, runs):
    run_id = start(env, flow, name, runs)
    succeeded(env, run_id)
    got = read_run(env, f"NestedForeachFlow/{run_id}",
                   "{'ok': run.successful, 'pairs': run.data.pairs, "
                   "'per_number': sorted(t.data.pair for t in run['per_number'])}")
    pairs = ["a1", "a2", "a3", "b1", "b2", "b3"]
    assert got == {"ok": True, "pairs": pairs, "per_number": pairs}, got


def _switch(env, flow, name, runs):
    big, small = start(env, flow, name, runs, "--size", "20"), start(env, flow, name, runs)
    for run_id, chosen in ((big, "big"), (small, "small")):
        succeeded(env, run_id)
        got = read_run(env, f"SwitchFlow/{run_id}",
                       "{'ok': run.successful, 'steps': sorted(s.id for s in run), 'result': run.data.result, "
                       "'log': run['end'].task.stdout.strip()}")
        assert got == {"ok": True, "steps": sorted(["start", chosen, "merge", "end"]),
                       "result": chosen + " batch", "log": chosen + " batch"}, got


# Argo's cron controller can validate a new CronWorkflow before its WorkflowTemplate informer
# has the template created just before it; it then logs `invalid cron workflow` with this,
# persists nothing, and looks again only on a change: the one `create` makes
# (mfargo.cron_recheck; seen on the loopback cluster's Argo 3.7).
TEMPLATE_NOT_SEEN_YET = "WorkflowTemplate Informer cannot find WorkflowTemplate"


def cron_verdicts(env: dict, name: str) -> list[str]:
    """The workflow-controller's cron controller's verdicts on CronWorkflow ``name``, oldest
    first: "added" when it validated it (Argo's ValidateCronWorkflow, against the deployed
    template) and scheduled it, "invalid" when it found no template (TEMPLATE_NOT_SEEN_YET),
    the log line itself for any other invalid verdict (workflow/cron/controller.go; 3.7 logs
    `CronWorkflow <ns>/<name> added`, 4.x `CronWorkflow added`)."""
    ref = "cronWorkflow=%s/%s" % (env["METAFLOW_KUBERNETES_NAMESPACE"], name)
    out = []
    for ln in (STATE / "logs" / "workflow-controller.log").read_text(errors="replace").splitlines():
        if ln.endswith(ref) or (ref + " ") in ln:
            if "invalid cron workflow" in ln:
                out.append("invalid" if TEMPLATE_NOT_SEEN_YET in ln else ln)
            elif re.search(r'msg="CronWorkflow (\S+ )?added"', ln):
                out.append("added")
    return out


def controller_took_cron(env: dict, name: str) -> bool:
    """The cron controller scheduled the CronWorkflow; an invalid verdict for any reason but
    TEMPLATE_NOT_SEEN_YET fails, and after that one `create`'s own change must have it added."""
    verdicts = cron_verdicts(env, name)
    assert set(verdicts) <= {"invalid", "added"}, verdicts
    return "added" in verdicts


@ON_EVERY_ARGO
def test_a_schedule_the_controller_judged_before_its_template_is_registered_by_creates_recheck(cluster_env):
    # The race forced: the CronWorkflow exists before its template, so the controller's first
    # verdict is "invalid" for want of the template; it keeps nothing and does not look again
    # when the template comes. The change `create` makes afterwards (cron_recheck) registers it.
    env, name = cluster_env, unique("cron-race")
    ns = env["METAFLOW_KUBERNETES_NAMESPACE"]
    cluster = Cluster(ns, kubeconfig=env["KUBECONFIG"])
    schedule = {"schedule": "0 3 * * *"} if argo_target(env) else {"schedules": ["0 3 * * *"]}
    cron = {"apiVersion": "argoproj.io/v1alpha1", "kind": "CronWorkflow", "metadata": {"name": name},
            "spec": {**schedule, "workflowSpec": {"workflowTemplateRef": {"name": name}}}}
    template = {"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate", "metadata": {"name": name},
                "spec": {"entrypoint": "main", "templates": [{"name": "main", "container": {
                    "image": "mfargo-e2e/never-pulled", "command": ["true"]}}]}}

    def write(doc: dict) -> transaction.Done:
        w = transaction.Write(doc["kind"], name, ns, Resource.of(doc), doc, None)
        return transaction.Done(w, "created", cluster.create(w.res, doc, ns))

    try:
        cron_done = write(cron)
        until("the cron controller's verdict on " + name, lambda: cron_verdicts(env, name), timeout=60)
        template_done = write(template)
        time.sleep(2 * cron_recheck.INFORMER_LAG_SECONDS)
        assert cron_verdicts(env, name) == ["invalid"]  # the template alone does not have it looked at again
        said = []
        cron_recheck.recheck(cluster, [template_done, cron_done], lambda text, **k: said.append(text))
        until("the cron controller added " + name, lambda: "added" in cron_verdicts(env, name), timeout=60)
        assert cron_verdicts(env, name) == ["invalid", "added"], said
        live = kube_json(env, "cronworkflow", name)
        assert live["metadata"]["annotations"] == {
            Label.TEMPLATE_CHECKED: template_done.result["metadata"]["resourceVersion"]}
        assert live["spec"] == cron["spec"]
    finally:
        for kind in ("cronworkflow", "workflowtemplate"):
            kubectl(env, "delete", kind, name, "-n", ns, "--ignore-not-found")


def _scheduled(env, flow, name, runs):
    # The CRD is Argo's minimal one (spec not in its schema): the API server stores any spec,
    # so what shows the document is right is Argo's own controller taking it.
    cron = kube_json(env, "cronworkflow", name)
    # Compiled for the cluster's Argo (clustertools.argo_target): 3.7 reads one `schedule`, 4.x a list.
    schedule = {"schedule": "0 3 * * *"} if argo_target(env) else {"schedules": ["0 3 * * *"]}
    assert {k: cron["spec"].get(k) for k in ("schedule", "schedules") if k in cron["spec"]} == schedule, cron["spec"]
    assert cron["spec"]["timezone"] == "Europe/Berlin", cron["spec"]
    assert cron["spec"]["workflowSpec"]["workflowTemplateRef"] == {"name": name}, cron["spec"]
    template = kube_json(env, "workflowtemplate", name)
    assert cron["metadata"]["annotations"][Label.TEMPLATE_CHECKED] == template["metadata"]["resourceVersion"]
    until("the cron controller scheduled " + name, lambda: controller_took_cron(env, name), timeout=60)
    run_id = start(env, flow, name, runs, "--days", "3")
    succeeded(env, run_id)
    got = read_run(env, f"NightlyReportFlow/{run_id}",
                   "{'ok': run.successful, 'window': run['start'].task.data.window, 'log': run['end'].task.stdout.strip()}")
    assert got == {"ok": True, "window": [0, 1, 2], "log": "report over 3 days"}, got


def _triggered(env, flow, name, runs):
    """Argo Events' controller runs the stored Sensor; the event published with Metaflow's
    ArgoEvent starts the run, its payload as the Parameters."""
    sensor = kube_json(env, "sensor", name)
    stored = Path(env["TMP_DIR"]) / "sensor.json"
    stored.write_text(json.dumps(sensor))
    checked = engine_tools.sensor_validate([stored])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    [dep] = sensor["spec"]["dependencies"]
    # Metaflow's convention: one Argo event name (METAFLOW_ARGO_EVENTS_EVENT), the event's own name in a filter
    assert (dep["eventName"], dep["eventSourceName"]) == (env["METAFLOW_ARGO_EVENTS_EVENT"],
                                                          env["METAFLOW_ARGO_EVENTS_EVENT_SOURCE"]), dep
    assert "name == 'data.ready'" in [e["expr"] for e in dep["filters"]["exprs"]], dep
    assert sensor["spec"]["template"]["serviceAccountName"] == env["METAFLOW_ARGO_EVENTS_SERVICE_ACCOUNT"]
    assert sensor["spec"]["eventBusName"] == env["METAFLOW_ARGO_EVENTS_EVENT_BUS"]
    sensor_subscribed(env, name)
    table = unique("orders")  # the event name is the example's: the payload says which test sent it
    publish(with_webhook(env), "data.ready", {"table": table, "rows": 5})
    run_id = started_by_event(env, name, runs)
    succeeded(env, run_id)
    got = read_run(env, f"TriggeredFlow/{run_id}", "{'ok': run.successful, 'log': run['start'].task.stdout.strip(), "
                                                   "'table': run.data.table, 'rows': run.data.min_rows}")
    assert got == {"ok": True, "log": f"table {table} updated (need 5 rows)", "table": table, "rows": 5}, got


EXAMPLE_RUNS = {"branches": _branches, "nested_foreach": _nested_foreach, "switch": _switch,
                "scheduled": _scheduled, "triggered": _triggered}
# Examples whose Argo part differs between releases (nested fan-outs, `when`, the compiled
# CronWorkflow) run on every release; for the others (a DAG's `depends`, a Workflow a Sensor
# submits from the template) the examples above and test_cluster_e2e prove it on every release.
ON_DEFAULT_ARGO_ONLY = {"branches", "triggered"}
EXAMPLE_CASES = [pytest.param(release, example, id=f"argo-{release}-{example}")
                 for release in engine_tools.ARGO_RELEASES for example in sorted(EXAMPLE_RUNS)
                 if release == DEFAULT_ARGO or example not in ON_DEFAULT_ARGO_ONLY]


@pytest.mark.parametrize(("cluster_env", "example"), EXAMPLE_CASES, indirect=["cluster_env"], scope="module")
def test_example_deploys_and_runs(cluster_env, tmp_path, example):
    """create, trigger, then the run read back with Metaflow's client (and, for @schedule and
    @trigger, the CronWorkflow and Sensor as the API server stored them)."""
    flow = tmp_path / (example + ".py")
    flow.write_text((EXAMPLES / flow.name).read_text())
    env = {**cluster_env, "METAFLOW_DECOSPECS": SMALL_STEPS, "TMP_DIR": str(tmp_path)}
    name = unique(example)
    with deployed(env, flow, name) as runs:
        EXAMPLE_RUNS[example](env, flow, name, runs)


# -- @exit_hook ----------------------------------------------------------------------------------

READ_HOOK_LOG = """
import json, os, sys
from metaflow.datastore import FlowDataStore
from metaflow.mflog.mflog import parse
from metaflow.plugins import DATASTORES

storage = [d for d in DATASTORES if d.TYPE == "s3"][0]
store = FlowDataStore("ExitHooksFlow", None, storage_impl=storage, ds_root=os.environ["METAFLOW_DATASTORE_SYSROOT_S3"])
task = store.get_task_datastore(sys.argv[1], "_hook_" + sys.argv[2], "1", 0, mode="r", allow_not_done=True)
[(_, blob)] = task.load_logs(["task"], "stdout")
print(json.dumps([parse(line).msg.decode() for line in blob.splitlines()]))
"""


def hook_output(env: dict, run_id: str, function: str) -> list[str]:
    """What a hook function printed, from the datastore where its pod kept it (core's
    `<flow>/<run>/_hook_<fn>/1`: no task metadata exists for a hook, so not the client's Task)."""
    p = subprocess.run([sys.executable, "-c", READ_HOOK_LOG, run_id, function], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1])


@ON_EVERY_ARGO
def test_exit_hooks_run_on_success_and_on_failure(cluster_env, tmp_path):
    """examples/exit_hooks.py with a Parameter that makes `end` fail: one run of each, at once.
    Argo runs the success hook (only) after the run that succeeds and the error hook (only) after
    the one that fails; each hook function got the finished Run from Metaflow's client."""
    source = (EXAMPLES / "exit_hooks.py").read_text()
    edits = [("import FlowSpec, exit_hook, step", "import FlowSpec, Parameter, exit_hook, step"),
             ("class ExitHooksFlow(FlowSpec):\n",
              "class ExitHooksFlow(FlowSpec):\n    fail = Parameter('fail', default=False, type=bool)\n\n"),
             ("    def end(self):\n        pass",
              "    def end(self):\n        if self.fail:\n            raise RuntimeError('failing on purpose')")]
    for old, new in edits:
        assert old in source, "the example changed: update this test"
        source = source.replace(old, new)
    flow = tmp_path / "exit_hooks.py"
    flow.write_text(source)
    env = {**cluster_env, "METAFLOW_DECOSPECS": SMALL_STEPS}
    name = unique("exit-hooks")
    with deployed(env, flow, name) as runs:
        ok, bad = start(env, flow, name, runs), start(env, flow, name, runs, "--fail", "True")
        ok_wf = succeeded(env, ok)
        bad_wf = wait_workflow(env, bad, timeout=RUN_TIMEOUT)
        assert bad_wf["status"]["phase"] == "Failed", bad_wf["status"].get("message")
        assert hook_nodes(ok_wf) == {"0-on-success-notify": "Succeeded"}, ok_wf["status"]["nodes"]
        assert hook_nodes(bad_wf) == {"0-on-error-page": "Succeeded"}, failed_nodes(bad_wf)
        assert hook_output(env, ok, "notify") == ["run ExitHooksFlow/%s succeeded" % ok]
        assert hook_output(env, bad, "page") == ["run ExitHooksFlow/%s failed" % bad]


# -- --notify-* ----------------------------------------------------------------------------------


@contextlib.contextmanager
def webhook_receiver():
    """An HTTP server on the bridge address (pods reach it) that keeps every JSON body POSTed."""
    bodies: list[dict] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((BRIDGE_HOST, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "http://%s:%d/hook" % (BRIDGE_HOST, server.server_port), bodies
    finally:
        server.shutdown()
        server.server_close()


@ON_EVERY_ARGO
def test_notifications_need_their_secrets_then_notify(cluster_env, tmp_path):
    """examples/notifications.py with its create options (Secrets named for this test): without
    the Secrets `create` refuses in one line and deploys nothing; with them (dummy values, the
    Slack URL a receiver of this test) the run succeeds and the Slack hook posts its message."""
    flow = tmp_path / "notifications.py"
    flow.write_text((EXAMPLES / flow.name).read_text())
    env = {**cluster_env, "METAFLOW_DECOSPECS": SMALL_STEPS}
    name = unique("notifications")
    slack, pager = "slack-" + name, "pagerduty-" + name
    args = (EXAMPLES / "notifications.args").read_text().split()
    assert args[-4:] == ["--notify-slack-webhook-url-secret", "slack-webhook",
                         "--notify-pager-duty-integration-key-secret", "pagerduty"], "the example's options changed"
    args[-3], args[-1] = slack, pager

    refused = subprocess.run([sys.executable, flow.name, "argo-workflows", "--name", name, "create", *args],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    [line] = [ln for ln in refused.stderr.splitlines() if ln.startswith("mfargo:")]
    assert line == ("mfargo: nothing deployed: the cluster lacks what the workflow needs: no Secret default/%s; "
                    "no Secret default/%s" % tuple(sorted([pager, slack]))), refused.stderr
    assert "Traceback" not in refused.stderr and not exists(env, "workflowtemplate", name)

    ns = env["METAFLOW_KUBERNETES_NAMESPACE"]
    with webhook_receiver() as (url, bodies), contextlib.ExitStack() as stack:
        for secret, literal in ((slack, "url=" + url), (pager, "integration-key=dummy-routing-key")):
            kubectl(env, "create", "secret", "generic", secret, "-n", ns, "--from-literal=" + literal)
            stack.callback(kubectl, env, "delete", "secret", secret, "-n", ns, "--ignore-not-found")
        runs = stack.enter_context(deployed(env, flow, name, *args))
        run_id = start(env, flow, name, runs)
        wf = wait_workflow(env, run_id, timeout=RUN_TIMEOUT)
        assert wf["status"]["phase"] == "Succeeded", failed_nodes(wf)
        assert bodies == [{"text": "Metaflow run NotificationsFlow/%s succeeded" % run_id}], bodies
        # PagerDuty's endpoint is unreachable from the cluster (nothing leaves its bridge): that hook
        # fails, and Argo still reports the run Succeeded (a hook's outcome is not the run's).
        assert hook_nodes(wf) == {"0-notify-slack-on-success": "Succeeded",
                                  "0-notify-pager-duty-on-success": "Failed"}, wf["status"]


# -- a gang run as the service account given to create -------------------------------------------


def test_gang_runs_as_the_service_account_given_to_create(cluster_env, tmp_path):
    """`create --service-account X` of the gang example: trigger's Workflow names only the
    template, so the template's serviceAccountName must be X for the resource step to create
    its JobSet (the bundle's RoleBinding binds X; `default` may not create JobSets here)."""
    source = (EXAMPLES / "distributed_training.py").read_text()
    big = '@kubernetes(image="python:3.11", cpu=2, memory=8192, shared_memory=1024, port=29500)'
    assert big in source, "the example's @kubernetes changed: update this test"
    flow = tmp_path / "distributed_training.py"
    flow.write_text(source.replace(big, SMALL_GANG))
    env = {**cluster_env, "METAFLOW_DECOSPECS": SMALL_STEPS}
    name = unique("gang-sa")
    ns = env["METAFLOW_KUBERNETES_NAMESPACE"]
    kubectl(env, "create", "serviceaccount", name, "-n", ns)
    try:
        with deployed(env, flow, name, "--service-account", name) as runs:
            run_id = start(env, flow, name, runs, "--nodes", "2")
            wf = succeeded(env, run_id)
            assert wf["status"]["storedWorkflowTemplateSpec"]["serviceAccountName"] == name
            got = read_run(env, f"DistributedTrainingFlow/{run_id}",
                           "{'ok': run.successful, 'ranks': run['join'].task.data.ranks}")
            assert got == {"ok": True, "ranks": [0, 1]}, got
    finally:
        kubectl(env, "delete", "serviceaccount", name, "-n", ns, "--ignore-not-found")


# -- status, terminate, delete: the CLI and the Deployer API ---------------------------------------

SLEEPER = linear_flow("SleeperFlow", 'print("sleeping")\ntime.sleep(900)', imports="import time")


def assert_stopped(env: dict, run_id: str) -> None:
    """The run's Workflow was terminated (Argo's Terminate shutdown, phase Failed) and none of its
    pods is still running."""
    wf = wait_workflow(env, run_id, timeout=120)
    assert wf["spec"].get("shutdown") == "Terminate" and wf["status"]["phase"] == "Failed", wf["status"]
    name = wf["metadata"]["name"]

    def no_running_pod():
        pods = kube_json(env, "pods", "-l", "workflows.argoproj.io/workflow=" + name)["items"]
        return all(p["status"].get("phase") not in ("Pending", "Running") for p in pods)

    until(f"pods of {name} stopped", no_running_pod, timeout=60)


def test_cli_status_terminate_delete(cluster_env, tmp_path):
    """`argo-workflows status` follows the run (Pending, then Running once Metaflow knows it,
    Failed once terminated), `terminate` stops the Workflow, `delete` removes the template."""
    flow = tmp_path / "sleeper.py"
    flow.write_text(SLEEPER)
    env = {**cluster_env, "METAFLOW_DECOSPECS": SMALL_STEPS}
    name = unique("sleeper-cli")
    with deployed(env, flow, name) as runs:
        run_id = start(env, flow, name, runs)

        def status():
            return flow_cmd(env, flow, "argo-workflows", "--name", name, "status", run_id).stdout.strip()

        seen = [status()]
        assert seen[0] in ("Pending", "Running"), seen
        seen.append(until("status Running", lambda: status() == "Running" and "Running"))
        done = flow_cmd(env, flow, "argo-workflows", "--name", name, "terminate", run_id)
        assert f"Terminated run {run_id}." in done.stdout + done.stderr
        assert_stopped(env, run_id)
        assert status() == "Failed"
        gone = flow_cmd(env, flow, "argo-workflows", "--name", name, "delete")
        assert f"Deleted WorkflowTemplate {name}." in gone.stdout + gone.stderr
        assert not exists(env, "workflowtemplate", name)


DEPLOYER = """
import json, sys, time
from metaflow import Deployer

deployer = Deployer(sys.argv[1], show_output=False).argo_workflows(name=sys.argv[2])
deployed = deployer.create()
out = {"name": deployed.name, "flow": deployed.flow_name}
run = deployed.trigger()
out["pathspec"], statuses = run.pathspec, [run.status]
deadline = time.monotonic() + 120
while statuses[-1] != "Running" and time.monotonic() < deadline:
    time.sleep(1)
    statuses.append(run.status)
out["statuses"] = [s for i, s in enumerate(statuses) if i == 0 or s != statuses[i - 1]]
out["terminated"] = run.terminate()
deadline = time.monotonic() + 120
while run.status == "Running" and time.monotonic() < deadline:
    time.sleep(1)
out["after"] = run.status
out["deleted"] = deployed.delete()
print(json.dumps(out))
"""


def test_deployer_create_trigger_status_terminate_delete(cluster_env, tmp_path):
    """Metaflow's Deployer API on mfargo: `create()`, `trigger()`, the run's `status`,
    `terminate()`, `delete()`, each seen on the cluster."""
    flow = tmp_path / "sleeper.py"
    flow.write_text(SLEEPER)
    env = {**cluster_env, "METAFLOW_DECOSPECS": SMALL_STEPS}
    name = unique("sleeper-deployer")
    p = subprocess.run([sys.executable, "-c", DEPLOYER, flow.name, name], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=400)
    try:
        assert p.returncode == 0, p.stdout + p.stderr
        got = json.loads(p.stdout.splitlines()[-1])
        run_id = got["pathspec"].split("/")[1]
        assert (got["name"], got["flow"], got["pathspec"].split("/")[0]) == (name, "SleeperFlow", "SleeperFlow"), got
        assert got["statuses"] in (["Pending", "Running"], ["Running"]), got
        assert (got["terminated"], got["after"], got["deleted"]) == (True, "Failed", True), got
        assert_stopped(env, run_id)
        assert not exists(env, "workflowtemplate", name)
    finally:
        subprocess.run([sys.executable, flow.name, "argo-workflows", "--name", name, "delete"], cwd=tmp_path, env=env,
                       capture_output=True, timeout=120)
        for wf in kube_json(env, "workflows")["items"]:
            if wf["metadata"]["name"].startswith(name + "-"):
                kubectl(env, "delete", "workflow", wf["metadata"]["name"], "-n", env["METAFLOW_KUBERNETES_NAMESPACE"],
                        "--wait=false")
