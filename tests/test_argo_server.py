"""mfargo.argo_server without a cluster: the settings Argo's CLI reads, every example's objects
as hera's request would send them (the compiled document, field for field), and what a user
sees when Argo Server refuses, is not there, or stalls: one line, no token in it. Requests go
over real HTTP (hera's services) to a small stand-in that answers as Argo Server does; the
cluster tests (test_cluster_argo_server.py) hold the real one."""

from __future__ import annotations

import http.server
import json
import shutil
import threading
import time

import pytest
import yaml
from flowtools import EXAMPLES, compile_file, example_args

from mfargo import argo_server, cluster
from mfargo.base.versions import ARGO_VERSIONS
from mfargo.cluster import ClusterError, Resource
from mfargo.compiler.constants import Label

TOKEN = "Bearer sa-token-0123456789"
OPENSSL = shutil.which("openssl")  # before the tests empty PATH


@pytest.fixture(autouse=True)
def settings(monkeypatch):
    for name in ("ARGO_SERVER", "ARGO_TOKEN", "ARGO_SECURE", "ARGO_INSECURE_SKIP_VERIFY", "ARGO_BASE_HREF"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")  # no `argo` CLI unless a test puts one there


@pytest.mark.parametrize("env,url", [
    ({"ARGO_SERVER": "argo.example:2746"}, "https://argo.example:2746/"),
    ({"ARGO_SERVER": "argo.example:2746", "ARGO_SECURE": "false"}, "http://argo.example:2746/"),
    ({"ARGO_SERVER": "https://argo.example", "ARGO_BASE_HREF": "/argo/"}, "https://argo.example/argo/"),
])
def test_the_url_is_read_as_argos_cli_reads_it(monkeypatch, env, url):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert argo_server.wanted() and argo_server.base_url() == url
    assert isinstance(cluster.connect("ns"), argo_server.ArgoServer)


def test_without_argo_server_commands_use_the_kubernetes_api():
    assert not argo_server.wanted() and type(cluster.connect("ns")) is cluster.Cluster


def test_tls_is_verified_unless_the_user_says_otherwise(monkeypatch):
    assert argo_server.verify_tls()
    monkeypatch.setenv("ARGO_INSECURE_SKIP_VERIFY", "true")
    assert not argo_server.verify_tls()


def test_the_token_comes_from_argo_token_else_argo_auth_token(monkeypatch, tmp_path):
    assert argo_server.token() is None  # no ARGO_TOKEN, no argo CLI: a server in `server` auth mode
    fake = tmp_path / "argo"
    fake.write_text('#!/bin/sh\n[ "$1 $2" = "auth token" ] && echo "Bearer from-cli" && exit 0\nexit 3\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert argo_server.token() == "Bearer from-cli"
    monkeypatch.setenv("ARGO_TOKEN", TOKEN)
    assert argo_server.token() == TOKEN
    monkeypatch.delenv("ARGO_TOKEN")
    fake.write_text("#!/bin/sh\necho 'argo: no kube config' >&2\nexit 1\n")
    with pytest.raises(ClusterError, match=r"^no ARGO_TOKEN, and `argo auth token` failed: argo: no kube config$"):
        argo_server.token()


@pytest.mark.parametrize("target", ARGO_VERSIONS)
def test_every_examples_objects_go_as_compiled(target):
    """What hera's request sends is the document mfargo compiled, for each kind Argo Server
    serves; 3.7's CronWorkflow goes with its schedule as the one-item list Argo 3.6+ reads."""
    client = argo_server.ArgoServer.__new__(argo_server.ArgoServer)
    sent = 0
    for flow in sorted(EXAMPLES.glob("*.py")):
        for doc in yaml.safe_load_all(compile_file(flow, *example_args(flow), "--argo-version", target).stdout):
            if not client.carries(doc["kind"]):
                assert doc["kind"] in ("Role", "RoleBinding", "ConfigMap"), doc["kind"]
                continue
            kind = argo_server.KINDS[cluster.PLURALS[doc["kind"]]]
            if kind.model is None:  # a Sensor: hera's model cannot hold its trigger (SensorsAsJson)
                assert client._typed(kind, doc, doc["kind"]) is doc
                continue
            typed = client._typed(kind, doc, doc["kind"])
            body = typed.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True,
                                    exclude_defaults=True)
            if "schedule" in doc["spec"]:
                assert body["spec"].pop("schedules") == [doc["spec"].pop("schedule")]
            assert body == doc, (flow.stem, doc["kind"])
            sent += 1
    assert sent >= 10


class FakeArgoServer(http.server.BaseHTTPRequestHandler):
    """Answers Argo Server's API as it does: JSON, {"code", "message"} on errors; ``store``
    holds objects by (collection, namespace, name); ``stall`` makes every answer hang;
    ``scripted`` answers (method, path part, status, body: JSON or text) first, once each."""

    store: dict = {}
    stall = 0.0
    seen: list = []
    scripted: list = []

    def _answer(self, status, body):
        if self.stall:
            time.sleep(self.stall)
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self):
        self.seen.append((self.command, self.path, self.headers.get("Authorization")))
        for entry in list(self.scripted):
            method, part, status, body = entry
            if method == self.command and part in self.path:
                self.scripted.remove(entry)
                return self._answer(status, body)
        if self.headers.get("Authorization") != TOKEN:
            return self._answer(401, {"code": 16, "message": "token not valid"})
        parts = self.path.split("?")[0].strip("/").split("/")  # api v1 <collection> <ns> [<name> [<verb>]]
        collection, ns, rest = parts[2], parts[3], parts[4:]
        if collection == "roles":
            return self._answer(404, {"code": 5, "message": "Not Found"})
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        if self.command == "POST":
            obj = next(iter(v for k, v in body.items() if isinstance(v, dict)))
            name = obj["metadata"].get("name") or obj["metadata"]["generateName"] + "abcde"
            if (collection, ns, name) in self.store:
                return self._answer(409, {"code": 6, "message": "already exists"})
            obj["metadata"].update(name=name, namespace=ns, uid="u-" + name, resourceVersion="1")
            self.store[(collection, ns, name)] = obj
            return self._answer(200, obj)
        if not rest:
            return self._answer(200, {"metadata": {}, "items": [v for (c, n, _), v in self.store.items()
                                                                if (c, n) == (collection, ns)]})
        obj = self.store.get((collection, ns, rest[0]))
        if obj is None:
            return self._answer(404, {"code": 5, "message": '%s "%s" not found' % (collection, rest[0])})
        if self.command == "DELETE":
            del self.store[(collection, ns, rest[0])]
            return self._answer(200, {})
        if self.command == "PUT" and rest[1:] == ["terminate"]:
            obj["spec"]["shutdown"] = "Terminate"
        elif self.command == "PUT":
            obj = next(iter(v for k, v in body.items() if isinstance(v, dict)))
            self.store[(collection, ns, rest[0])] = obj
        return self._answer(200, obj)

    do_GET = do_POST = do_PUT = do_DELETE = _route

    def log_message(self, *args):
        pass


@pytest.fixture
def fake(monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeArgoServer)
    FakeArgoServer.store, FakeArgoServer.stall, FakeArgoServer.seen, FakeArgoServer.scripted = {}, 0.0, [], []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("ARGO_SERVER", "127.0.0.1:%d" % server.server_port)
    monkeypatch.setenv("ARGO_SECURE", "false")
    monkeypatch.setenv("ARGO_TOKEN", TOKEN)
    yield FakeArgoServer
    server.shutdown()


def test_templates_and_runs_through_hera_over_http(fake):
    client = argo_server.ArgoServer("team")
    template = {"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate",
                "metadata": {"name": "flow"}, "spec": {"entrypoint": "main", "templates": [{"name": "main"}]}}
    assert client.get(cluster.WORKFLOW_TEMPLATES, "flow") is None
    created = client.create(cluster.WORKFLOW_TEMPLATES, template)
    assert created["metadata"]["uid"] == "u-flow" and client.get(cluster.WORKFLOW_TEMPLATES, "flow")["spec"] == \
        template["spec"]
    run = client.submit("flow", {"alpha": "1"}, labels={"workflows.argoproj.io/workflow-template": "flow"})
    assert run["spec"]["workflowTemplateRef"] == {"name": "flow"}
    assert run["spec"]["arguments"]["parameters"] == [{"name": "alpha", "value": "1"}]
    assert [w["metadata"]["name"] for w in client.runs_of("flow")] == ["flow-abcde"]
    assert client.terminate("flow-abcde")["spec"]["shutdown"] == "Terminate"
    assert client.delete(cluster.WORKFLOW_TEMPLATES, "flow") and not client.delete(cluster.WORKFLOW_TEMPLATES, "flow")
    assert {(verb, path.split("?")[0]) for verb, path, _ in fake.seen} >= {
        ("POST", "/api/v1/workflow-templates/team"), ("POST", "/api/v1/workflows/team"),
        ("PUT", "/api/v1/workflows/team/flow-abcde/terminate"), ("DELETE", "/api/v1/workflow-templates/team/flow")}


def test_what_argo_server_does_not_serve_is_said_not_tried(fake):
    client = argo_server.ArgoServer("team")
    assert not client.carries("Role") and not client.carries("ConfigMap") and client.carries("Sensor")
    with pytest.raises(ClusterError, match="Argo Server does not serve roles") as refused:
        client.create(Resource("rbac.authorization.k8s.io", "v1", "roles"), {"metadata": {"name": "r"}})
    assert refused.value.status == argo_server.NOT_SERVED
    with pytest.raises(ClusterError, match="get secrets s3: Argo Server does not serve it"):
        client.secret_keys("s3")
    assert fake.seen == []


def test_a_refused_token_is_one_line_without_the_token(fake, monkeypatch):
    monkeypatch.setenv("ARGO_TOKEN", "Bearer wrong-token-secret")
    with pytest.raises(ClusterError) as refused:
        argo_server.ArgoServer("team").get(cluster.WORKFLOW_TEMPLATES, "flow")
    message = str(refused.value)
    assert refused.value.status == 401 and "\n" not in message and "wrong-token-secret" not in message
    assert message.startswith("get workflowtemplates flow: unauthorized (401) from Argo Server at http://127.0.0.1:")
    assert message.endswith("the token (ARGO_TOKEN or `argo auth token`) was refused: token not valid")


def test_no_server_and_a_stalled_server_end_in_one_line_within_the_deadline(fake, monkeypatch):
    monkeypatch.setenv("MFARGO_API_DEADLINE", "2")
    fake.stall = 10
    began = time.monotonic()
    with pytest.raises(ClusterError, match=r"no complete answer from Argo Server at http://127\.0\.0\.1:\d+ within 2 s"):
        argo_server.ArgoServer("team").get(cluster.WORKFLOW_TEMPLATES, "flow")
    assert time.monotonic() - began < 6
    monkeypatch.setenv("ARGO_SERVER", "127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(ClusterError, match=r"^get workflowtemplates flow: cannot reach Argo Server at "
                                           r"http://127\.0\.0\.1:9: .*(refused|Errno)"):
        argo_server.ArgoServer("team").get(cluster.WORKFLOW_TEMPLATES, "flow")


def test_an_unverifiable_certificate_says_how_to_trust_it(monkeypatch):
    import ssl
    import subprocess

    monkeypatch.setenv("ARGO_SERVER", "127.0.0.1:%d" % _tls_server(monkeypatch, ssl, subprocess))
    monkeypatch.setenv("ARGO_TOKEN", TOKEN)
    with pytest.raises(ClusterError, match="cannot verify Argo Server's certificate at https://127.0.0.1:[0-9]+ "
                                           r"\(trust its CA with REQUESTS_CA_BUNDLE, or set "
                                           r"ARGO_INSECURE_SKIP_VERIFY=true\)"):
        argo_server.ArgoServer("team").get(cluster.WORKFLOW_TEMPLATES, "flow")


def _tls_server(monkeypatch, ssl, subprocess) -> int:
    """A TLS server with a self-signed certificate no CA vouches for."""
    import tempfile

    tmp = tempfile.mkdtemp()
    subprocess.run([OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", tmp + "/k.pem",
                    "-out", tmp + "/c.pem", "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeArgoServer)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp + "/c.pem", tmp + "/k.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_port


def test_without_hera_installed_the_user_is_told_what_to_install(fake, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "hera.workflows.service", None)  # as if hera were not installed
    with pytest.raises(ClusterError, match=r"^ARGO_SERVER is set, and going through Argo Server needs hera: "
                                           r"pip install 'mfargo\[hera\]'"):
        argo_server.ArgoServer("team").get(cluster.WORKFLOW_TEMPLATES, "flow")


def test_prerequisites_through_argo_server_check_what_it_shows_and_name_the_rest(fake):
    """The triggered example's needs: its EventSource is read through Argo Server (missing here:
    refused in one phrase); what Argo Server cannot show (the EventBus, the Sensor's service
    account, the APIs) is named as not checked, and nothing of it is asked of the server."""
    from mfargo import cluster_needs

    flow = EXAMPLES / "triggered.py"
    docs = list(yaml.safe_load_all(compile_file(flow, *example_args(flow)).stdout))
    missing, unchecked = cluster_needs.unmet(argo_server.ArgoServer("team"), docs, "team")
    assert len(missing) == 1 and missing[0].startswith("no EventSource "), missing
    assert any(u.startswith("the EventBus") or "EventBus" in u for u in unchecked), unchecked
    assert [path.split("?")[0].split("/")[3] for _, path, _ in fake.seen] == ["event-sources"]


def test_a_deploy_through_argo_server_is_all_or_nothing(fake):
    """The transaction of the Kubernetes path, through Argo Server: the WorkflowTemplate is
    written, the CronWorkflow refused (403), and the template is deleted again; the error says
    it, naming Argo Server."""
    from mfargo import transaction

    flow = EXAMPLES / "scheduled.py"
    docs = list(yaml.safe_load_all(compile_file(flow, *example_args(flow)).stdout))
    assert [d["kind"] for d in docs] == ["WorkflowTemplate", "CronWorkflow"]
    ns = docs[0]["metadata"]["namespace"]
    client = argo_server.ArgoServer(ns)
    refuse = FakeArgoServer._route

    def no_crons(self):
        if self.command == "POST" and "/cron-workflows/" in self.path:
            self.seen.append((self.command, self.path, None))
            return self._answer(403, {"code": 7, "message": "cronworkflows is forbidden"})
        return refuse(self)

    fake.do_POST = no_crons
    try:
        plan = transaction.plan(client, docs, [], ns, lambda kind, live: None)
        with pytest.raises(transaction.PartialDeploy) as failed:
            transaction.run(client, plan, docs[0]["metadata"]["name"], lambda *a, **k: None)
    finally:
        fake.do_POST = refuse
    assert "forbidden (403) from Argo Server at http://127.0.0.1:" in str(failed.value), failed.value
    assert "WorkflowTemplate %s/%s: deleted" % (ns, docs[0]["metadata"]["name"]) in str(failed.value), failed.value
    assert fake.store == {}


def test_reads_are_the_servers_json_whole_even_where_heras_model_differs(fake):
    """A CronWorkflow as Argo 3.7 stores it (its one `schedule`, which hera's model refuses) and
    a field hera's model does not know are read back as stored: `create` reads every object
    it may replace, and an undo sends back what it read."""
    stored = {"apiVersion": "argoproj.io/v1alpha1", "kind": "CronWorkflow",
              "metadata": {"name": "flow", "namespace": "team", "resourceVersion": "7"},
              "spec": {"schedule": "0 3 * * *", "futureField": {"x": 1}, "workflowSpec": {}}}
    fake.store[("cron-workflows", "team", "flow")] = stored
    assert argo_server.ArgoServer("team").get(cluster.CRON_WORKFLOWS, "flow") == stored


@pytest.mark.parametrize("value", ["Bearer sa-tok\nen-SECRET123", "Bearer t\u00e9-SECRET123", "Bearer a b c-SECRET123"])
def test_a_token_that_cannot_be_a_header_is_refused_without_showing_it(fake, monkeypatch, value):
    monkeypatch.setenv("ARGO_TOKEN", value)
    with pytest.raises(ClusterError) as refused:
        argo_server.ArgoServer("team").get(cluster.WORKFLOW_TEMPLATES, "flow")
    assert str(refused.value) == ("ARGO_TOKEN is not a token: one line of printable ASCII, as 'Bearer <token>' "
                                  "(not shown here)")
    assert fake.seen == []


@pytest.mark.parametrize("server,url", [("HTTPS://argo.example:2746", "https://argo.example:2746/"),
                                        ("https://argo.example/argo", "https://argo.example/argo/")])
def test_a_url_scheme_in_capitals_or_a_path_is_kept(monkeypatch, server, url):
    monkeypatch.setenv("ARGO_SERVER", server)
    assert argo_server.base_url() == url


@pytest.mark.parametrize("server", ["grpc://argo.example:2746", "dns:///argo", "https://", "argo example:2746"])
def test_an_argo_server_that_is_not_http_is_one_line(monkeypatch, server):
    monkeypatch.setenv("ARGO_SERVER", server)
    with pytest.raises(ClusterError, match=r"^ARGO_SERVER=.*: give Argo Server's host:port, or its http:// or "
                                           r"https:// URL$"):
        cluster.connect("team")


@pytest.mark.parametrize("status,body,said", [
    (503, "<html>\n<h1>503 Service Unavailable</h1>\n</html>", "Argo Server error 503 from Argo Server at "),
    (502, {"error": "upstream"}, "Argo Server error 502 from Argo Server at "),
    (400, [1, 2], "bad request (400) from Argo Server at "),
])
def test_answers_not_in_argo_servers_words_are_one_line_with_their_status(fake, status, body, said):
    fake.scripted.append(("GET", "/workflow-templates/", status, body))
    with pytest.raises(ClusterError) as refused:
        argo_server.ArgoServer("team").get(cluster.WORKFLOW_TEMPLATES, "flow")
    assert refused.value.status == status and said in str(refused.value) and "\n" not in str(refused.value)
    fake.scripted.append(("POST", "/workflow-templates/", status, body))  # a write, through hera's service
    template = {"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate", "metadata": {"name": "flow"},
                "spec": {"entrypoint": "main", "templates": [{"name": "main"}]}}
    with pytest.raises(ClusterError) as refused:
        argo_server.ArgoServer("team").create(cluster.WORKFLOW_TEMPLATES, template)
    assert refused.value.status == status and said in str(refused.value)


def test_a_login_page_where_the_api_should_be_is_said_so(fake):
    fake.scripted.append(("GET", "/workflow-templates/", 200, "<html><body>Sign in</body></html>"))
    with pytest.raises(ClusterError, match=r"answered with something other than Argo Server's API \(check ARGO_SERVER "
                                           r"and ARGO_BASE_HREF, or a login proxy in front of it\)$"):
        argo_server.ArgoServer("team").get(cluster.WORKFLOW_TEMPLATES, "flow")


def test_no_token_sent_and_refused_says_to_set_one(fake, monkeypatch):
    monkeypatch.delenv("ARGO_TOKEN")
    with pytest.raises(ClusterError, match=r"unauthorized \(401\) .*: no token was sent: set ARGO_TOKEN"):
        argo_server.ArgoServer("team").get(cluster.WORKFLOW_TEMPLATES, "flow")


def test_a_run_of_a_template_argo_servers_cache_has_not_seen_yet_is_asked_again(fake):
    """Argo Server checks a new Workflow against its cache of WorkflowTemplates: just after the
    template is written it may answer 404; the run is asked again (bounded), not the deploy undone."""
    for _ in range(2):
        fake.scripted.append(("POST", "/api/v1/workflows/team", 404,
                              {"code": 5, "message": 'workflowtemplates.argoproj.io "flow" not found'}))
    run = argo_server.ArgoServer("team").submit("flow", {})
    assert run["metadata"]["name"] == "flow-abcde" and fake.scripted == []
    fake.scripted.append(("POST", "/api/v1/workflows/team", 404, {"code": 5, "message": "namespaces not found"}))
    with pytest.raises(ClusterError, match="not found"):  # any other 404 is not waited for
        argo_server.ArgoServer("team").submit("flow", {})


def test_a_first_deploy_through_argo_server_has_the_schedule_checked_again(fake):
    """The deploy's recheck (mfargo.cron_recheck) goes through Argo Server's update of the
    CronWorkflow: the schedule as compiled, with the template version."""
    from mfargo import cron_recheck, transaction

    flow = EXAMPLES / "scheduled.py"
    docs = list(yaml.safe_load_all(compile_file(flow, *example_args(flow)).stdout))
    ns, name = docs[0]["metadata"]["namespace"], docs[0]["metadata"]["name"]
    client, waits = argo_server.ArgoServer(ns), []
    done = transaction.run(client, transaction.plan(client, docs, [], ns, lambda kind, live: None), name,
                           lambda *a, **k: None)
    cron_recheck.recheck(client, done, lambda *a, **k: None, sleep=waits.append)
    stored = fake.store[("cron-workflows", ns, name)]
    assert stored["metadata"]["annotations"][Label.TEMPLATE_CHECKED] == "1"  # the stand-in's version
    assert stored["spec"]["schedules"] == docs[1]["spec"]["schedules"]
    assert waits == [cron_recheck.INFORMER_LAG_SECONDS]
    assert [(verb, path.split("?")[0]) for verb, path, _ in fake.seen if verb != "GET"] == [
        ("POST", "/api/v1/workflow-templates/%s" % ns), ("POST", "/api/v1/cron-workflows/%s" % ns),
        ("PUT", "/api/v1/cron-workflows/%s/%s" % (ns, name))]
