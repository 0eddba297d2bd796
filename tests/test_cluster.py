"""mfargo.cluster against the loopback fake Kubernetes API: the requests the official
client really sends, and one-line errors for every failure."""

from __future__ import annotations

import socket
import time

import pytest
from k8s_fake import TOKEN, kube  # noqa: F401 - fixture

from mfargo.cluster import WORKFLOW_TEMPLATES, WORKFLOWS, Cluster, ClusterError, Resource

PREFIX = "/apis/argoproj.io/v1alpha1/namespaces/ns1"


def template(name="hello", **spec):
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate",
            "metadata": {"name": name, "annotations": {"metaflow/flow_name": "HelloFlow"}},
            "spec": {"entrypoint": "x", **spec}}


@pytest.fixture
def cluster(kube, tmp_path):  # noqa: F811
    return Cluster("ns1", kubeconfig=str(kube.kubeconfig(tmp_path / "kubeconfig")))


def test_create_then_replace_with_the_live_resource_version(kube, cluster):  # noqa: F811
    """What mfargo.transaction sends: the object read, then a POST, or a PUT carrying the
    resourceVersion read (a concurrent change is a 409, not a silent overwrite)."""
    assert cluster.get(WORKFLOW_TEMPLATES, "hello") is None
    cluster.create(WORKFLOW_TEMPLATES, template(parallelism=1))
    live = cluster.get(WORKFLOW_TEMPLATES, "hello")
    rv = kube.get("workflowtemplates", "hello", "ns1")["metadata"]["resourceVersion"]
    body = template(parallelism=2)
    body["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
    cluster.replace(WORKFLOW_TEMPLATES, "hello", body)
    assert [(r.method, r.path) for r in kube.requests] == [
        ("GET", PREFIX + "/workflowtemplates/hello"),
        ("POST", PREFIX + "/workflowtemplates"),
        ("GET", PREFIX + "/workflowtemplates/hello"),
        ("PUT", PREFIX + "/workflowtemplates/hello"),
    ]
    post, put = kube.calls("POST")[0], kube.calls("PUT")[0]
    assert post.body["kind"] == "WorkflowTemplate" and "resourceVersion" not in post.body["metadata"]
    assert put.body["metadata"]["resourceVersion"] == rv and put.body["spec"]["parallelism"] == 2
    assert all(r.headers["authorization"] == "Bearer " + TOKEN for r in kube.requests)
    assert kube.get("workflowtemplates", "hello", "ns1")["spec"]["parallelism"] == 2


def test_other_kinds_go_to_their_group_and_namespace(kube, cluster):  # noqa: F811
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "r", "namespace": "ns2"}, "rules": []}
    sensor = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Sensor", "metadata": {"name": "s", "namespace": "ev"},
              "spec": {}}
    for doc in (role, sensor):
        cluster.create(Resource.of(doc), doc, doc["metadata"]["namespace"])
    assert [(r.method, r.path) for r in kube.calls("POST")] == [
        ("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/ns2/roles"),
        ("POST", "/apis/argoproj.io/v1alpha1/namespaces/ev/sensors"),
    ]


def test_conflicting_replace_is_a_409_message(kube, cluster):  # noqa: F811
    kube.put(template(), namespace="ns1")
    kube.fail("PUT", "/workflowtemplates/hello$", 409, 'Operation cannot be fulfilled on workflowtemplates "hello": '
              "the object has been modified")
    with pytest.raises(ClusterError) as e:
        cluster.replace(WORKFLOW_TEMPLATES, "hello", template())
    assert str(e.value) == ('replace workflowtemplates hello: conflict (409) from the API server at %s: Operation '
                            'cannot be fulfilled on workflowtemplates "hello": the object has been modified' % kube.url)
    assert e.value.status == 409


def test_get_missing_is_none_and_delete_missing_is_false(kube, cluster):  # noqa: F811
    assert cluster.get(WORKFLOW_TEMPLATES, "nope") is None
    assert cluster.delete(WORKFLOW_TEMPLATES, "nope") is False
    kube.put(template(), namespace="ns1")
    assert cluster.delete(WORKFLOW_TEMPLATES, "hello") is True
    assert kube.summary()[-1] == ("DELETE", "/namespaces/ns1/workflowtemplates/hello")


def test_forbidden_is_one_line_with_the_api_message(kube, cluster):  # noqa: F811
    kube.fail("GET", "/workflowtemplates/hello$", 403,
              'workflowtemplates.argoproj.io "hello" is forbidden: User "system:serviceaccount:x:y" cannot get\n'
              'resource "workflowtemplates" in API group "argoproj.io"')
    with pytest.raises(ClusterError) as e:
        cluster.get(WORKFLOW_TEMPLATES, "hello")
    assert "\n" not in str(e.value)
    assert str(e.value).startswith('get workflowtemplates hello: forbidden (403) from the API server at %s: '
                                   'workflowtemplates.argoproj.io "hello" is forbidden: User' % kube.url)


def test_list_follows_continue_tokens(kube, cluster):  # noqa: F811
    for i in range(5):
        kube.put(template("t%d" % i), namespace="ns1")
    names = [t["metadata"]["name"] for t in cluster.list(WORKFLOW_TEMPLATES, page_size=2)]
    assert names == ["t0", "t1", "t2", "t3", "t4"]
    assert [r.query for r in kube.requests] == [{"limit": "2"}, {"limit": "2", "continue": "2"},
                                                {"limit": "2", "continue": "4"}]


def test_submit_sends_a_workflow_from_the_template(kube, cluster):  # noqa: F811
    created = cluster.submit("hello", {"alpha": "0.5", "who": "world"}, annotations={"a": "b"})
    [post] = kube.calls("POST", "workflows")
    assert post.body == {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
        "metadata": {"generateName": "hello-", "annotations": {"a": "b"}},
        "spec": {"workflowTemplateRef": {"name": "hello"},
                 "arguments": {"parameters": [{"name": "alpha", "value": "0.5"}, {"name": "who", "value": "world"}]}},
    }
    assert created["metadata"]["name"].startswith("hello-")


def test_suspend_unsuspend_terminate_are_merge_patches(kube, cluster):  # noqa: F811
    kube.put({"kind": "Workflow", "metadata": {"name": "hello-abcde"}, "spec": {}, "status": {"phase": "Running"}},
             namespace="ns1")
    cluster.suspend("hello-abcde")
    with pytest.raises(ClusterError, match="already suspended"):
        cluster.suspend("hello-abcde")
    cluster.unsuspend("hello-abcde")
    cluster.terminate("hello-abcde")
    patches = kube.calls("PATCH")
    assert [p.body for p in patches] == [{"spec": {"suspend": True}}, {"spec": {"suspend": None}},
                                         {"spec": {"shutdown": "Terminate"}}]
    assert {p.headers["content-type"] for p in patches} == {"application/merge-patch+json"}
    assert {p.path for p in patches} == {PREFIX + "/workflows/hello-abcde"}
    assert kube.get("workflows", "hello-abcde", "ns1")["spec"] == {"shutdown": "Terminate"}


def test_finished_or_missing_runs_are_refused_without_a_patch(kube, cluster):  # noqa: F811
    kube.put({"kind": "Workflow", "metadata": {"name": "done"}, "spec": {},
              "status": {"phase": "Succeeded", "finishedAt": "2024-01-01T00:00:00Z"}}, namespace="ns1")
    with pytest.raises(ClusterError, match="cannot terminate run argo-done: it already finished"):
        cluster.terminate("done")
    with pytest.raises(ClusterError, match="no run argo-gone in namespace ns1"):
        cluster.suspend("gone")
    assert not kube.calls("PATCH")
    assert cluster.get(WORKFLOWS, "gone") is None


def test_wrong_credentials_are_401(kube, tmp_path):  # noqa: F811
    path = kube.kubeconfig(tmp_path / "kc")
    path.write_text(path.read_text().replace(TOKEN, "stale"))
    with pytest.raises(ClusterError, match=r"^get workflowtemplates x: unauthorized \(401\)"):
        Cluster("ns1", kubeconfig=str(path)).get(WORKFLOW_TEMPLATES, "x")


def test_connection_refused_is_quick_and_one_line(tmp_path, kube):  # noqa: F811
    path = kube.kubeconfig(tmp_path / "kc")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path.write_text(path.read_text().replace(kube.url, "http://127.0.0.1:%d" % port))
    start = time.monotonic()
    with pytest.raises(ClusterError) as e:
        Cluster("ns1", kubeconfig=str(path)).get(WORKFLOW_TEMPLATES, "x")
    assert time.monotonic() - start < 5
    assert str(e.value) == ("get workflowtemplates x: cannot reach the Kubernetes API at http://127.0.0.1:%d: "
                            "connection refused" % port)


def test_no_kube_config(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ClusterError, match="no Kubernetes configuration: .*/missing does not exist"):
        Cluster("ns1", kubeconfig=str(tmp_path / "missing")).get(WORKFLOW_TEMPLATES, "x")
    bad = tmp_path / "bad"
    bad.write_text("apiVersion: v1\nkind: Config\n")
    with pytest.raises(ClusterError, match="cannot use the kube config .*/bad: "):
        Cluster("ns1", kubeconfig=str(bad)).get(WORKFLOW_TEMPLATES, "x")


def _run_with_gangs(kube, finished_at=None):  # noqa: F811
    status = {"phase": "Failed", "finishedAt": finished_at} if finished_at else {"phase": "Running"}
    kube.put({"kind": "Workflow", "metadata": {"name": "hello-abcde", "uid": "u-run"}, "spec": {}, "status": status},
             namespace="ns1")
    for name, uid in (("js-b", "u-run"), ("js-a", "u-run"), ("js-other", "u-another-run")):
        kube.put({"kind": "JobSet", "metadata": {"name": name, "ownerReferences": [{"kind": "Workflow", "uid": uid}]},
                  "spec": {}}, "jobset.x-k8s.io", "v1alpha2", "jobsets", "ns1")


def test_terminate_deletes_the_jobsets_the_run_made_and_no_others(kube, cluster, monkeypatch):  # noqa: F811
    """Argo stops a terminated run's pods, not the JobSets its resource steps created: their
    pods would run on until the run is deleted."""
    from types import SimpleNamespace

    from mfargo import deploy

    monkeypatch.setattr(deploy, "STOP_WAIT_SECONDS", 0.3)
    monkeypatch.setattr(deploy, "STOP_POLL_SECONDS", 0.05)
    _run_with_gangs(kube)
    said = []
    deploy.terminate(SimpleNamespace(cluster=cluster), "hello-abcde", said.append)
    assert kube.names("jobsets", "ns1") == ["js-other"]
    assert [(r.method, r.path.rsplit("/", 1)[1]) for r in kube.calls("DELETE")] == [("DELETE", "js-a"), ("DELETE", "js-b")]
    # The fake run never stops: the sweep happens at the bound, and says what may be left.
    assert said == ["Deleted the run's JobSets js-a, js-b (their pods with them).",
                    "Run argo-hello-abcde was still stopping after 0 s: a JobSet it creates from now on stays until "
                    "the run is deleted."]


def test_terminate_without_a_jobset_api_or_the_right_to_list_jobsets(kube, cluster, monkeypatch):  # noqa: F811
    """No JobSet API: no gang to stop, nothing said. No right to list them: the run is still
    terminated, and one line says what is left."""
    from types import SimpleNamespace

    from mfargo import deploy

    monkeypatch.setattr(deploy, "STOP_WAIT_SECONDS", 0)
    for name in ("plain", "gangs"):
        kube.put({"kind": "Workflow", "metadata": {"name": name, "uid": "u-" + name}, "spec": {},
                  "status": {"phase": "Running"}}, namespace="ns1")
    said = []
    kube.fail("GET", "/jobsets$", 404, "the server could not find the requested resource")
    deploy.terminate(SimpleNamespace(cluster=cluster), "plain", said.append)
    assert said == [] and kube.get("workflows", "plain", "ns1")["spec"] == {"shutdown": "Terminate"}
    kube.fail("GET", "/jobsets$", 403, "jobsets.jobset.x-k8s.io is forbidden")
    deploy.terminate(SimpleNamespace(cluster=cluster), "gangs", said.append)
    assert kube.get("workflows", "gangs", "ns1")["spec"] == {"shutdown": "Terminate"}
    assert len(said) == 1 and said[0].startswith(
        "Run argo-gangs is terminated, but its gangs' JobSets were not deleted (they stay until the run is deleted): "
        "list jobsets: "), said
