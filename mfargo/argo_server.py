"""Argo Server as the way to Argo, for teams that give their users Argo and not Kubernetes.

Chosen when ``ARGO_SERVER`` is set, as Argo's own CLI chooses it (``mfargo.cluster.connect``),
and configured by the same settings as Argo's CLI: ``ARGO_SERVER`` (``host:port``, or a URL),
``ARGO_SECURE`` (https unless ``false``), ``ARGO_INSECURE_SKIP_VERIFY``, ``ARGO_BASE_HREF``,
``ARGO_TOKEN`` (else what ``argo auth token`` prints, when Argo's CLI is installed). TLS is
verified against the system's CAs, or ``REQUESTS_CA_BUNDLE``.

``ArgoServer`` has ``mfargo.cluster.Cluster``'s verbs for the kinds Argo Server serves
(WorkflowTemplate, CronWorkflow, Workflow, Sensor), through hera's ``WorkflowsService`` and
``EventsService``; an object goes as hera's model only when the model holds it whole
(``hera_objects.first_difference``), a Sensor as JSON on the EventsService's session
(``SensorsAsJson``: hera's model cannot hold its trigger). What Argo Server does not serve (a gang's Role and
RoleBinding, the concurrency ConfigMap, Secrets, JobSets, Kueue's objects, Nodes) fails with
status 403 and a message saying so: ``deploy`` leaves those documents to an admin and says
which, and the prerequisite checks name what they could not check.

hera is imported here only, when a call is made: compiling and ``--check`` never import it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Iterator

from mfargo import api_guard
from mfargo.cluster import ARGO_GROUP, PLURALS, TIMEOUT, ClusterError, Resource, Runs
from mfargo.hera_objects import first_difference, refusal

SERVER_ENV = "ARGO_SERVER"
TOKEN_ENV = "ARGO_TOKEN"
SECURE_ENV = "ARGO_SECURE"
SKIP_VERIFY_ENV = "ARGO_INSECURE_SKIP_VERIFY"
BASE_HREF_ENV = "ARGO_BASE_HREF"
TOKEN_COMMAND_SECONDS = 15  # for `argo auth token`
NOT_SERVED = 403  # the status of a ClusterError for what Argo Server does not serve


@dataclass(frozen=True)
class Kind:
    """How hera's service names one kind: ``<verb>_<noun>`` methods, its model, its requests."""

    service: str  # "workflows" (WorkflowsService) or "events" (EventsService)
    noun: str
    model: str | None  # in hera.workflows.models / hera.events.models; None: sent and read as JSON (SensorsAsJson)
    create_request: str
    create_field: str  # the request's field holding the object
    update_request: str | None


KINDS = {
    "workflowtemplates": Kind("workflows", "workflow_template", "WorkflowTemplate", "WorkflowTemplateCreateRequest",
                              "template", "WorkflowTemplateUpdateRequest"),
    "cronworkflows": Kind("workflows", "cron_workflow", "CronWorkflow", "CreateCronWorkflowRequest", "cron_workflow",
                          "UpdateCronWorkflowRequest"),
    "workflows": Kind("workflows", "workflow", "Workflow", "WorkflowCreateRequest", "workflow", None),
    "sensors": Kind("events", "sensor", None, "CreateSensorRequest", "sensor", "UpdateSensorRequest"),
    # read only: `create` checks that the webhook EventSource a @trigger flow publishes to exists
    "eventsources": Kind("events", "event_source", "EventSource", "CreateEventSourceRequest", "event_source",
                         "UpdateEventSourceRequest"),
}
_MEANING = {400: "bad request (400)", 401: "unauthorized (401)", 403: "forbidden (403)", 404: "not found (404)",
            409: "conflict (409)"}


def wanted() -> bool:
    """Whether commands go through Argo Server: ``ARGO_SERVER`` is set."""
    return bool(os.environ.get(SERVER_ENV, "").strip())


def base_url() -> str:
    """Argo Server's URL from the settings, ending in "/" (hera joins its API paths to it)."""
    server = os.environ.get(SERVER_ENV, "").strip()
    if not server or any(c.isspace() for c in server):
        raise ClusterError("%s=%r: give Argo Server's host:port (or its URL)" % (SERVER_ENV, server))
    if "://" not in server:
        secure = os.environ.get(SECURE_ENV, "true").strip().lower() not in ("false", "0", "no")
        server = "%s://%s" % ("https" if secure else "http", server)
    base = os.environ.get(BASE_HREF_ENV, "").strip().strip("/")
    return server.rstrip("/") + "/" + (base + "/" if base else "")


def verify_tls() -> bool:
    return os.environ.get(SKIP_VERIFY_ENV, "").strip().lower() not in ("true", "1", "yes")


def token() -> str | None:
    """``ARGO_TOKEN``, else what ``argo auth token`` prints (bounded), else None (a server
    that needs no token: its ``server`` auth mode)."""
    given = os.environ.get(TOKEN_ENV, "").strip()
    if given:
        return given
    argo = shutil.which("argo")
    if argo is None:
        return None
    try:
        done = subprocess.run([argo, "auth", "token"], capture_output=True, text=True, timeout=TOKEN_COMMAND_SECONDS)
    except subprocess.TimeoutExpired:
        raise ClusterError("no %s, and `argo auth token` did not answer within %d s: set %s"
                           % (TOKEN_ENV, TOKEN_COMMAND_SECONDS, TOKEN_ENV)) from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1]
        raise ClusterError("no %s, and `argo auth token` failed: %s" % (TOKEN_ENV, why))
    return done.stdout.strip() or None


class ArgoServer(Runs):
    """The Argo objects of one default namespace, through Argo Server; services made lazily."""

    UNCHECKED = "Argo Server does not show these, so not checked"

    def __init__(self, namespace: str = "default"):
        self.namespace = namespace or "default"
        self.host = base_url()
        self._services: dict[str, Any] = {}
        self._token: str | None = None
        self._secrets: tuple[str, ...] | None = None  # None: the token not read yet
        self._in_use: dict[int, Any] = {}

    @property
    def server(self) -> str:
        return api_guard.server_of(self.host)

    def carries(self, kind: str) -> bool:
        return PLURALS.get(kind) in KINDS

    # -- connection ---------------------------------------------------------------

    def _service(self, name: str):
        if self._secrets is None:  # read once, whichever service asks first
            self._token = token()
            self._secrets = (self._token, self._token.split(" ", 1)[-1]) if self._token else ()
        if name not in self._services:
            try:
                if name == "workflows":
                    from hera.workflows.service import WorkflowsService as service
                else:
                    from hera.events.service import EventsService as service
            except ImportError:
                raise ClusterError("%s is set, and going through Argo Server needs hera: pip install 'mfargo[hera]' "
                                   "(or unset %s to use your kube config)" % (SERVER_ENV, SERVER_ENV)) from None
            made = service(host=self.host, verify_ssl=verify_tls(), token=self._token, namespace=self.namespace,
                           session=_session(self._in_use))
            self._services[name] = made if name == "workflows" else SensorsAsJson(made)
        return self._services[name]

    def _call(self, what: str, kind: Kind, verb: str, *args, **kwargs):
        """hera's ``<verb>_<noun>`` within the total deadline; every failure one ClusterError line."""
        import requests
        from hera.exceptions import HeraException

        service = self._service(kind.service)
        method = getattr(service, "%s_%s%s" % (verb, kind.noun, "s" if verb == "list" else ""))
        try:
            return api_guard.within(api_guard.deadline(), lambda: method(*args, **kwargs), self._in_use)
        except api_guard.DeadlineExceeded as e:
            raise self._error("%s: no complete answer from Argo Server at %s within %.0f s (the deadline of every "
                              "API call; %s sets it)" % (what, self.server, e.seconds, api_guard.DEADLINE_ENV)) \
                from None
        except HeraException as e:
            status = getattr(e, "status_code", None)
            meaning = _MEANING.get(status, "Argo Server error %s" % status)
            said = _said(e)
            if status == 401:
                said = "the token (%s or `argo auth token`) was refused: %s" % (TOKEN_ENV, said)
            raise self._error("%s: %s from Argo Server at %s: %s" % (what, meaning, self.server, said), status) \
                from None
        except requests.exceptions.SSLError as e:
            raise self._error("%s: cannot verify Argo Server's certificate at %s (trust its CA with "
                              "REQUESTS_CA_BUNDLE, or set %s=true): %s"
                              % (what, self.server, SKIP_VERIFY_ENV, _root(e))) from None
        except requests.exceptions.RequestException as e:
            raise self._error("%s: cannot reach Argo Server at %s: %s" % (what, self.server, _root(e))) from None
        except ValueError as e:  # pydantic: an answer hera's model refuses
            raise self._error("%s: Argo Server's answer does not fit hera's %s model: %s"
                              % (what, kind.model or kind.noun, refusal(e))) from None

    def _error(self, message: str, status: int | None = None) -> ClusterError:
        return ClusterError(api_guard.without_credentials(message, self._secrets or ()), status=status)

    def _kind(self, res: Resource, what: str) -> Kind:
        if res.group == ARGO_GROUP and res.plural in KINDS:
            return KINDS[res.plural]
        raise ClusterError("%s: Argo Server does not serve %s (an admin's, through the Kubernetes API)"
                           % (what, res.plural), status=NOT_SERVED)

    def _typed(self, kind: Kind, body: dict, what: str):
        """``body`` as hera's model, refused (one line) when the model would not send it as is."""
        if kind.model is None:
            return body
        model = getattr(_models(kind), kind.model)
        doc = _as_hera_holds(kind, body)
        try:
            typed = model.model_validate(doc)
        except ValueError as e:
            raise ClusterError("%s: cannot go through Argo Server: hera's %s model refuses it: %s"
                               % (what, kind.model, refusal(e))) from None
        lost = first_difference(doc, typed.model_dump(mode="json", by_alias=True, exclude_none=True,
                                                      exclude_unset=True, exclude_defaults=True))
        if lost is not None:
            raise ClusterError("%s: cannot go through Argo Server: hera's %s model would change %s (deploy "
                               "through the Kubernetes API: unset %s)" % (what, kind.model, lost, SERVER_ENV))
        return typed

    def _request(self, kind: Kind, request_class: str, **fields):
        if kind.model is None:
            return fields
        return getattr(_models(kind), request_class)(**fields)

    # -- generic verbs --------------------------------------------------------------

    def get(self, res: Resource, name: str, namespace: str | None = None) -> dict | None:
        what = "get %s %s" % (res.plural, name)
        kind = self._kind(res, what)
        try:
            return _plain(self._call(what, kind, "get", name, namespace=namespace or self.namespace))
        except ClusterError as e:
            if e.status == 404:
                return None
            raise

    def create(self, res: Resource, body: dict, namespace: str | None = None) -> dict:
        meta = body.get("metadata") or {}
        what = "create %s %s" % (res.plural, meta.get("name") or meta.get("generateName", ""))
        kind = self._kind(res, what)
        ns = namespace or self.namespace
        request = self._request(kind, kind.create_request, namespace=ns,
                                **{kind.create_field: self._typed(kind, body, what)})
        return _plain(self._call(what, kind, "create", request, namespace=ns))

    def replace(self, res: Resource, name: str, body: dict, namespace: str | None = None) -> dict:
        what = "replace %s %s" % (res.plural, name)
        kind = self._kind(res, what)
        if kind.update_request is None:
            raise ClusterError("%s: Argo Server does not replace %s" % (what, res.plural), status=NOT_SERVED)
        ns = namespace or self.namespace
        request = self._request(kind, kind.update_request, name=name, namespace=ns,
                                **{kind.create_field: self._typed(kind, body, what)})
        return _plain(self._call(what, kind, "update", name, request, namespace=ns))

    def delete(self, res: Resource, name: str, namespace: str | None = None) -> bool:
        what = "delete %s %s" % (res.plural, name)
        kind = self._kind(res, what)
        try:
            self._call(what, kind, "delete", name, namespace=namespace or self.namespace)
            return True
        except ClusterError as e:
            if e.status == 404:
                return False
            raise

    def list(self, res: Resource, namespace: str | None = None, page_size: int = 100,
             label_selector: str | None = None) -> Iterator[dict]:
        """Every object, page by page where Argo Server pages (Workflows)."""
        what = "list %s" % res.plural
        kind = self._kind(res, what)
        ns = namespace or self.namespace
        cont = None
        while True:
            if kind.noun == "workflow":
                page = self._call(what, kind, "list", namespace=ns, label_selector=label_selector,
                                  limit=str(page_size), continue_=cont)
            else:
                page = self._call(what, kind, "list", namespace=ns, label_selector=label_selector)
            page = _plain(page)
            yield from page.get("items") or []
            cont = (page.get("metadata") or {}).get("continue")
            if kind.noun != "workflow" or not cont:
                return

    # -- what the Kubernetes API alone answers ---------------------------------------

    def _not_served(self, what: str):
        raise ClusterError("%s: Argo Server does not serve it (an admin can check it through the Kubernetes API)"
                           % what, status=NOT_SERVED)

    def nodes(self) -> list[dict]:
        self._not_served("list nodes")

    def served(self, group: str, version: str) -> set[str] | None:
        self._not_served("discover %s/%s" % (group, version))

    def secret_keys(self, name: str, namespace: str | None = None) -> set[str] | None:
        self._not_served("get secrets %s" % name)

    def has_service_account(self, name: str, namespace: str | None = None) -> bool:
        self._not_served("get serviceaccounts %s" % name)

    def get_cluster_scoped(self, res: Resource, name: str) -> dict | None:
        self._not_served("get %s %s" % (res.plural, name))

    # -- what Runs needs ------------------------------------------------------------------

    def _run_verb(self, verb: str, request: str, name: str) -> dict:
        kind = KINDS["workflows"]
        body = self._request(kind, request, name=name, namespace=self.namespace)
        return _plain(self._call("%s workflows %s" % (verb, name), kind, verb, name, body, namespace=self.namespace))

    def _terminate(self, name: str) -> dict:
        return self._run_verb("terminate", "WorkflowTerminateRequest", name)

    def _suspend(self, name: str) -> dict:
        return self._run_verb("suspend", "WorkflowSuspendRequest", name)

    def _unsuspend(self, name: str) -> dict:
        return self._run_verb("resume", "WorkflowResumeRequest", name)


def _as_hera_holds(kind: Kind, body: dict) -> dict:
    """``body`` in the form hera's model holds: Argo 3.7's CronWorkflow ``schedule`` (what
    ``--argo-version 3.7`` writes) as the one-item ``schedules`` list, which Argo reads the same
    since 3.6 and hera's model requires."""
    spec = body.get("spec") or {}
    if kind.noun != "cron_workflow" or "schedule" not in spec:
        return body
    spec = {k: v for k, v in spec.items() if k != "schedule"}
    spec["schedules"] = [body["spec"]["schedule"]]
    return {**body, "spec": spec}


def _models(kind: Kind):
    """hera's models module of ``kind``'s service."""
    if kind.service == "workflows":
        import hera.workflows.models as models
    else:
        import hera.events.models as models
    return models


def _plain(answer) -> dict:
    """An answer (hera's model, or JSON already) as the API's JSON."""
    if isinstance(answer, dict):
        return answer
    return answer.model_dump(mode="json", by_alias=True, exclude_none=True)


class SensorsAsJson:
    """The sensor verbs of hera's ``EventsService``, on its session, host, token and TLS
    setting, with the Sensor as JSON: hera's Sensor model holds a k8s trigger's resource (the
    Workflow a Sensor creates) as a string, where Argo Server sends and takes an object, so the
    model can neither send mfargo's Sensor nor read one back. Same paths, same errors as hera's."""

    def __init__(self, service):
        self.service = service

    def __getattr__(self, name: str):  # the EventsService's other verbs (EventSources), as hera has them
        return getattr(self.service, name)

    def _send(self, method: str, path: str, body: dict | None = None, params: dict | None = None) -> dict:
        from urllib.parse import urljoin

        from hera.exceptions import exception_from_server_response

        s = self.service
        resp = s.session.request(method, urljoin(s.host, path), params=params, json=body, verify=s.verify_ssl,
                                 headers={"Authorization": s.token} if s.token else {}, cert=s.client_certs)
        if not resp.ok:
            raise exception_from_server_response(resp)
        return resp.json()

    def get_sensor(self, name: str, namespace: str) -> dict:
        return self._send("get", "api/v1/sensors/%s/%s" % (namespace, name))

    def create_sensor(self, req: dict, namespace: str) -> dict:
        return self._send("post", "api/v1/sensors/%s" % namespace, req)

    def update_sensor(self, name: str, req: dict, namespace: str) -> dict:
        return self._send("put", "api/v1/sensors/%s/%s" % (namespace, name), req)

    def delete_sensor(self, name: str, namespace: str) -> dict:
        return self._send("delete", "api/v1/sensors/%s/%s" % (namespace, name))

    def list_sensors(self, namespace: str, label_selector: str | None = None) -> dict:
        params = {"listOptions.labelSelector": label_selector} if label_selector else None
        return self._send("get", "api/v1/sensors/%s" % namespace, params=params)


def _session(in_use: dict):
    """A requests session whose every request has connect/read timeouts, makes no retry, and
    records its connection per thread (so ``api_guard.within`` can cut a call at its deadline)."""
    import requests
    from requests.adapters import HTTPAdapter

    class Bounded(requests.Session):
        def request(self, method, url, **kwargs):
            kwargs.setdefault("timeout", TIMEOUT)
            return super().request(method, url, **kwargs)

    session = Bounded()
    adapter = HTTPAdapter(max_retries=0)
    manager = adapter.poolmanager
    manager.pool_classes_by_scheme = {scheme: api_guard.watched_pool(cls, in_use)
                                      for scheme, cls in manager.pool_classes_by_scheme.items()}
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session


def _said(error: Exception) -> str:
    """Argo Server's message in hera's exception ("Server returned status code N with message: `...`")."""
    text = " ".join(str(error).split())
    _, found, message = text.partition("with message: ")
    return message.strip("`") if found else text


def _root(error: BaseException) -> str:
    seen = error
    for _ in range(10):
        nxt = getattr(seen, "reason", None) or seen.__cause__ or seen.__context__
        if not isinstance(nxt, BaseException):
            break
        seen = nxt
    return " ".join(str(seen).split()) or type(seen).__name__

