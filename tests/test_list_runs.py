"""`python flow.py argo-workflows list-runs` and the Deployer's `list_runs()` against the loopback
fake Kubernetes API: which Workflows are a deployment's runs (found by the labels Argo, Argo
Events and `trigger` put on them), their order, columns and trigger kinds, the filters, paging,
and one-line errors. Assertions are on the parsed output (the JSON, the table split in columns)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pytest
from flowtools import clean_env
from k8s_fake import TOKEN, kube  # noqa: F401 - fixture
from test_cluster_cli import FLOW, TOP, Env, one_line_error
from test_cluster_deployer import deployer_env  # noqa: F401 - fixture

from mfargo import runs
from mfargo.compiler.constants import Label

TEMPLATE = "helloflow"
COLUMNS = ["RUN_ID", "STATUS", "STARTED_AT", "DURATION", "TRIGGER"]


@pytest.fixture
def env(kube, tmp_path):  # noqa: F811
    """HelloFlow deployed as `helloflow` in ns1 (the template seeded: no compile needed)."""
    deploy_template(kube, TEMPLATE)
    return Env(kube, tmp_path)


def deploy_template(kube, name: str) -> None:  # noqa: F811
    kube.put({"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate",
              "metadata": {"name": name, "annotations": {"metaflow/flow_name": "HelloFlow", "metaflow/owner": "alice",
                                                         "metaflow/parameters": "{}"}},
              "spec": {}}, namespace="ns1")


def put_run(kube, name: str, created: str, phase: str | None = None, started: str | None = None,  # noqa: F811
            finished: str | None = None, labels: dict | None = None, params: dict | None = None,
            annotations: dict | None = None, template: str = TEMPLATE) -> None:
    """A Workflow of ``template`` as Argo keeps it; labelled as `trigger` labels it unless ``labels``."""
    status = {k: v for k, v in (("phase", phase), ("startedAt", started), ("finishedAt", finished)) if v}
    spec: dict = {"workflowTemplateRef": {"name": template}}
    if params is not None:
        spec["arguments"] = {"parameters": [{"name": k, "value": v} for k, v in params.items()]}
    kube.put({"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
              "metadata": {"name": name, "creationTimestamp": created,
                           "labels": {Label.WORKFLOW_TEMPLATE: template} if labels is None else labels,
                           "annotations": annotations or {}},
              "spec": spec, "status": status}, namespace="ns1")


def listed(env: Env, *args: str, as_table: bool = False) -> list[dict]:
    """`list-runs --json ARGS`, parsed; with ``as_table``, the table of the same listing is
    checked to show the same."""
    got = json.loads(env.run("list-runs", "--json", *args).stdout)
    if as_table:
        assert table(env.run("list-runs", *args).stdout) == [
            {"RUN_ID": r["run_id"], "STATUS": r["status"], "STARTED_AT": r["started_at"] or "-",
             "DURATION": r["duration"] or "-", "TRIGGER": r["trigger"]} for r in got]
    return got


def table(stdout: str) -> list[dict]:
    """The table's rows as {column: cell}: a header line, then one line of five cells per run."""
    lines = stdout.splitlines()
    if not lines:
        return []
    assert lines[0].split() == COLUMNS, stdout
    rows = [line.split() for line in lines[1:]]
    assert all(len(cells) == len(COLUMNS) for cells in rows), stdout
    return [dict(zip(COLUMNS, cells)) for cells in rows]


def ids(found: list[dict]) -> list[str]:
    return [r["run_id"] for r in found]


# -- what is listed, in which order, with which columns -----------------------------------------


def test_runs_newest_first_with_their_status_times_and_trigger(env, kube):  # noqa: F811
    # As Argo < 4.1 leaves them: `trigger`'s runs carry the template label (mfargo puts it on),
    # the CronWorkflow's and the Sensor's only their own labels.
    put_run(kube, "helloflow-manual", "2024-05-01T10:00:00Z", "Succeeded", "2024-05-01T10:00:02Z",
            "2024-05-01T10:01:07Z")
    put_run(kube, "helloflow-cron1", "2024-05-01T11:00:00Z", "Failed", "2024-05-01T11:00:01Z", "2024-05-01T13:04:06Z",
            labels={Label.CRON_WORKFLOW: TEMPLATE})
    put_run(kube, "helloflow-event", "2024-05-01T12:00:00Z", "Error", "2024-05-01T12:00:03Z", "2024-05-01T12:00:45Z",
            labels={Label.SENSOR_TRIGGER: TEMPLATE, Label.SENSOR: TEMPLATE},
            annotations={"metaflow/triggered_by": '[{"name": "go", "type": "event"}]'})
    put_run(kube, "helloflow-resumed", "2024-05-01T13:00:00Z", "Succeeded", "2024-05-01T13:00:01Z",
            "2024-05-01T13:00:10Z", params={"who": "x", "mfargo-origin-run-id": "argo-helloflow-manual",
                                            "mfargo-resume-step": ""})
    put_run(kube, "helloflow-queued", "2024-05-01T14:00:00Z")  # not picked up by Argo's controller yet
    # Argo 4.1+ labels every run of the template, whoever made it: found once, not twice.
    put_run(kube, "helloflow-cron2", "2024-05-01T09:00:00Z", "Succeeded", "2024-05-01T09:00:00Z",
            "2024-05-01T09:00:42Z", labels={Label.CRON_WORKFLOW: TEMPLATE, Label.WORKFLOW_TEMPLATE: TEMPLATE},
            params={"mfargo-origin-run-id": ""})
    # Not this deployment's: another template's run, and a run of another template by a
    # CronWorkflow (someone else's) that happens to have the name.
    put_run(kube, "other-abcde", "2024-05-01T15:00:00Z", "Running", "2024-05-01T15:00:00Z", template="other")
    put_run(kube, "elsewhere-x", "2024-05-01T15:00:00Z", "Running", "2024-05-01T15:00:00Z",
            labels={Label.CRON_WORKFLOW: TEMPLATE}, template="elsewhere")

    got = listed(env, as_table=True)
    assert got == [
        {"run_id": "argo-helloflow-queued", "status": "Pending", "started_at": None, "finished_at": None,
         "duration": None, "duration_seconds": None, "trigger": "manual"},
        {"run_id": "argo-helloflow-resumed", "status": "Succeeded", "started_at": "2024-05-01T13:00:01Z",
         "finished_at": "2024-05-01T13:00:10Z", "duration": "9s", "duration_seconds": 9, "trigger": "resume"},
        {"run_id": "argo-helloflow-event", "status": "Error", "started_at": "2024-05-01T12:00:03Z",
         "finished_at": "2024-05-01T12:00:45Z", "duration": "42s", "duration_seconds": 42, "trigger": "event"},
        {"run_id": "argo-helloflow-cron1", "status": "Failed", "started_at": "2024-05-01T11:00:01Z",
         "finished_at": "2024-05-01T13:04:06Z", "duration": "2h04m05s", "duration_seconds": 7445,
         "trigger": "schedule"},
        {"run_id": "argo-helloflow-manual", "status": "Succeeded", "started_at": "2024-05-01T10:00:02Z",
         "finished_at": "2024-05-01T10:01:07Z", "duration": "1m05s", "duration_seconds": 65, "trigger": "manual"},
        {"run_id": "argo-helloflow-cron2", "status": "Succeeded", "started_at": "2024-05-01T09:00:00Z",
         "finished_at": "2024-05-01T09:00:42Z", "duration": "42s", "duration_seconds": 42, "trigger": "schedule"},
    ]


def test_a_running_runs_duration_is_the_time_so_far(env, kube):  # noqa: F811
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    started = now - dt.timedelta(minutes=3, seconds=20)
    put_run(kube, "helloflow-going", started.strftime("%Y-%m-%dT%H:%M:%SZ"), "Running",
            started.strftime("%Y-%m-%dT%H:%M:%SZ"))
    [run] = json.loads(env.run("list-runs", "--json").stdout)
    [row] = table(env.run("list-runs").stdout)  # listed later: a little longer
    # 200 s when listed, plus however long the listing took to start (bounded by the test).
    assert (run["status"], run["finished_at"], run["started_at"]) == ("Running", None,
                                                                      started.strftime("%Y-%m-%dT%H:%M:%SZ"))
    assert 200 <= run["duration_seconds"] <= 200 + 120
    assert run["duration"] == runs.format_duration(run["duration_seconds"])
    minutes, seconds = row["DURATION"].rstrip("s").split("m")
    assert run["duration_seconds"] <= int(minutes) * 60 + int(seconds) <= 200 + 120
    assert (row["STATUS"], row["STARTED_AT"]) == ("Running", run["started_at"])


def test_trigger_labels_its_run_so_that_it_is_listed(env, kube):  # noqa: F811
    env.run("trigger", "--who", "bob")
    [post] = kube.calls("POST", "workflows")
    assert post.body["metadata"]["labels"] == {Label.WORKFLOW_TEMPLATE: TEMPLATE}
    [name] = [k[4] for k in kube.objects if k[3] == "workflows"]
    assert [(r["run_id"], r["status"], r["trigger"]) for r in listed(env)] == [("argo-" + name, "Pending", "manual")]


# -- filters, limit, paging ------------------------------------------------------------------------


def test_status_filters_and_limit(env, kube):  # noqa: F811
    phases = ["Succeeded", "Failed", "Error", "Running", "Failed", "Succeeded"]
    for i, phase in enumerate(phases):
        put_run(kube, "helloflow-r%d" % i, "2024-05-01T10:0%d:00Z" % i, phase, "2024-05-01T10:0%d:00Z" % i,
                None if phase == "Running" else "2024-05-01T10:0%d:30Z" % i)
    assert [(r["run_id"], r["status"]) for r in listed(env, "--status", "Failed", as_table=True)] == [
        ("argo-helloflow-r4", "Failed"), ("argo-helloflow-r1", "Failed")]
    # Repeated, any case; Error is Argo's own phase, not folded into Failed.
    assert ids(listed(env, "--status", "failed", "--status", "ERROR")) == [
        "argo-helloflow-r4", "argo-helloflow-r2", "argo-helloflow-r1"]
    assert ids(listed(env, "--limit", "2")) == ["argo-helloflow-r5", "argo-helloflow-r4"]
    assert ids(listed(env, "--status", "Succeeded", "--limit", "1")) == ["argo-helloflow-r5"]  # filtered, then cut
    assert listed(env, "--status", "Pending") == []

    kube.reset_log()
    assert one_line_error(env.run("list-runs", "--status", "Done", check=False)) == (
        "mfargo: --status 'Done': give one of Pending, Running, Succeeded, Failed, Error")
    assert one_line_error(env.run("list-runs", "--limit", "0", check=False)) == (
        "mfargo: --limit 0: give a number of runs, 1 or more")
    assert kube.requests == []  # refused before asking the cluster


def test_runs_over_several_pages_are_all_read_before_sorting(env, kube):  # noqa: F811
    start = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
    for i in range(230):  # names sort (as the API pages them) in another order than their times
        created = (start + dt.timedelta(minutes=(i * 37) % 230)).strftime("%Y-%m-%dT%H:%M:%SZ")
        put_run(kube, "helloflow-%03d" % i, created, "Succeeded", created)
    put_run(kube, "helloflow-cron", "2024-06-01T00:00:00Z", "Running", "2024-06-01T00:00:00Z",
            labels={Label.CRON_WORKFLOW: TEMPLATE})
    kube.reset_log()
    got = json.loads(env.run("list-runs", "--json", "--limit", "1000").stdout)
    expected = sorted(("helloflow-%03d" % i for i in range(230)), key=lambda n: (int(n[-3:]) * 37) % 230,
                      reverse=True)
    assert ids(got) == ["argo-helloflow-cron"] + ["argo-" + n for n in expected]
    selector = "%s=%s" % (Label.WORKFLOW_TEMPLATE, TEMPLATE)
    assert [r.query for r in kube.calls("GET", "workflows")] == [
        {"labelSelector": selector, "limit": "100"},
        {"labelSelector": selector, "limit": "100", "continue": "100"},
        {"labelSelector": selector, "limit": "100", "continue": "200"},
        {"labelSelector": "%s=%s" % (Label.CRON_WORKFLOW, TEMPLATE), "limit": "100"},
        {"labelSelector": "%s=%s" % (Label.SENSOR_TRIGGER, TEMPLATE), "limit": "100"},
    ]
    assert ids(json.loads(env.run("list-runs", "--json").stdout)) == ids(got)[:100]  # the default limit


def test_no_runs_prints_nothing(env, kube):  # noqa: F811
    put_run(kube, "other-abcde", "2024-05-01T15:00:00Z", "Running", template="other")
    proc = env.run("list-runs")
    assert (proc.returncode, proc.stdout) == (0, "")
    assert json.loads(env.run("list-runs", "--json").stdout) == []


def test_branch_lists_its_own_deployment(kube, tmp_path):  # noqa: F811
    """With @project, Metaflow's --branch / --production name the template, as for `trigger`."""
    source = FLOW.replace("from metaflow import", "from metaflow import project,").replace(
        "class HelloFlow", '@project(name="proj")\nclass HelloFlow')
    env = Env(kube, tmp_path, source)
    for template in ("proj.test.b1.helloflow", "proj.prod.helloflow"):
        deploy_template(kube, template)
        put_run(kube, template + "-abcde", "2024-05-01T15:00:00Z", "Running", "2024-05-01T15:00:00Z",
                template=template)

    def listed_with(*top: str) -> list[str]:
        """`python flow.py [TOP] argo-workflows list-runs --json` (Metaflow's options go before the group)."""
        e = clean_env(home=env.home, USER="alice", KUBECONFIG=str(env.kubeconfig), METAFLOW_KUBERNETES_NAMESPACE="ns1")
        e.pop("KUBERNETES_SERVICE_HOST", None)
        proc = subprocess.run([sys.executable, "flow.py", *TOP, *top, "argo-workflows", "list-runs", "--json"],
                              cwd=tmp_path, env=e, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return ids(json.loads(proc.stdout))

    assert listed_with("--branch", "b1") == ["argo-proj.test.b1.helloflow-abcde"]
    assert listed_with("--production") == ["argo-proj.prod.helloflow-abcde"]


# -- errors ------------------------------------------------------------------------------------------


def test_errors_are_one_line(env, kube, tmp_path):  # noqa: F811
    forbidden = ('workflows.argoproj.io is forbidden: User "alice" cannot list resource "workflows" in API group '
                 '"argoproj.io" in the namespace "ns1"')
    kube.fail("GET", "/workflows$", 403, forbidden)
    proc = env.run("list-runs", check=False)
    assert one_line_error(proc) == "mfargo: list workflows: forbidden (403) from the API server at %s: %s" % (
        kube.url, forbidden)
    assert TOKEN not in proc.stderr + proc.stdout and proc.stdout == ""

    # A failure on a later page (the first answered): one line too, nothing half printed.
    for i in range(150):
        put_run(kube, "helloflow-%03d" % i, "2024-05-01T10:00:00Z", "Succeeded")
    kube.fail("GET", "/workflows$", 500, "etcd is sad", after=1)
    proc = env.run("list-runs", "--json", check=False)
    assert one_line_error(proc) == (
        "mfargo: list workflows: Kubernetes API error 500 from the API server at %s: etcd is sad" % kube.url)
    assert proc.stdout == ""

    kube.objects.pop(("argoproj.io", "v1alpha1", "ns1", "workflowtemplates", TEMPLATE))
    assert one_line_error(env.run("list-runs", check=False)) == (
        "mfargo: workflow helloflow is not deployed in namespace ns1: run `argo-workflows create` first")

    env.kubeconfig = tmp_path / "missing"
    line = one_line_error(env.run("list-runs", check=False))
    assert line.startswith("mfargo: no Kubernetes configuration: ")


# -- the Deployer API --------------------------------------------------------------------------------


def test_deployer_list_runs_goes_through_the_command(deployer_env, kube):  # noqa: F811
    from mfargo.metaflow_cli.deployer_objects import MfargoDeployedFlow, MfargoTriggeredRun

    deploy_template(kube, TEMPLATE)
    put_run(kube, "helloflow-old", "2024-05-01T10:00:00Z", "Failed", "2024-05-01T10:00:00Z", "2024-05-01T10:00:09Z")
    put_run(kube, "helloflow-new", "2024-05-01T11:00:00Z", "Succeeded", "2024-05-01T11:00:00Z", "2024-05-01T11:00:09Z")
    put_run(kube, "helloflow-mid", "2024-05-01T10:30:00Z", "Failed", "2024-05-01T10:30:00Z", "2024-05-01T10:30:09Z")
    deployed = MfargoDeployedFlow.from_deployment(TEMPLATE)
    kube.reset_log()

    found = deployed.list_runs()
    assert all(isinstance(r, MfargoTriggeredRun) for r in found)
    assert [(r.pathspec, r.name) for r in found] == [
        ("HelloFlow/argo-helloflow-" + n, "argo-helloflow-" + n) for n in ("new", "mid", "old")]
    assert {r.metadata_for_flow for r in found} == {"local@%s" % deployer_env}  # the command's, as trigger()'s
    # It asked the cluster through `argo-workflows list-runs` (the label lists), not on its own.
    assert [r.query["labelSelector"].split("=")[0] for r in kube.calls("GET", "workflows")] == [
        Label.WORKFLOW_TEMPLATE, Label.CRON_WORKFLOW, Label.SENSOR_TRIGGER]

    assert [r.pathspec for r in deployed.list_runs(status="Failed", limit=1)] == ["HelloFlow/argo-helloflow-mid"]
    assert [r.pathspec for r in deployed.list_runs(status=["Succeeded", "Failed"], limit=5)] == [
        "HelloFlow/argo-helloflow-" + n for n in ("new", "mid", "old")]
    assert found[0].status == "Succeeded"  # a listed run is a run like trigger()'s
    with pytest.raises(RuntimeError, match="mfargo: --status 'Done': give one of Pending, Running"):
        deployed.list_runs(status="Done")  # Metaflow's error for a failed command, with its one line


# -- the formats ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seconds,text", [(0, "0s"), (59, "59s"), (60, "1m00s"), (65, "1m05s"), (3600, "1h00m00s"),
                                          (93784, "26h03m04s")])
def test_durations(seconds, text):
    assert runs.format_duration(seconds) == text
