"""`create` against the loopback fake Kubernetes API (and a slow-drip server written here):
deploys all or nothing (a failure part-way restores what was there, or says object by object
what it left and how to undo it), another flow's/branch's objects not replaced unless
`--replace-other`, every API call within a total deadline, no credential in any message."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from pathlib import Path

import pytest
from k8s_fake import TOKEN, kube  # noqa: F401 - fixture
from test_cluster_cli import FLOW, Env, one_line_error

from mfargo import api_guard, cron_recheck, deploy, owners, transaction
from mfargo import cluster as cluster_mod
from mfargo.api_guard import server_of, without_credentials
from mfargo.cluster import Cluster, ClusterError
from mfargo.base.errors import UserError
from mfargo.compiler.constants import Label

BUNDLE_FLOW = FLOW.replace("from metaflow import", "from metaflow import schedule, trigger,").replace(
    "class HelloFlow", '@schedule(hourly=True)\n@trigger(event="data.ready")\nclass HelloFlow')
PROJECT_FLOW = FLOW.replace("from metaflow import", "from metaflow import project,").replace(
    "class HelloFlow", '@project(name="shop")\nclass HelloFlow')
FORBIDDEN = 'sensors.argoproj.io "helloflow" is forbidden: User "alice" cannot update resource "sensors"'
KINDS = ("workflowtemplates", "cronworkflows", "sensors")


def bundle_env(kube, tmp_path) -> Env:  # noqa: F811
    """A flow whose bundle is a WorkflowTemplate, a CronWorkflow and a Sensor, and what the Sensor needs."""
    kube.put({"apiVersion": "argoproj.io/v1alpha1", "kind": "EventBus", "metadata": {"name": "default"}},
             plural="eventbus", namespace="ns1")
    kube.put({"apiVersion": "argoproj.io/v1alpha1", "kind": "EventSource",
              "metadata": {"name": "argo-events-webhook"}}, namespace="ns1")
    kube.put_service_account("operate-workflow-sa", "ns1")
    return Env(kube, tmp_path, BUNDLE_FLOW)


def state(kube) -> dict:  # noqa: F811
    """The bundle's objects as stored, without the version the API server bumps on every write."""
    out = {}
    for plural in KINDS:
        for name in kube.names(plural, "ns1"):
            obj = json.loads(json.dumps(kube.get(plural, name, "ns1")))
            obj["metadata"].pop("resourceVersion")
            out[plural, name] = obj
    return out


def writes(kube) -> list[tuple[str, str]]:  # noqa: F811
    return [(r.method, r.plural) for r in kube.requests if r.method != "GET"]


# -- all or nothing ------------------------------------------------------------------------------


def test_a_403_part_way_through_a_redeploy_restores_the_previous_objects(kube, tmp_path):  # noqa: F811
    env = bundle_env(kube, tmp_path)
    env.create()
    before = state(kube)
    assert set(before) == {(k, "helloflow") for k in KINDS}
    kube.reset_log()
    kube.fail("PUT", "/sensors/helloflow$", 403, FORBIDDEN)
    line = one_line_error(env.create("--max-workers", "7", check=False))
    assert line == (
        "mfargo: deploy of helloflow failed, nothing changed: replace sensors helloflow: forbidden (403) from the "
        "API server at %s: %s; undone: CronWorkflow ns1/helloflow: previous version restored, WorkflowTemplate "
        "ns1/helloflow: previous version restored" % (kube.url, FORBIDDEN))
    assert state(kube) == before  # parallelism 100 again, the same schedule, the same sensor
    # What starts runs is written last and undone first.
    assert writes(kube) == [("PUT", "workflowtemplates"), ("PUT", "cronworkflows"), ("PUT", "sensors"),
                            ("PUT", "cronworkflows"), ("PUT", "workflowtemplates")]


def test_a_403_part_way_through_a_first_deploy_leaves_nothing(kube, tmp_path):  # noqa: F811
    env = bundle_env(kube, tmp_path)
    kube.fail("POST", "/sensors$", 403, FORBIDDEN)
    line = one_line_error(env.create(check=False))
    assert line.startswith("mfargo: deploy of helloflow failed, nothing changed: create sensors helloflow: "
                           "forbidden (403) from the API server at %s: " % kube.url)
    assert line.endswith("; undone: CronWorkflow ns1/helloflow: deleted, WorkflowTemplate ns1/helloflow: deleted")
    assert state(kube) == {}
    assert env.stored_token() is None  # not deployed: no token cached
    assert writes(kube) == [("POST", "workflowtemplates"), ("POST", "cronworkflows"), ("POST", "sensors"),
                            ("DELETE", "cronworkflows"), ("DELETE", "workflowtemplates")]


def test_a_first_deploy_has_argos_cron_controller_check_its_schedule_again(kube, tmp_path):  # noqa: F811
    # Argo's cron controller may validate a new CronWorkflow before its informer holds the
    # template created just before; only a change has it look again (mfargo.cron_recheck).
    env = bundle_env(kube, tmp_path)
    proc = env.create()
    assert writes(kube) == [("POST", "workflowtemplates"), ("POST", "cronworkflows"), ("POST", "sensors"),
                            ("PUT", "cronworkflows")]
    template, cron = kube.get("workflowtemplates", "helloflow", "ns1"), kube.get("cronworkflows", "helloflow", "ns1")
    assert cron["metadata"]["annotations"][Label.TEMPLATE_CHECKED] == template["metadata"]["resourceVersion"]
    put = kube.calls("PUT", "cronworkflows")[0].body
    assert put["spec"] == kube.calls("POST", "cronworkflows")[0].body["spec"]  # the schedule as deployed
    assert ("Waiting %g s for Argo's cron controller to see WorkflowTemplate helloflow"
            % cron_recheck.INFORMER_LAG_SECONDS) in proc.stderr + proc.stdout
    kube.reset_log()
    env.create()  # the template is replaced, not created: Argo's informer had it
    assert writes(kube) == [("PUT", "workflowtemplates"), ("PUT", "cronworkflows"), ("PUT", "sensors")]
    assert Label.TEMPLATE_CHECKED not in (kube.get("cronworkflows", "helloflow", "ns1")["metadata"].get("annotations")
                                          or {})


class RecheckCluster:
    """Answers the recheck's one write as told."""

    def __init__(self, error: ClusterError | None = None):
        self.error, self.replaced = error, []

    def replace(self, res, name, body, namespace=None):
        self.replaced.append((name, namespace, body))
        if self.error:
            raise self.error
        return body


def recheck_done(template_action: str = "created", with_cron: bool = True) -> list[transaction.Done]:
    def done(kind, action):
        w = transaction.Write(kind, "f", "ns1", cluster_mod.Resource.of({"apiVersion": "argoproj.io/v1alpha1",
                                                                         "kind": kind}), {}, None)
        return transaction.Done(w, action, {"kind": kind, "metadata": {"name": "f", "resourceVersion": "7"}})
    return [done("WorkflowTemplate", template_action)] + ([done("CronWorkflow", "created")] if with_cron else [])


@pytest.mark.parametrize("done", [recheck_done("replaced"), recheck_done(with_cron=False)], ids=["replaced", "no-cron"])
def test_no_recheck_without_a_new_template_and_a_schedule(done):
    cluster, waits = RecheckCluster(), []
    cron_recheck.recheck(cluster, done, lambda *a, **k: None, sleep=waits.append)
    assert cluster.replaced == [] and waits == []


@pytest.mark.parametrize("status, warned", [(409, False), (403, True), (None, True)])
def test_a_recheck_that_cannot_write_warns_unless_the_cron_workflow_changed_anyway(status, warned):
    cluster, said, waits = RecheckCluster(ClusterError("replace cronworkflows f: nope", status=status)), [], []
    cron_recheck.recheck(cluster, recheck_done(), lambda text, **k: said.append(text), sleep=waits.append)
    assert waits == [cron_recheck.INFORMER_LAG_SECONDS]
    assert [(n, ns, b["metadata"]["annotations"]) for n, ns, b in cluster.replaced] == [
        ("f", "ns1", {Label.TEMPLATE_CHECKED: "7"})]
    warnings = [s for s in said if s.startswith("mfargo: warning")]
    assert warnings == ([
        "mfargo: warning: could not have Argo check CronWorkflow f again (replace cronworkflows f: nope): if its "
        "controller missed the template, the schedule starts within 20 minutes, at the controller's resync"]
        if warned else [])


def test_a_failed_rollback_says_what_is_left_object_by_object_and_how_to_undo_it(kube, tmp_path):  # noqa: F811
    env = bundle_env(kube, tmp_path)
    env.create()
    before = state(kube)
    kube.fail("PUT", "/sensors/helloflow$", 403, FORBIDDEN)
    kube.fail("PUT", "/cronworkflows/helloflow$", 403, "no updates for you", after=1)  # the restore fails
    line = one_line_error(env.create("--max-workers", "7", check=False))
    m = re.fullmatch(
        r"mfargo: deploy of helloflow failed: replace sensors helloflow: forbidden \(403\) from the API server at "
        r"(?P<server>\S+): .*; undoing it failed too, so the namespace holds a mix\. Left: CronWorkflow ns1/helloflow "
        r"is the new version \(restoring the previous one failed: replace cronworkflows helloflow: forbidden \(403\) "
        r"from the API server at \S+: no updates for you\); undo: `kubectl replace --force -f (?P<path>\S+)`\. "
        r"Undone: WorkflowTemplate ns1/helloflow: previous version restored\. Everything else is as before the "
        r"deploy\. To finish the deploy, fix the cause and rerun `argo-workflows create`; to undo it, run the "
        r"command given for each object left\.", line)
    assert m, line
    assert m["server"] == kube.url
    assert state(kube)["workflowtemplates", "helloflow"] == before["workflowtemplates", "helloflow"]
    saved = json.loads(Path(m["path"]).read_text())  # the previous CronWorkflow, as kubectl takes it
    assert "resourceVersion" not in saved["metadata"]
    expected = json.loads(json.dumps(before["cronworkflows", "helloflow"]))
    for key in transaction.SERVER_FIELDS:
        expected["metadata"].pop(key, None)
    assert saved == expected

    # A first deploy whose CronWorkflow cannot be deleted again: the command that deletes it.
    kube.objects.clear()
    (tmp_path / "second").mkdir()
    env2 = bundle_env(kube, tmp_path / "second")
    kube.fail("POST", "/sensors$", 403, FORBIDDEN)
    kube.fail("DELETE", "/cronworkflows/helloflow$", 403, "no deletes for you")
    line = one_line_error(env2.create(check=False))
    assert ("Left: CronWorkflow ns1/helloflow created by this deploy is still there (deleting it failed: delete "
            "cronworkflows helloflow: forbidden (403) from the API server at %s: no deletes for you); undo: `kubectl "
            "delete -n ns1 cronworkflows.argoproj.io helloflow`. Undone: WorkflowTemplate ns1/helloflow: deleted."
            % kube.url) in line
    assert sorted(state(kube)) == [("cronworkflows", "helloflow")]


def test_a_write_that_got_no_answer_in_time_is_read_back_and_undone(kube, tmp_path):  # noqa: F811
    env = bundle_env(kube, tmp_path)
    kube.stall("POST", "/sensors$", 8)  # the Sensor is created, but answered after the deadline
    line = one_line_error(env.create(check=False, MFARGO_API_DEADLINE="3"))
    assert line.startswith("mfargo: deploy of helloflow failed, nothing changed: create sensors helloflow: no "
                           "complete answer from the Kubernetes API at %s within 3 s" % kube.url), line
    assert line.endswith("; undone: Sensor ns1/helloflow: deleted, CronWorkflow ns1/helloflow: deleted, "
                         "WorkflowTemplate ns1/helloflow: deleted"), line
    assert state(kube) == {}


def test_stale_objects_are_deleted_before_the_new_starters_and_recreated_on_a_failure(kube, tmp_path):  # noqa: F811
    env = bundle_env(kube, tmp_path)
    env.create()
    before = state(kube)
    (tmp_path / "flow.py").write_text(FLOW)  # the schedule and the trigger removed from the flow
    kube.reset_log()
    kube.fail("PUT", "/workflowtemplates/helloflow$", 403, "no", after=0)
    one_line_error(env.create(check=False))
    assert state(kube) == before and writes(kube) == [("PUT", "workflowtemplates")]  # failed first: nothing to undo
    kube.reset_log()
    kube.fail("DELETE", "/sensors/helloflow$", 403, "no deletes")
    line = one_line_error(env.create(check=False))
    assert line.endswith("; undone: CronWorkflow ns1/helloflow: re-created, WorkflowTemplate ns1/helloflow: previous "
                         "version restored")
    assert writes(kube) == [("PUT", "workflowtemplates"), ("DELETE", "cronworkflows"), ("DELETE", "sensors"),
                            ("POST", "cronworkflows"), ("PUT", "workflowtemplates")]
    after = state(kube)
    assert after["workflowtemplates", "helloflow"] == before["workflowtemplates", "helloflow"]
    assert after["cronworkflows", "helloflow"]["spec"] == before["cronworkflows", "helloflow"]["spec"]
    env.create()
    assert sorted(state(kube)) == [("workflowtemplates", "helloflow")]


# -- whose objects ---------------------------------------------------------------------------------


def test_another_flows_template_is_refused_unless_replace_other(kube, tmp_path):  # noqa: F811
    env = Env(kube, tmp_path)
    kube.put({"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate",
              "metadata": {"name": "helloflow", "annotations": {
                  "metaflow/flow_name": "OtherFlow", "metaflow/owner": "alice",
                  "metaflow/production_token": "other-token"}}, "spec": {"entrypoint": "x"}}, namespace="ns1")
    line = one_line_error(env.create(check=False))
    assert line == ("mfargo: nothing deployed: WorkflowTemplate helloflow in namespace ns1 belongs to flow OtherFlow, "
                    "not to this flow HelloFlow; pass `create --replace-other` to replace it")
    assert {r.method for r in kube.requests} == {"GET"}
    env.create("--replace-other")
    ann = kube.get("workflowtemplates", "helloflow", "ns1")["metadata"]["annotations"]
    assert ann["metaflow/flow_name"] == "HelloFlow"
    # Its own token: the replaced deployment's production namespace is not inherited.
    assert ann["metaflow/production_token"] != "other-token" and ann["metaflow/production_token"] == env.stored_token()
    env.create()  # now it is this flow's: redeploying needs no option


def test_another_branchs_template_is_refused_naming_both_owners(kube, tmp_path):  # noqa: F811
    import yaml

    env = Env(kube, tmp_path, PROJECT_FLOW)
    [doc] = yaml.safe_load_all(env.create("--only-yaml").stdout)
    name = doc["metadata"]["name"]
    kube.put({"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate",
              "metadata": {"name": name, "annotations": {
                  "metaflow/flow_name": "HelloFlow", "metaflow/project_name": "shop",
                  "metaflow/branch_name": "test.other", "metaflow/owner": "alice"}}, "spec": {}}, namespace="ns1")
    line = one_line_error(env.create(check=False))
    assert line == ("mfargo: nothing deployed: WorkflowTemplate %s in namespace ns1 belongs to flow HelloFlow "
                    "(@project shop, branch test.other), not to this flow HelloFlow (@project shop, branch user.alice); "
                    "pass `create --replace-other` to replace it" % name)
    env.create("--replace-other")
    assert kube.get("workflowtemplates", name, "ns1")["metadata"]["annotations"]["metaflow/branch_name"] == "user.alice"


@pytest.fixture
def target(kube, tmp_path):  # noqa: F811
    cluster = Cluster("ns1", kubeconfig=str(kube.kubeconfig(tmp_path / "kubeconfig")))
    return deploy.Target("HelloFlow", "helloflow", "helloflow", "ns1", _cluster=cluster)


def bundle_docs() -> list[dict]:
    meta = {"name": "helloflow", "namespace": "ns1"}
    return [{"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate", "metadata": dict(meta),
             "spec": {"entrypoint": "x"}},
            {"apiVersion": "argoproj.io/v1alpha1", "kind": "CronWorkflow", "metadata": dict(meta), "spec": {}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": "helloflow-jobset", "namespace": "ns1"}, "rules": []}]


def test_every_object_of_a_deploy_names_its_owner_and_another_owners_is_not_touched(kube, target):  # noqa: F811
    docs = bundle_docs()
    deploy.stamp_deployment(target, docs, "tok", {})
    assert [d["metadata"]["annotations"]["metaflow/flow_name"] for d in docs] == ["HelloFlow"] * 3
    kube.put({"apiVersion": "argoproj.io/v1alpha1", "kind": "CronWorkflow",
              "metadata": {"name": "helloflow", "annotations": {"metaflow/flow_name": "OtherFlow"}}}, namespace="ns1")
    with pytest.raises(owners.OwnerConflict, match="^nothing deployed: CronWorkflow helloflow in namespace ns1 belongs "
                                                 "to flow OtherFlow, not to this flow HelloFlow"):
        transaction.plan(target.cluster, docs, [], "ns1", lambda kind, obj: deploy.check_owner(target, kind, obj))
    assert {r.method for r in kube.requests} == {"GET"}
    target.replace_other = True
    steps = transaction.plan(target.cluster, docs, [], "ns1", lambda kind, obj: deploy.check_owner(target, kind, obj))
    assert [(s.kind, s.previous is not None) for s in steps] == [
        ("WorkflowTemplate", False), ("Role", False), ("CronWorkflow", True)]


# -- every call within a deadline ---------------------------------------------------------------------


class Drip:
    """A loopback 'API server' that answers each request's headers at once and then its body
    one byte every ``every`` seconds (for at most ``limit`` seconds: the test stays bounded)."""

    def __init__(self, every: float = 0.5, limit: float = 120.0):
        self.every, self.limit = every, limit
        self.stop = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        end = time.monotonic() + self.limit
        with conn:
            conn.settimeout(2)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    data += chunk
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
                while not self.stop.is_set() and time.monotonic() < end:
                    time.sleep(self.every)
                    conn.sendall(b" ")
            except OSError:
                return

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "k", "cluster": {"server": "http://admin:s3cr3t-pw@127.0.0.1:%d" % self.port}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "ns1"}}],
            "users": [{"name": "u", "user": {"token": TOKEN}}]}))
        return path

    def close(self):
        self.stop.set()
        self.sock.close()


@pytest.fixture
def drip():
    server = Drip()
    try:
        yield server
    finally:
        server.close()


def no_secret_in(text: str) -> None:
    assert "s3cr3t-pw" not in text and "admin:" not in text and TOKEN not in text, text


def test_a_call_to_a_slow_drip_server_ends_at_its_deadline_and_frees_its_thread(drip, tmp_path, monkeypatch):
    monkeypatch.setenv(api_guard.DEADLINE_ENV, "1")
    start = time.monotonic()
    with pytest.raises(ClusterError) as e:
        Cluster("ns1", kubeconfig=str(drip.kubeconfig(tmp_path / "kc"))).get(cluster_mod.WORKFLOWS, "x")
    assert time.monotonic() - start < 10  # without the deadline: until the server stops (120 s)
    assert str(e.value) == ("get workflows x: no complete answer from the Kubernetes API at http://127.0.0.1:%d "
                            "within 1 s (the deadline of every API call; MFARGO_API_DEADLINE sets it)" % drip.port)
    for _ in range(50):  # the connection was cut: the worker does not read on
        if not any(t.name == api_guard.THREAD_NAME for t in threading.enumerate()):
            break
        time.sleep(0.1)
    assert not any(t.name == api_guard.THREAD_NAME for t in threading.enumerate())


@pytest.mark.parametrize("value", ["soon", "0", "-5"])
def test_a_bad_deadline_setting_is_one_line(tmp_path, monkeypatch, value):
    monkeypatch.setenv(api_guard.DEADLINE_ENV, value)
    with pytest.raises(UserError, match="^MFARGO_API_DEADLINE=.*: give a number of seconds"):
        api_guard.deadline()


def test_create_and_status_are_bounded_against_a_slow_drip_server(drip, kube, tmp_path):  # noqa: F811
    env = Env(kube, tmp_path)
    env.kubeconfig = drip.kubeconfig(tmp_path / "drip-kc")
    for args in (("create", "--code-in-image", "/app"), ("status", "argo-helloflow-abc")):
        start = time.monotonic()
        proc = env.run(*args, check=False, MFARGO_API_DEADLINE="2")
        elapsed = time.monotonic() - start
        line = one_line_error(proc)
        assert elapsed < 60, (args, elapsed)  # Python and Metaflow start-up plus one 2 s deadline
        assert ("no complete answer from the Kubernetes API at http://127.0.0.1:%d within 2 s" % drip.port) in line
        no_secret_in(proc.stderr + proc.stdout)


def test_the_deployer_api_is_bounded_against_a_slow_drip_server(drip, tmp_path, monkeypatch):
    import metaflow.metaflow_config as config

    from mfargo.metaflow_cli.deployer_objects import MfargoDeployedFlow

    monkeypatch.setenv("KUBECONFIG", str(drip.kubeconfig(tmp_path / "kc")))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv(api_guard.DEADLINE_ENV, "1")
    monkeypatch.setattr(config, "KUBERNETES_NAMESPACE", "ns1")
    for call in (lambda: MfargoDeployedFlow.from_deployment("helloflow"),
                 lambda: list(MfargoDeployedFlow.list_deployed_flows())):
        start = time.monotonic()
        with pytest.raises(UserError) as e:
            call()
        assert time.monotonic() - start < 10
        assert "within 1 s" in str(e.value)
        no_secret_in(str(e.value))


# -- no credential in any message -------------------------------------------------------------------


def test_credentials_in_the_kube_config_never_reach_a_message(kube, tmp_path):  # noqa: F811
    env = Env(kube, tmp_path)
    config = json.loads(env.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = kube.url.replace("http://", "http://admin:s3cr3t-pw@")
    env.kubeconfig.write_text(json.dumps(config))
    kube.fail("POST", "/workflowtemplates$", 403, "forbidden")
    proc = env.create(check=False)
    assert "from the API server at %s: forbidden" % kube.url in one_line_error(proc)
    no_secret_in(proc.stderr + proc.stdout)
    url = kube.url
    kube.close()
    proc = env.run("status", "argo-helloflow-abc", check=False)
    assert one_line_error(proc) == ("mfargo: get workflows helloflow-abc: cannot reach the Kubernetes API at %s: "
                                    "connection refused" % url)
    no_secret_in(proc.stderr + proc.stdout)


def test_without_credentials_masks_user_info_and_known_secrets():
    text = "at https://bob:pa55@api.example.com:6443/x and http://tok@h/ with Bearer abc123token"
    assert without_credentials(text, ("abc123token",)) == (
        "at https://api.example.com:6443/x and http://h/ with Bearer ***")
    assert server_of("https://bob:pa55@api.example.com:6443/prefix") == "https://api.example.com:6443"
