"""A small client for the Argo objects mfargo deploys, over the official `kubernetes`
client's CustomObjectsApi and the user's kube config (or the in-cluster service account);
and the few reads `create` checks first (API discovery, a Secret's keys, a service account:
CoreV1Api).

Every failure is a ``ClusterError`` whose message is one line a user can act on:
no kube config, the API server unreachable, 401/403 (credentials, RBAC), 404, 409.
Nothing here knows about Metaflow; ``mfargo.deploy`` adds tokens and users.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Iterator

from mfargo import api_guard
from mfargo.api_guard import server_of, without_credentials
from mfargo.base.errors import UserError
from mfargo.compiler.constants import Label

ARGO_GROUP = "argoproj.io"
ARGO_VERSION = "v1alpha1"

# kind -> plural, for the kinds a bundle may hold (anything else: lowercase kind + "s").
PLURALS = {
    "WorkflowTemplate": "workflowtemplates",
    "Workflow": "workflows",
    "CronWorkflow": "cronworkflows",
    "Sensor": "sensors",
    "EventSource": "eventsources",
    "EventBus": "eventbus",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ServiceAccount": "serviceaccounts",
    "ConfigMap": "configmaps",
}
# The core (v1) kinds a bundle may hold, by plural: CoreV1Api's name for each (its methods are
# `<verb>_namespaced_<name>`).
CORE_KINDS = {"configmaps": "config_map"}

# Connect / read timeouts (seconds) of every request, and one retry of a failed connect:
# an API server that does not answer is one line within 5 + 5 s (connect) or 15 s (read);
# every call as a whole within api_guard's deadline (30 s unless MFARGO_API_DEADLINE says).
TIMEOUT = (5, 15)
CONNECT_RETRIES = 1
class ClusterError(UserError):
    """One line for the user; the CLI prints it as ``mfargo: <message>`` and exits 1."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(" ".join(without_credentials(message).split()))
        self.status = status


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str

    @property
    def core(self) -> bool:
        """A core (v1) kind: CoreV1Api's, not a custom object."""
        return not self.group

    @classmethod
    def of(cls, doc: dict) -> "Resource":
        api_version = doc.get("apiVersion", "")
        kind = doc.get("kind", "")
        plural = PLURALS.get(kind, kind.lower() + "s")
        if api_version == "v1" and plural in CORE_KINDS:
            return cls("", "v1", plural)
        if "/" not in api_version:
            raise ClusterError("cannot deploy %s %r: only API-group objects and %s are supported"
                               % (kind, api_version, ", ".join(sorted(CORE_KINDS))))
        group, version = api_version.split("/", 1)
        return cls(group, version, plural)


# The labels that name the WorkflowTemplate a run (Workflow) was made from, each with the
# template's name as its value (Cluster.runs_of):
# - Argo's controller puts Label.WORKFLOW_TEMPLATE on every Workflow with a workflowTemplateRef
#   from Argo 4.1 on (argo-workflows#12677); before that only `argo submit --from` did, so
#   mfargo's `trigger` and `resume` set it themselves (mfargo.deploy);
# - Argo puts Label.CRON_WORKFLOW on a CronWorkflow's runs, with the CronWorkflow's name (which
#   mfargo gives the template's);
# - Argo Events' k8s trigger puts Label.SENSOR_TRIGGER on what it creates, with the trigger's
#   name (mfargo names its Sensor's trigger after the template), and Label.SENSOR.
RUN_TEMPLATE_LABELS = (Label.WORKFLOW_TEMPLATE, Label.CRON_WORKFLOW, Label.SENSOR_TRIGGER)

WORKFLOW_TEMPLATES = Resource(ARGO_GROUP, ARGO_VERSION, "workflowtemplates")
WORKFLOWS = Resource(ARGO_GROUP, ARGO_VERSION, "workflows")
CRON_WORKFLOWS = Resource(ARGO_GROUP, ARGO_VERSION, "cronworkflows")
SENSORS = Resource(ARGO_GROUP, ARGO_VERSION, "sensors")
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets")


class Runs:
    """What both clients (``Cluster``, ``mfargo.argo_server.ArgoServer``) do with runs, over their
    own ``get``/``create``/``list`` and the three run verbs ``_terminate``/``_suspend``/``_unsuspend``."""

    namespace: str
    _secrets: tuple[str, ...]  # what messages must never show

    def _error(self, message: str, status: int | None = None) -> ClusterError:
        return ClusterError(without_credentials(message, self._secrets), status=status)

    def submit(self, template: str, parameters: dict[str, str], annotations: dict[str, str] | None = None,
               labels: dict[str, str] | None = None) -> dict:
        """Create a Workflow from the WorkflowTemplate ``template``; returns the created object."""
        body = workflow_body(template, parameters, annotations, labels)
        return self.create(WORKFLOWS, body)

    def runs_of(self, template: str) -> list[dict]:
        """Every Workflow made from the WorkflowTemplate ``template`` (by reference), in no order.

        Found by the labels naming the template, so only its runs are read, whatever else the
        namespace holds; one list per label (a selector cannot say "this or that"). A label
        holds only a name, so each run's ``workflowTemplateRef`` is checked too."""
        found: dict[str, dict] = {}
        for key in RUN_TEMPLATE_LABELS:
            for wf in self.list(WORKFLOWS, label_selector="%s=%s" % (key, template)):
                ref = (wf.get("spec") or {}).get("workflowTemplateRef") or {}
                if ref.get("name") == template and not ref.get("clusterScope"):
                    found[wf["metadata"]["name"]] = wf
        return list(found.values())

    def get_workflow(self, name: str) -> dict | None:
        return self.get(WORKFLOWS, name)

    def terminate(self, name: str) -> dict:
        wf = self._running(name, "terminate")
        if (wf.get("spec") or {}).get("shutdown") == "Terminate":
            raise ClusterError("run argo-%s is already being terminated" % name)
        return self._terminate(name)

    def suspend(self, name: str) -> dict:
        wf = self._running(name, "suspend")
        if (wf.get("spec") or {}).get("suspend") is True:
            raise ClusterError("run argo-%s is already suspended" % name)
        return self._suspend(name)

    def unsuspend(self, name: str) -> dict:
        wf = self._running(name, "unsuspend")
        if not (wf.get("spec") or {}).get("suspend"):
            raise ClusterError("run argo-%s is not suspended" % name)
        return self._unsuspend(name)

    def _running(self, name: str, verb: str) -> dict:
        wf = self.get_workflow(name)
        if wf is None:
            raise ClusterError("no run argo-%s in namespace %s" % (name, self.namespace), status=404)
        if (wf.get("status") or {}).get("finishedAt"):
            raise ClusterError(
                "cannot %s run argo-%s: it already finished (%s)" % (verb, name, wf["status"].get("phase", "?"))
            )
        return wf


class Cluster(Runs):
    """Namespaced custom objects in one default namespace; the API client is made lazily."""

    UNCHECKED = "not allowed to check (403), so not checked"  # what the prerequisite warning says

    def __init__(self, namespace: str = "default", kubeconfig: str | None = None, context: str | None = None):
        self.namespace = namespace or "default"
        self._kubeconfig = kubeconfig
        self._context = context
        self._api = None
        self._core_api = None
        self._client = None
        self.host: str | None = None  # the API server's URL as configured (may hold user-info)
        self._secrets: tuple[str, ...] = ()  # what messages must never show
        self._in_use: dict[int, Any] = {}  # thread id -> the connection a call is using

    # -- connection ---------------------------------------------------------------

    def _custom(self):
        if self._api is None:
            from kubernetes import client

            self._api = client.CustomObjectsApi(self._shared_client())
        return self._api

    def _core(self):
        if self._core_api is None:
            from kubernetes import client

            self._core_api = client.CoreV1Api(self._shared_client())
        return self._core_api

    def _shared_client(self):
        if self._client is None:
            self._client = self._api_client()
        return self._client

    def _api_client(self):
        import urllib3
        from kubernetes import client, config

        conf = client.Configuration()
        path = self._kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        files = [p for p in path.split(os.pathsep) if p]
        if not any(os.path.exists(p) for p in files) and os.environ.get("KUBERNETES_SERVICE_HOST"):
            try:  # a pod with a service account
                config.load_incluster_config(client_configuration=conf)
            except Exception as e:  # noqa: BLE001
                raise self._error("in-cluster Kubernetes configuration failed: %s" % _first_line(e)) from None
        elif not any(os.path.exists(p) for p in files):
            raise ClusterError("no Kubernetes configuration: %s does not exist (set KUBECONFIG or create "
                               "~/.kube/config)" % path)
        else:
            try:
                # The path is passed explicitly: the client reads KUBECONFIG once, when it is imported.
                config.load_kube_config(config_file=path, context=self._context,
                                        client_configuration=conf)
            except Exception as e:  # noqa: BLE001 - bad YAML, no current context, unknown context
                raise self._error("cannot use the kube config %s: %s" % (path, _first_line(e))) from None
        conf.retries = urllib3.Retry(total=CONNECT_RETRIES, connect=CONNECT_RETRIES, read=0, status=0,
                                     redirect=0, backoff_factor=0.1)
        self.host = conf.host
        self._secrets = api_guard.secrets_of(conf)
        api = client.ApiClient(conf)
        api_guard.watch_pools(api.rest_client.pool_manager, self._in_use)
        return api

    @property
    def server(self) -> str:
        """scheme://host:port of the API server (what messages name)."""
        return server_of(self.host)

    def _call(self, what: str, fn, *args, core: bool = False, **kwargs):
        """Run one API call (CustomObjectsApi's ``fn``, CoreV1Api's with ``core``) within
        the total deadline; every failure becomes a one-line ClusterError naming ``what``
        and the API server."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        limit = api_guard.deadline()
        api = self._core() if core else self._custom()
        try:
            return api_guard.within(limit, lambda: getattr(api, fn)(*args, _request_timeout=TIMEOUT, **kwargs),
                                    self._in_use)
        except api_guard.DeadlineExceeded as e:
            raise self._error("%s: no complete answer from the Kubernetes API at %s within %.0f s (the deadline of "
                              "every API call; %s sets it)" % (what, self.server, e.seconds, api_guard.DEADLINE_ENV)) \
                from None
        except ApiException as e:
            raise self._error("%s: %s" % (what, _describe(e, self.server)), e.status) from None
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise self._error("%s: cannot reach the Kubernetes API at %s: %s" % (what, self.server, root_reason(e))) \
                from None

    # -- generic verbs --------------------------------------------------------------

    def _core_verb(self, verb: str, res: Resource, *args) -> dict:
        """``verb`` (read, create, replace, delete) of a core kind, through CoreV1Api; its answer as the API's JSON."""
        what = "%s %s %s" % ({"read": "get"}.get(verb, verb), res.plural, args[0] if verb != "create" else "")
        answer = self._call(what.strip(), "%s_namespaced_%s" % (verb, CORE_KINDS[res.plural]), *args, core=True)
        return self._shared_client().sanitize_for_serialization(answer)

    def get(self, res: Resource, name: str, namespace: str | None = None) -> dict | None:
        """The object, or None if it does not exist."""
        try:
            if res.core:
                return self._core_verb("read", res, name, namespace or self.namespace)
            return self._call(
                "get %s %s" % (res.plural, name), "get_namespaced_custom_object",
                res.group, res.version, namespace or self.namespace, res.plural, name,
            )
        except ClusterError as e:
            if e.status == 404:
                return None
            raise

    def get_cluster_scoped(self, res: Resource, name: str) -> dict | None:
        """A cluster-scoped object, or None if it does not exist."""
        try:
            return self._call("get %s %s" % (res.plural, name), "get_cluster_custom_object",
                              res.group, res.version, res.plural, name)
        except ClusterError as e:
            if e.status == 404:
                return None
            raise

    def create(self, res: Resource, body: dict, namespace: str | None = None) -> dict:
        name = body.get("metadata", {}).get("name") or body.get("metadata", {}).get("generateName", "")
        if res.core:
            return self._core_verb("create", res, namespace or self.namespace, body)
        return self._call(
            "create %s %s" % (res.plural, name), "create_namespaced_custom_object",
            res.group, res.version, namespace or self.namespace, res.plural, body,
        )

    def replace(self, res: Resource, name: str, body: dict, namespace: str | None = None) -> dict:
        if res.core:
            return self._core_verb("replace", res, name, namespace or self.namespace, body)
        return self._call(
            "replace %s %s" % (res.plural, name), "replace_namespaced_custom_object",
            res.group, res.version, namespace or self.namespace, res.plural, name, body,
        )

    def patch(self, res: Resource, name: str, body: dict, namespace: str | None = None) -> dict:
        """A JSON merge patch (RFC 7386)."""
        return self._call(
            "patch %s %s" % (res.plural, name), "patch_namespaced_custom_object",
            res.group, res.version, namespace or self.namespace, res.plural, name, body,
        )

    def delete(self, res: Resource, name: str, namespace: str | None = None) -> bool:
        """True if deleted, False if there was nothing to delete."""
        try:
            if res.core:
                self._core_verb("delete", res, name, namespace or self.namespace)
                return True
            self._call(
                "delete %s %s" % (res.plural, name), "delete_namespaced_custom_object",
                res.group, res.version, namespace or self.namespace, res.plural, name,
            )
            return True
        except ClusterError as e:
            if e.status == 404:
                return False
            raise

    def list(self, res: Resource, namespace: str | None = None, page_size: int = 100,
             label_selector: str | None = None) -> Iterator[dict]:
        """Every object, page by page (``limit``/``continue``: no one answer holds them all);
        only those matching ``label_selector`` when given (the API server filters)."""
        token = None
        while True:
            kwargs: dict[str, Any] = {"limit": page_size}
            if token:
                kwargs["_continue"] = token
            if label_selector:
                kwargs["label_selector"] = label_selector
            page = self._call(
                "list %s" % res.plural, "list_namespaced_custom_object",
                res.group, res.version, namespace or self.namespace, res.plural, **kwargs,
            )
            yield from page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def nodes(self) -> list[dict]:
        """Every Node (labels, taints, allocatable), as the API's JSON."""
        answer = self._call("list nodes", "list_node", core=True)
        return self._shared_client().sanitize_for_serialization(answer).get("items") or []

    def served(self, group: str, version: str) -> set[str] | None:
        """The resources (plurals) the API server serves in group/version (API discovery,
        open to every authenticated user); None when it serves no such group/version."""
        try:
            found = self._call("discover %s/%s" % (group, version), "get_api_resources", group, version)
        except ClusterError as e:
            if e.status == 404:
                return None
            raise
        return {r.name for r in found.resources or []}

    def secret_keys(self, name: str, namespace: str | None = None) -> set[str] | None:
        """The keys of a Secret (never its values), or None if it does not exist."""
        try:
            secret = self._call("get secrets %s" % name, "read_namespaced_secret", name, namespace or self.namespace,
                                core=True)
        except ClusterError as e:
            if e.status == 404:
                return None
            raise
        return set(secret.data or {}) | set(secret.string_data or {})

    def has_service_account(self, name: str, namespace: str | None = None) -> bool:
        try:
            self._call("get serviceaccounts %s" % name, "read_namespaced_service_account", name,
                       namespace or self.namespace, core=True)
            return True
        except ClusterError as e:
            if e.status == 404:
                return False
            raise

    def carries(self, kind: str) -> bool:
        """Whether this client can read and write objects of ``kind``: every kind a bundle holds."""
        return True

    # -- what Runs needs ------------------------------------------------------------------

    def _terminate(self, name: str) -> dict:
        return self.patch(WORKFLOWS, name, {"spec": {"shutdown": "Terminate"}})

    def _suspend(self, name: str) -> dict:
        return self.patch(WORKFLOWS, name, {"spec": {"suspend": True}})

    def _unsuspend(self, name: str) -> dict:
        return self.patch(WORKFLOWS, name, {"spec": {"suspend": None}})


def connect(namespace: str) -> "Cluster | Runs":
    """The client a command reaches Argo through: Argo Server when ``ARGO_SERVER`` is set (as
    for Argo's own CLI; ``mfargo.argo_server``), else the Kubernetes API."""
    from mfargo import argo_server

    if argo_server.wanted():
        return argo_server.ArgoServer(namespace)
    return Cluster(namespace)


def workflow_body(template: str, parameters: dict[str, str], annotations=None, labels=None) -> dict:
    """A Workflow that runs ``template``; parameter values are passed as given (strings)."""
    metadata: dict[str, Any] = {"generateName": template + "-"}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    spec: dict[str, Any] = {"workflowTemplateRef": {"name": template}}
    if parameters:
        spec["arguments"] = {"parameters": [{"name": k, "value": v} for k, v in parameters.items()]}
    return {"apiVersion": "%s/%s" % (ARGO_GROUP, ARGO_VERSION), "kind": "Workflow", "metadata": metadata, "spec": spec}


def unless_missing(call, absent=None):
    """``call()``, or ``absent`` when what it asks for is not there (a 404)."""
    try:
        return call()
    except ClusterError as e:
        if e.status == 404:
            return absent
        raise


# What an HTTP status means, as both clients' messages say it.
HTTP_MEANINGS = {400: "bad request (400)", 401: "unauthorized (401)", 403: "forbidden (403)", 404: "not found (404)",
                 409: "conflict (409)"}


def _describe(e, server: str) -> str:
    """Kubernetes' own message for an API error, prefixed by what it means and who said it."""
    message = ""
    if e.body:
        try:
            message = json.loads(e.body).get("message") or ""
        except (ValueError, AttributeError):
            message = str(e.body)[:200]
    message = message or e.reason or "no details"
    meaning = HTTP_MEANINGS.get(e.status, "Kubernetes API error %s" % e.status)
    if e.status == 401:
        message = "the credentials in your kube config were rejected: " + message
    return "%s from the API server at %s: %s" % (meaning, server, message)


def root_reason(e: BaseException) -> str:
    """The root cause of a connection failure, e.g. 'connection refused' (a context that an
    exception was raised ``from None`` over is not followed)."""
    seen = e
    for _ in range(10):
        context = None if seen.__suppress_context__ else seen.__context__
        nxt = getattr(seen, "reason", None) or seen.__cause__ or context
        if isinstance(seen, ConnectionRefusedError) or "refused" in str(seen).lower() and nxt is None:
            return "connection refused"
        if not isinstance(nxt, BaseException):
            break
        seen = nxt
    text = str(seen)
    if "refused" in text.lower():
        return "connection refused"
    return _first_line(text) or type(seen).__name__


def _first_line(value) -> str:
    text = str(value).strip()
    return text.splitlines()[0] if text else type(value).__name__
