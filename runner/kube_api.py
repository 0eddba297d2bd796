"""A read-only loopback Kubernetes API for pods: the run's JobSets, Jobs and pods.

In a cluster a pod reaches the API server at KUBERNETES_SERVICE_HOST/PORT; here every pod
gets those variables pointing at this server, so in-pod code that reads the cluster (the
gang failure report) runs unchanged. It answers GET, and DELETE of a finished JobSet (the
report frees its gang's), without authentication (it listens on 127.0.0.1 and holds
nothing secret):

    /apis/jobset.x-k8s.io/v1alpha2/namespaces/<ns>/jobsets/<name>
    /apis/batch/v1/namespaces/<ns>/jobs?labelSelector=k=v,...
    /api/v1/namespaces/<ns>/pods?labelSelector=k=v,...

Jobs and pods are those of each JobSet's current generation (``kube_objects.py``).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import re
from urllib.parse import parse_qs, urlsplit

from mfargo.base import k8s_syntax

from .jobset import GROUP, JobSetController

_JOBSET = re.compile(rf"^/apis/{re.escape(GROUP)}/v1alpha2/namespaces/([^/]+)/jobsets/([^/]+)$")
_LIST = re.compile(r"^/(?:apis/batch/v1|api/v1)/namespaces/([^/]+)/(jobs|pods)$")
HOST = "127.0.0.1"
MAX_BODY = 4096  # a DELETE's options; nothing else sends a body


def _selector(text: str) -> dict[str, str] | None:
    """The labels an equality-based label selector (k=v or k==v, comma-separated) asks for;
    None for any other selector (parsed as everywhere in mfargo: k8s_syntax)."""
    if not text.strip():
        return {}
    try:
        requirements = k8s_syntax.parse_selector(text)
    except ValueError:
        return None
    if any(r.op != "==" for r in requirements):
        return None
    return {r.key: r.values[0] for r in requirements}


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
            "message": message, "code": code}


def answer(controller: JobSetController, method: str, target: str) -> tuple[int, dict]:
    """(HTTP status, JSON body) for one request."""
    url = urlsplit(target)
    m = _JOBSET.match(url.path)
    if method == "DELETE" and m:
        if not controller.delete(m.group(2), m.group(1)):
            return 409, _status(409, "Conflict", f'jobsets.{GROUP} "{m.group(2)}" is not finished')
        return 200, _status(200, "", "deleted") | {"status": "Success"}
    if method != "GET":
        return 405, _status(405, "MethodNotAllowed", "the local runner's API serves GET and JobSet DELETE")
    if m:
        js = controller.get(m.group(2), m.group(1))
        if js is None:
            return 404, _status(404, "NotFound", f'jobsets.{GROUP} "{m.group(2)}" not found')
        return 200, js.snapshot()
    m = _LIST.match(url.path)
    if m:
        namespace, kind = m.groups()
        labels = _selector((parse_qs(url.query).get("labelSelector") or [""])[0])
        if labels is None:
            return 400, _status(400, "BadRequest", "only equality label selectors are supported locally")
        items = [o for (ns, _), js in sorted(controller.jobsets.items()) if ns == namespace
                 for o in js.objects.select(kind, labels)]
        return 200, {"apiVersion": "batch/v1" if kind == "jobs" else "v1",
                     "kind": "JobList" if kind == "jobs" else "PodList", "items": items}
    return 404, _status(404, "NotFound", f"the local runner does not serve {url.path}")


class KubeApiServer:
    """The server, started on a free port for one run (``env`` is what pods get)."""

    def __init__(self, controller: JobSetController):
        self.controller = controller
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = self.server.sockets[0].getsockname()[1]

    @property
    def env(self) -> dict[str, str]:
        return {"KUBERNETES_SERVICE_HOST": HOST, "KUBERNETES_SERVICE_PORT": str(self.port)}

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = (await reader.readline()).decode("latin-1").split()
            length = 0
            while header := (await reader.readline()).strip():  # only the body's length matters
                name, _, value = header.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length" and value.strip().isdigit():
                    length = min(int(value), MAX_BODY)
            await reader.readexactly(length)  # DeleteOptions: read, not needed
            code, body = answer(self.controller, *request[:2]) if len(request) >= 2 else \
                (400, _status(400, "BadRequest", "malformed request"))
            data = json.dumps(body).encode()
            writer.write(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n%s" % (code, len(data), data))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
