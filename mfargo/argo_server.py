"""Argo Server as the way to Argo, for teams that give their users Argo and not Kubernetes.

Chosen when ``ARGO_SERVER`` is set, as Argo's own CLI chooses it (``mfargo.cluster.connect``),
and configured by the same settings as Argo's CLI: ``ARGO_SERVER`` (``host:port``, or a URL),
``ARGO_SECURE`` (https unless ``false``), ``ARGO_INSECURE_SKIP_VERIFY``, ``ARGO_BASE_HREF``,
``ARGO_TOKEN`` (else what ``argo auth token`` prints, when Argo's CLI is installed). TLS is
verified against requests' CA bundle (certifi's), or ``REQUESTS_CA_BUNDLE``.

``ArgoServer`` has ``mfargo.cluster.Cluster``'s verbs for the kinds Argo Server serves
(WorkflowTemplate, CronWorkflow, Workflow, Sensor; EventSources read). It writes through
hera's ``WorkflowsService``, an object going as hera's model only when the model sends it as
compiled (``hera_objects.first_difference``); it reads as JSON on the same session, paths and
token, because hera's models drop what they do not know and refuse what Argo still serves
(Argo 3.7's CronWorkflow ``schedule``). Sensors are written as JSON too: hera's Sensor model
holds a trigger's Workflow as a string, where Argo Server takes an object. What Argo Server
does not serve (a gang's Role and RoleBinding, the concurrency ConfigMap, Secrets, JobSets,
Kueue's objects, Nodes) fails with status 403 and says so: ``deploy`` leaves those documents
to an admin, and the prerequisite checks name what they could not check.

hera is imported here only, when a call is made: compiling and ``--check`` never import it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Iterator
from urllib.parse import urlsplit

from mfargo import api_guard
from mfargo.cluster import (ARGO_GROUP, HTTP_MEANINGS, PLURALS, TIMEOUT, ClusterError, Resource, Runs, root_reason,
                            unless_missing)
from mfargo.hera_objects import first_difference, refusal

SERVER_ENV = "ARGO_SERVER"
TOKEN_ENV = "ARGO_TOKEN"
SECURE_ENV = "ARGO_SECURE"
SKIP_VERIFY_ENV = "ARGO_INSECURE_SKIP_VERIFY"
BASE_HREF_ENV = "ARGO_BASE_HREF"
TOKEN_COMMAND_SECONDS = 15  # for `argo auth token`
# Argo Server checks a new run or schedule against its cache of WorkflowTemplates, which may
# not hold the template written a moment before: a 404 naming it is asked again, this long.
TEMPLATE_SEEN_SECONDS = 10
TEMPLATE_POLL_SECONDS = 0.5
NOT_SERVED = 403  # the status of a ClusterError for what Argo Server does not serve
_TOKEN = re.compile(r"[\x21-\x7e]+( [\x21-\x7e]+)?")  # "Bearer <token>" or the token: one printable line


@dataclass(frozen=True)
class Kind:
    """One kind as Argo Server serves it: its API path, and how hera's service writes it."""

    service: str  # "workflows" (WorkflowsService) or "events" (EventsService)
    path: str  # api/v1/<path>/<namespace>[/<name>]
    noun: str  # hera's methods: create_<noun>, update_<noun>, delete_<noun>
    model: str | None  # in hera.workflows.models; None: written as JSON
    create_request: str
    field: str  # the request's field holding the object
    update_request: str | None


KINDS = {
    "workflowtemplates": Kind("workflows", "workflow-templates", "workflow_template", "WorkflowTemplate",
                              "WorkflowTemplateCreateRequest", "template", "WorkflowTemplateUpdateRequest"),
    "cronworkflows": Kind("workflows", "cron-workflows", "cron_workflow", "CronWorkflow", "CreateCronWorkflowRequest",
                          "cron_workflow", "UpdateCronWorkflowRequest"),
    "workflows": Kind("workflows", "workflows", "workflow", "Workflow", "WorkflowCreateRequest", "workflow", None),
    "sensors": Kind("events", "sensors", "sensor", None, "CreateSensorRequest", "sensor", "UpdateSensorRequest"),
    # read only: `create` checks that the webhook EventSource a @trigger flow publishes to exists
    "eventsources": Kind("events", "event-sources", "event_source", None, "", "event_source", None),
}


class ServerAnswer(Exception):
    """A non-2xx answer of Argo Server: its status and its message (``{"code", "message"}``)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def wanted() -> bool:
    """Whether commands go through Argo Server: ``ARGO_SERVER`` is set."""
    return bool(os.environ.get(SERVER_ENV, "").strip())


def base_url() -> str:
    """Argo Server's URL from the settings, ending in "/" (hera joins its API paths to it)."""
    server = os.environ.get(SERVER_ENV, "").strip()
    if "://" not in server:
        secure = os.environ.get(SECURE_ENV, "true").strip().lower() not in ("false", "0", "no")
        server = "%s://%s" % ("https" if secure else "http", server)
    scheme, _, rest = server.partition("://")
    parts = urlsplit(scheme.lower() + "://" + rest)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in server):
        raise ClusterError("%s=%r: give Argo Server's host:port, or its http:// or https:// URL"
                           % (SERVER_ENV, os.environ.get(SERVER_ENV, "")))
    base = "/".join(p for p in (parts.path.strip("/"), os.environ.get(BASE_HREF_ENV, "").strip().strip("/")) if p)
    return "%s://%s/%s" % (parts.scheme, parts.netloc, base + "/" if base else "")


def verify_tls() -> bool:
    return os.environ.get(SKIP_VERIFY_ENV, "").strip().lower() not in ("true", "1", "yes")


def token() -> str | None:
    """``ARGO_TOKEN``, else what ``argo auth token`` prints (bounded), else None (a server
    that needs no token: its ``server`` auth mode). Never shown in a message."""
    given = os.environ.get(TOKEN_ENV, "").strip()
    if given:
        return _checked(given, TOKEN_ENV)
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
    return _checked(done.stdout.strip(), "what `argo auth token` printed") if done.stdout.strip() else None


def _checked(value: str, where: str) -> str:
    if not _TOKEN.fullmatch(value):
        raise ClusterError("%s is not a token: one line of printable ASCII, as 'Bearer <token>' (not shown here)"
                           % where)
    return value


class ArgoServer(Runs):
    """The Argo objects of one default namespace, through Argo Server; services made lazily."""

    UNCHECKED = "Argo Server does not show these, so not checked"

    def __init__(self, namespace: str = "default"):
        self.namespace = namespace or "default"
        self.host = base_url()
        self._services: dict[str, Any] = {}
        self._token: str | None = None
        self._token_read = False
        self._secrets: tuple[str, ...] = ()
        self._in_use: dict[int, Any] = {}

    @property
    def server(self) -> str:
        return api_guard.server_of(self.host)

    def carries(self, kind: str) -> bool:
        return PLURALS.get(kind) in KINDS

    # -- connection ---------------------------------------------------------------

    def _service(self, name: str):
        if not self._token_read:  # once, whichever service asks first
            self._token, self._token_read = token(), True
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
            self._services[name] = service(host=self.host, verify_ssl=verify_tls(), token=self._token,
                                           namespace=self.namespace, session=_session(self._in_use))
        return self._services[name]

    def _call(self, what: str, call):
        """``call()`` within the total deadline; every failure one ClusterError line."""
        import requests

        try:
            return api_guard.within(api_guard.deadline(), call, self._in_use)
        except api_guard.DeadlineExceeded as e:
            raise self._error("%s: no complete answer from Argo Server at %s within %.0f s (the deadline of every "
                              "API call; %s sets it)" % (what, self.server, e.seconds, api_guard.DEADLINE_ENV)) \
                from None
        except ServerAnswer as e:
            raise self._refused(what, e) from None
        except requests.exceptions.JSONDecodeError:
            raise self._error("%s: %s answered with something other than Argo Server's API (check %s and %s, or a "
                              "login proxy in front of it)" % (what, self.server, SERVER_ENV, BASE_HREF_ENV)) \
                from None
        except requests.exceptions.SSLError as e:
            raise self._error("%s: cannot verify Argo Server's certificate at %s (trust its CA with "
                              "REQUESTS_CA_BUNDLE, or set %s=true): %s"
                              % (what, self.server, SKIP_VERIFY_ENV, root_reason(e))) from None
        except requests.exceptions.RequestException as e:
            raise self._error("%s: cannot reach Argo Server at %s: %s" % (what, self.server, root_reason(e))) \
                from None
        except ValueError as e:  # pydantic: an answer to a write that hera's model refuses
            raise self._error("%s: Argo Server's answer does not fit hera's model: %s" % (what, refusal(e))) \
                from None

    def _refused(self, what: str, answer: ServerAnswer) -> ClusterError:
        said = answer.message
        if answer.status == 401:
            said = ("the token (%s or `argo auth token`) was refused: %s" % (TOKEN_ENV, said) if self._token
                    else "no token was sent: set %s (or install Argo's CLI: mfargo reads `argo auth token`)"
                    % TOKEN_ENV)
        meaning = HTTP_MEANINGS.get(answer.status, "Argo Server error %d" % answer.status)
        return self._error("%s: %s from Argo Server at %s: %s" % (what, meaning, self.server, said), answer.status)

    def _json(self, kind: Kind, method: str, name: str = "", namespace: str | None = None,
              body: dict | None = None, params: dict | None = None) -> dict:
        """One call of Argo Server's JSON API on the service's session, host and token."""
        service = self._service(kind.service)
        path = "api/v1/%s/%s%s" % (kind.path, namespace or self.namespace, "/" + name if name else "")
        headers = {"Authorization": service.token} if service.token else {}
        what = "%s %s%s" % ({"get": "get", "post": "create", "put": "replace", "delete": "delete"}[method],
                            kind.path.replace("-", ""), " " + name if name else "")
        return self._call(what, lambda: service.session.request(
            method, service.host + path, params=params, json=body, headers=headers, verify=service.verify_ssl,
            cert=service.client_certs).json())

    def _kind(self, res: Resource, what: str) -> Kind:
        if res.group == ARGO_GROUP and res.plural in KINDS:
            return KINDS[res.plural]
        raise ClusterError("%s: Argo Server does not serve %s (an admin's, through the Kubernetes API)"
                           % (what, res.plural), status=NOT_SERVED)

    def _typed(self, kind: Kind, body: dict, what: str):
        """``body`` as hera's model, refused (one line) when the model would not send it as is;
        ``body`` itself for a kind written as JSON."""
        if kind.model is None:
            return body
        import hera.workflows.models as models

        doc = _as_hera_holds(kind, body)
        try:
            typed = getattr(models, kind.model).model_validate(doc)
        except ValueError as e:
            raise ClusterError("%s: cannot go through Argo Server: hera's %s model refuses it: %s"
                               % (what, kind.model, refusal(e))) from None
        lost = first_difference(doc, typed.model_dump(mode="json", by_alias=True, exclude_none=True,
                                                      exclude_unset=True, exclude_defaults=True))
        if lost is not None:
            raise ClusterError("%s: cannot go through Argo Server: hera's %s model would change %s (deploy "
                               "through the Kubernetes API: unset %s)" % (what, kind.model, lost, SERVER_ENV))
        return typed

    def _write(self, kind: Kind, verb: str, request_class: str, what: str, *args, **fields) -> dict:
        """hera's ``<verb>_<noun>`` with a request of ``request_class`` made of ``fields``
        (their object typed), or the same as JSON for a kind hera's model cannot hold."""
        ns = fields["namespace"]
        if kind.model is None:
            method = {"create": "post", "update": "put"}[verb]
            return self._json(kind, method, args[0] if args else "", ns, body=fields)
        import hera.workflows.models as models

        request = getattr(models, request_class)(**dict(fields, **{kind.field: self._typed(kind, fields[kind.field],
                                                                                          what)}))
        service = self._service(kind.service)
        method = getattr(service, "%s_%s" % (verb, kind.noun))
        return _plain(self._call(what, lambda: method(*args, request, namespace=ns)))

    # -- generic verbs --------------------------------------------------------------

    def get(self, res: Resource, name: str, namespace: str | None = None) -> dict | None:
        kind = self._kind(res, "get %s %s" % (res.plural, name))
        return unless_missing(lambda: self._json(kind, "get", name, namespace))

    def create(self, res: Resource, body: dict, namespace: str | None = None) -> dict:
        meta = body.get("metadata") or {}
        what = "create %s %s" % (res.plural, meta.get("name") or meta.get("generateName", ""))
        kind = self._kind(res, what)
        fields = {"namespace": namespace or self.namespace, kind.field: body}
        deadline = time.monotonic() + TEMPLATE_SEEN_SECONDS
        while True:
            try:
                return self._write(kind, "create", kind.create_request, what, **fields)
            except ClusterError as e:
                fresh = e.status == 404 and "workflowtemplates" in str(e) and kind.noun != "workflow_template"
                if not fresh or time.monotonic() > deadline:
                    raise
            time.sleep(TEMPLATE_POLL_SECONDS)  # Argo Server's cache has not seen the template written just now

    def replace(self, res: Resource, name: str, body: dict, namespace: str | None = None) -> dict:
        what = "replace %s %s" % (res.plural, name)
        kind = self._kind(res, what)
        if kind.update_request is None:
            raise ClusterError("%s: Argo Server does not replace %s" % (what, res.plural), status=NOT_SERVED)
        return self._write(kind, "update", kind.update_request, what, name, name=name,
                           namespace=namespace or self.namespace, **{kind.field: body})

    def delete(self, res: Resource, name: str, namespace: str | None = None) -> bool:
        kind = self._kind(res, "delete %s %s" % (res.plural, name))
        return unless_missing(lambda: self._json(kind, "delete", name, namespace) is not None, absent=False)

    def list(self, res: Resource, namespace: str | None = None, page_size: int = 100,
             label_selector: str | None = None) -> Iterator[dict]:
        """Every object, page by page (``limit``/``continue``, as Argo Server pages Workflows)."""
        kind = self._kind(res, "list %s" % res.plural)
        params: dict[str, Any] = {"listOptions.limit": page_size}
        if label_selector:
            params["listOptions.labelSelector"] = label_selector
        while True:
            page = self._json(kind, "get", namespace=namespace, params=params)
            yield from page.get("items") or []  # Argo Server answers "items": null for none
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return
            params["listOptions.continue"] = cont

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
        import hera.workflows.models as models

        service = self._service("workflows")
        method = getattr(service, "%s_workflow" % verb)
        body = getattr(models, request)(name=name, namespace=self.namespace)
        return _plain(self._call("%s workflows %s" % (verb, name),
                                 lambda: method(name, body, namespace=self.namespace)))

    def _terminate(self, name: str) -> dict:
        return self._run_verb("terminate", "WorkflowTerminateRequest", name)

    def _suspend(self, name: str) -> dict:
        return self._run_verb("suspend", "WorkflowSuspendRequest", name)

    def _unsuspend(self, name: str) -> dict:
        return self._run_verb("resume", "WorkflowResumeRequest", name)


def _as_hera_holds(kind: Kind, body: dict) -> dict:
    """``body`` in the form hera's model holds: Argo 3.7's CronWorkflow ``schedule`` (what
    ``--argo-version 3.7`` writes) as the one-item ``schedules`` list, which Argo reads the same
    since 3.6 and hera's model requires. (``hera_objects`` hands such a CronWorkflow to hera
    users as the dict it is: they get what mfargo wrote, where this path needs what hera sends.)"""
    spec = body.get("spec") or {}
    if kind.noun != "cron_workflow" or "schedule" not in spec:
        return body
    spec = {k: v for k, v in spec.items() if k != "schedule"}
    spec["schedules"] = [body["spec"]["schedule"]]
    return {**body, "spec": spec}


def _plain(answer) -> dict:
    """hera's model of an answer to a write as the API's JSON."""
    return answer.model_dump(mode="json", by_alias=True, exclude_none=True)


def _session(in_use: dict):
    """A requests session for hera's services: every request has connect/read timeouts, makes
    no retry, records its connection per thread (so ``api_guard.within`` can cut a call at its
    deadline), and turns a non-2xx answer into ``ServerAnswer`` (Argo Server's message, or the
    first line of whatever else answered), before hera reads it."""
    import requests
    from requests.adapters import HTTPAdapter

    class Bounded(requests.Session):
        def request(self, method, url, **kwargs):
            kwargs.setdefault("timeout", TIMEOUT)
            answer = super().request(method, url, **kwargs)
            if not answer.ok:
                raise ServerAnswer(answer.status_code, _message(answer))
            return answer

    session = Bounded()
    adapter = HTTPAdapter(max_retries=0)
    api_guard.watch_pools(adapter.poolmanager, in_use)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session


def _message(answer) -> str:
    try:
        body = answer.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("message"):
        return " ".join(str(body["message"]).split())
    lines = [line.strip() for line in (answer.text or "").splitlines() if line.strip()]
    return lines[0][:200] if lines else answer.reason or "no details"
