"""A loopback fake of the few Kubernetes API endpoints mfargo's cluster client uses.

Namespaced objects, any group/version/plural (the core group as /api/v1):

    GET/POST          /apis/<group>/<version>/namespaces/<ns>/<plural>
    GET/PUT/PATCH/DELETE  /apis/<group>/<version>/namespaces/<ns>/<plural>/<name>
    GET               /api/v1/namespaces/<ns>/<plural>/<name>   (Secrets, ServiceAccounts: seed them)
    GET               /apis/<group>/<version>                   (discovery, from ``served``)

By default it serves Argo Workflows', Argo Events' and JobSet's kinds (``served``; pop a
group/version to play a cluster without that CRD).

It keeps objects in memory (resourceVersion, generateName, 409 on an existing name or a
stale resourceVersion, JSON merge patch, list with limit/continue and a labelSelector's
equality and existence terms) and records every
request as the client really sent it, so tests assert on method, path, headers and body.
``fail(...)`` makes the next matching requests (or those after the first N) answer with an error Status;
``stall(...)`` carries them out but answers late.
"""

from __future__ import annotations

import json
import random
import re
import string
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

# A namespaced object's path, or (no ``ns``) a cluster-scoped one's.
PATH = re.compile(r"^(?:/apis/(?P<group>[^/]+)|/api)/(?P<version>[^/]+)(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)"
                  r"(?:/(?P<name>[^/]+))?$")
DISCOVERY = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)$")
ARGO_KINDS = {"workflows": "Workflow", "workflowtemplates": "WorkflowTemplate", "cronworkflows": "CronWorkflow",
              "sensors": "Sensor", "eventsources": "EventSource", "eventbus": "EventBus"}


def default_served() -> dict:
    """(group, version) -> {plural: kind}: what a cluster with Argo Workflows, Argo Events and JobSet serves."""
    return {("argoproj.io", "v1alpha1"): dict(ARGO_KINDS), ("jobset.x-k8s.io", "v1alpha2"): {"jobsets": "JobSet"}}
TOKEN = "fake-token-123"


@dataclass
class Request:
    method: str
    path: str
    query: dict
    headers: dict
    body: object = None

    @property
    def plural(self) -> str | None:
        m = PATH.match(self.path)
        return m and m["plural"]

    @property
    def name(self) -> str | None:
        m = PATH.match(self.path)
        return m and m["name"]


@dataclass
class Failure:
    method: str
    pattern: re.Pattern
    status: int
    message: str
    times: int
    after: int = 0  # matching requests answered normally before the failures begin


@dataclass
class FakeKube:
    objects: dict = field(default_factory=dict)  # (group, version, ns, plural, name) -> obj
    requests: list = field(default_factory=list)
    failures: list = field(default_factory=list)
    stalls: list = field(default_factory=list)  # [method, compiled path regex, seconds, times]
    served: dict = field(default_factory=default_served)
    version: int = 100
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    # -- test helpers -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return "http://%s:%d" % (host, port)

    def kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        path.write_text(json.dumps({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": TOKEN}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester", "namespace": namespace}}],
            "current-context": "fake",
        }))
        return path

    def put(self, obj: dict, group="argoproj.io", version="v1alpha1", plural=None, namespace="default") -> dict:
        """Seed an object as if someone else had created it (``namespace`` None: cluster-scoped)."""
        plural = plural or obj["kind"].lower() + "s"
        meta = obj.setdefault("metadata", {})
        if namespace is not None:
            meta.setdefault("namespace", namespace)
        with self.lock:
            self.version += 1
            meta["resourceVersion"] = str(self.version)
            self.objects[(group, version, namespace, plural, meta["name"])] = obj
        return obj

    def put_secret(self, name: str, keys=(), namespace="default") -> dict:
        """A Secret holding ``keys`` (their values are irrelevant here)."""
        return self.put({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                         "data": {k: "eA==" for k in keys}}, "", "v1", "secrets", namespace)

    def put_service_account(self, name: str, namespace="default") -> dict:
        return self.put({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
                        "", "v1", "serviceaccounts", namespace)

    def get(self, plural, name, namespace="default", group="argoproj.io", version="v1alpha1"):
        return self.objects.get((group, version, namespace, plural, name))

    def names(self, plural, namespace="default") -> list[str]:
        return sorted(k[4] for k in self.objects if k[3] == plural and k[2] == namespace)

    def fail(self, method: str, path_regex: str, status: int, message: str = "injected", times: int = 1,
             after: int = 0):
        """The next ``times`` matching requests (after ``after`` answered normally) fail."""
        self.failures.append(Failure(method.upper(), re.compile(path_regex), status, message, times, after))

    def stall(self, method: str, path_regex: str, seconds: float, times: int = 1):
        """The next ``times`` matching requests are carried out, but answered ``seconds`` later
        (a write that happened although its caller gave up waiting)."""
        self.stalls.append([method.upper(), re.compile(path_regex), seconds, times])

    def _stall_for(self, method: str, path: str) -> float:
        for s in self.stalls:
            if s[3] > 0 and s[0] == method and s[1].search(urlsplit(path).path):
                s[3] -= 1
                return s[2]
        return 0.0

    def calls(self, method: str | None = None, plural: str | None = None) -> list[Request]:
        return [r for r in self.requests if (method is None or r.method == method) and (plural is None or r.plural == plural)]

    def summary(self) -> list[tuple[str, str]]:
        """(method, path-without-/apis/argoproj.io/v1alpha1 before /namespaces) of every request, in order."""
        return [(r.method, re.sub(r"^/apis/argoproj.io/v1alpha1(?=/)", "", r.path)) for r in self.requests]

    def reset_log(self):
        self.requests.clear()

    def close(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    # -- request handling -----------------------------------------------------------------

    def handle(self, method: str, raw_path: str, headers: dict, body) -> tuple[int, dict]:
        parts = urlsplit(raw_path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        self.requests.append(Request(method, parts.path, query, headers, json.loads(json.dumps(body))))
        for f in self.failures:
            if f.times > 0 and f.method == method and f.pattern.search(parts.path):
                if f.after > 0:
                    f.after -= 1
                    continue
                f.times -= 1
                return f.status, status(f.status, f.message)
        d = DISCOVERY.match(parts.path)
        if d and method == "GET":
            return self._discovery(d["group"], d["version"])
        m = PATH.match(parts.path)
        if not m:
            return 404, status(404, "the server could not find the requested resource")
        key = (m["group"] or "", m["version"], m["ns"], m["plural"])
        name = m["name"]
        with self.lock:
            if name is None and method == "GET":
                return 200, self._list(key, query)
            if name is None and method == "POST":
                return self._create(key, body)
            if name is None:
                return 405, status(405, "method not allowed")
            obj = self.objects.get(key + (name,))
            if obj is None:
                return 404, status(404, '%s.%s "%s" not found' % (key[3], key[0], name), "NotFound")
            if method == "GET":
                return 200, obj
            if method == "DELETE":
                del self.objects[key + (name,)]
                return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": name}}
            if method == "PUT":
                sent = (body.get("metadata") or {}).get("resourceVersion")
                if not sent:
                    return 422, status(422, "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update")
                if sent != obj["metadata"]["resourceVersion"]:
                    return 409, status(409, 'Operation cannot be fulfilled on %s "%s": the object has been modified; '
                                            "please apply your changes to the latest version and try again" % (key[3], name),
                                       "Conflict")
                return 200, self._store(key, name, body, obj)
            if method == "PATCH":
                if headers.get("content-type") != "application/merge-patch+json":
                    return 415, status(415, "unsupported patch type %s" % headers.get("content-type"))
                return 200, self._store(key, name, merge_patch(json.loads(json.dumps(obj)), body), obj)
        return 405, status(405, "method not allowed")

    def _discovery(self, group, version):
        kinds = self.served.get((group, version))
        if kinds is None:
            return 404, status(404, "the server could not find the requested resource")
        return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "%s/%s" % (group, version),
                     "resources": [{"name": plural, "singularName": "", "namespaced": True, "kind": kind,
                                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}
                                   for plural, kind in sorted(kinds.items())]}

    def _list(self, key, query):
        items = [o for k, o in sorted(self.objects.items()) if k[:4] == key
                 and matches(query.get("labelSelector"), (o.get("metadata") or {}).get("labels") or {})]
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(items) or 1
        page = items[start:start + limit]
        meta = {"resourceVersion": str(self.version)}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
        return {"apiVersion": "%s/%s" % key[:2], "kind": "List", "items": page, "metadata": meta}

    def _create(self, key, body):
        meta = body.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                return 422, status(422, "metadata.name: Required value: name or generateName is required")
            meta["name"] = meta["generateName"] + "".join(random.choice(string.ascii_lowercase + string.digits)
                                                          for _ in range(5))
        if key + (meta["name"],) in self.objects:
            return 409, status(409, '%s.%s "%s" already exists' % (key[3], key[0], meta["name"]), "AlreadyExists")
        if meta.get("resourceVersion"):
            return 422, status(422, "resourceVersion should not be set on objects to be created")
        meta["namespace"] = key[2]
        meta["uid"] = "uid-%d" % (self.version + 1)
        return 201, self._store(key, meta["name"], body, None)

    def _store(self, key, name, obj, old):
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        if old is not None and "status" in old and "status" not in obj:
            obj["status"] = old["status"]  # status is a subresource: PUT/PATCH of the object keeps it
        self.objects[key + (name,)] = obj
        return obj


def matches(selector: str | None, labels: dict) -> bool:
    """Does a label selector's equality/existence form (``a=b,c!=d,e,!f``) select ``labels``?
    No selector selects everything."""
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            ok = labels.get(k.strip()) != v.strip()
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            ok = labels.get(k.strip()) == v.strip()
        elif term.startswith("!"):
            ok = term[1:].strip() not in labels
        else:
            ok = term in labels
        if not ok:
            return False
    return True


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = merge_patch(target.get(k), v)
    return target


def status(code: int, message: str, reason: str | None = None) -> dict:
    reasons = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 422: "Invalid"}
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason or reasons.get(code, "InternalError"), "code": code}


def start() -> FakeKube:
    kube = FakeKube()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            headers = {k.lower(): v for k, v in self.headers.items()}
            if headers.get("authorization") != "Bearer " + TOKEN:
                code, payload = 401, status(401, "Unauthorized")
                kube.requests.append(Request(self.command, urlsplit(self.path).path, {}, headers, body))
            else:
                code, payload = kube.handle(self.command, self.path, headers, body)
                time.sleep(kube._stall_for(self.command, self.path))
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        def log_message(self, *args):
            pass

    kube.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    kube.server.daemon_threads = True
    threading.Thread(target=kube.server.serve_forever, daemon=True).start()
    return kube


try:
    import pytest
except ImportError:  # pragma: no cover - the module is usable without pytest
    pytest = None

if pytest is not None:

    @pytest.fixture
    def kube():
        """A fresh fake API server per test (import this fixture into the test module)."""
        server = start()
        try:
            yield server
        finally:
            server.close()
