"""A small Metaflow metadata service for the tests and the loopback cluster (stdlib only).

Why our own: the service API's published implementations either are not on PyPI (Netflix's
metaflow-service) or drop the run ids Metaflow's Argo integration chooses (metaflow-local-service
0.2.0 numbers every new run, so `argo-...` runs never exist). This one serves exactly the part of
the API that Metaflow 2.19's `ServiceMetadataProvider` (plugins/metadata_providers/service.py)
and its client (client/core.py) call, with the request and response fields those read; it keeps
everything in memory, so a restart forgets every run.

    python e2e/metadata_service.py --host 10.77.0.1 --port 23880   # prints its URL, then serves
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

# Metaflow turns features on by this version (ping's METADATA_SERVICE_VERSION header): heartbeats
# from 2.0.4, attempt gets from 2.0.6, tag mutation from 2.3.0, filtered_tasks from 2.5.0.
SERVICE_VERSION = "2.5.0"
HEARTBEAT_WAIT_SECONDS = 10


class HttpError(Exception):
    """An answer other than 200: its status and a one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _now_ms() -> int:
    return int(time.time() * 1000)


class Store:
    """Flows, runs, steps, tasks, their metadata and artifacts, keyed by their path ids."""

    def __init__(self):
        self.lock = threading.Lock()
        self.objects: dict[tuple, dict] = {}     # (flow[, run[, step[, task]]]) -> object
        self.metadata: dict[tuple, list] = {}    # task key -> metadata entries, in arrival order
        self.artifacts: dict[tuple, dict] = {}   # task key -> {(attempt, name): artifact}
        self.next_id = 0                         # numeric run and task ids, one sequence

    def get(self, key: tuple) -> dict:
        obj = self.objects.get(key)
        if obj is None:
            raise HttpError(404, "not found: " + "/".join(key))
        return obj

    def children(self, key: tuple) -> list[dict]:
        """The objects one level below key (404 if key does not exist; () is the root)."""
        if key:
            self.get(key)
        return [o for k, o in self.objects.items() if len(k) == len(key) + 1 and k[:len(key)] == key]

    def create(self, key: tuple, fields: dict) -> dict:
        """Create key (409 if it exists, 404 if its parent does not); the stored object."""
        if key in self.objects:
            raise HttpError(409, "exists: " + "/".join(key))
        if len(key) > 1:
            self.get(key[:-1])
        names = ("flow_id", "run_number", "step_name", "task_id")
        obj = {"ts_epoch": _now_ms(), **fields, **dict(zip(names, key))}
        if len(key) > 1:
            obj.setdefault("user_name", None)
            obj["tags"] = list(fields.get("tags") or [])
            obj["system_tags"] = list(fields.get("system_tags") or [])
        if len(key) in (2, 4):
            obj["last_heartbeat_ts"] = None
        self.objects[key] = obj
        if len(key) == 4:
            self.metadata[key], self.artifacts[key] = [], {}
        return obj

    def new_id(self) -> str:
        self.next_id += 1
        return str(self.next_id)

    def done_attempt(self, key: tuple) -> int | None:
        """The task's latest finished attempt (its `attempt-done` metadata), as the local provider reads it."""
        done = [int(m["value"]) for m in self.metadata[key] if m.get("field_name") == "attempt-done"]
        return max(done) if done else None


class Api:
    """The routes: (method, path segments, query, JSON body) -> JSON-able answer."""

    def __init__(self, store: Store):
        self.store = store

    def handle(self, method: str, parts: list[str], query: dict, body):
        with self.store.lock:
            if parts == ["ping"] and method == "GET":
                return "pong"
            if parts == ["flows"] and method == "GET":
                return self.store.children(())
            if len(parts) < 2 or parts[0] != "flows":
                raise HttpError(404, "no such endpoint")
            flow, rest = parts[1], parts[2:]
            if not rest:
                return self.store.get((flow,)) if method == "GET" else self._create((flow,), body, method)
            if rest == ["runs"]:
                return self.store.children((flow,))
            if rest == ["run"]:
                run_id = str((body or {}).get("run_number") or self.store.new_id())
                return self._create((flow, run_id), body, method)
            if rest[0] != "runs" or len(rest) < 2:
                raise HttpError(404, "no such endpoint")
            return self._run((flow, rest[1]), rest[2:], method, query, body)

    def _create(self, key: tuple, body, method: str):
        if method != "POST":
            raise HttpError(405, "use POST to create")
        return self.store.create(key, dict(body or {}))

    def _run(self, run: tuple, rest: list[str], method: str, query: dict, body):
        store = self.store
        if not rest:
            return store.get(run)
        if rest == ["heartbeat"]:
            return self._heartbeat(run)
        if rest == ["steps"]:
            return store.children(run)
        if rest == ["tag", "mutate"] and method == "PATCH":
            return self._mutate_tags(run, body or {})
        if rest[0] != "steps" or len(rest) < 2:
            raise HttpError(404, "no such endpoint")
        step, rest = run + (rest[1],), rest[2:]
        if not rest:
            return store.get(step)
        if rest == ["step"]:
            return self._create(step, body, method)
        if rest == ["tasks"]:
            return store.children(step)
        if rest == ["task"]:
            task_id = str((body or {}).get("task_id") or store.new_id())
            return self._create(step + (task_id,), body, method)
        if rest == ["filtered_tasks"]:
            return self._filtered_tasks(step, query)
        if rest[0] != "tasks" or len(rest) < 2:
            raise HttpError(404, "no such endpoint")
        return self._task(step + (rest[1],), rest[2:], method, body)

    def _task(self, task: tuple, rest: list[str], method: str, body):
        store = self.store
        store.get(task)
        if not rest:
            return store.get(task)
        if rest == ["heartbeat"]:
            return self._heartbeat(task)
        if rest == ["metadata"]:
            if method == "POST":
                store.metadata[task].extend(dict(m) for m in body or [])
                return {}
            return list(store.metadata[task])
        if rest == ["artifact"] and method == "POST":
            for art in body or []:
                store.artifacts[task][(int(art.get("attempt_id") or 0), art["name"])] = {"ts_epoch": _now_ms(), **art}
            return {}
        if rest == ["artifacts"]:
            return self._artifacts(task, store.done_attempt(task))
        if len(rest) == 3 and rest[0] == "attempt" and rest[2] == "artifacts":
            return self._artifacts(task, int(rest[1]))
        if rest[0] == "artifacts" and (len(rest) == 2 or (len(rest) == 4 and rest[2] == "attempt")):
            attempt = int(rest[3]) if len(rest) == 4 else store.done_attempt(task)
            art = store.artifacts[task].get((attempt, rest[1]))
            if art is None:
                raise HttpError(404, f"no artifact {rest[1]} in attempt {attempt}")
            return art
        raise HttpError(404, "no such endpoint")

    def _artifacts(self, task: tuple, attempt: int | None) -> list[dict]:
        return [a for (n, _), a in sorted(self.store.artifacts[task].items()) if n == attempt]

    def _heartbeat(self, key: tuple):
        """Metaflow's heartbeat sidecar reads a JSON string that itself holds JSON."""
        self.store.get(key)["last_heartbeat_ts"] = int(time.time())
        return json.dumps({"wait_time_in_seconds": HEARTBEAT_WAIT_SECONDS})

    def _mutate_tags(self, run: tuple, body: dict):
        """Additions, then removals, as one step (Metaflow's `mutate_user_tags_for_run`)."""
        obj = self.store.get(run)
        add, remove = body.get("tags_to_add") or [], body.get("tags_to_remove") or []
        if not all(isinstance(t, str) for t in [*add, *remove]):
            raise HttpError(422, "tags must be strings")
        tags = [t for t in dict.fromkeys([*obj["tags"], *add]) if t not in set(remove)]
        obj["tags"] = tags
        return {"tags": tags}

    def _filtered_tasks(self, step: tuple, query: dict) -> list[str]:
        """Pathspecs of the step's tasks with a metadata field whose value the pattern finds."""
        field = (query.get("metadata_field_name") or [None])[0]
        pattern = re.compile((query.get("pattern") or [".*"])[0])
        out = []
        for task in self.store.children(step):
            key = step + (task["task_id"],)
            if not field or any(m.get("field_name") == field and pattern.search(str(m.get("value", "")))
                                for m in self.store.metadata[key]):
                out.append("/".join(key))
        return out


def make_handler(api: Api):
    """A request handler class bound to api."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, method: str):
            url = urlsplit(self.path)
            parts = [unquote(p) for p in url.path.split("/") if p]
            try:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw.strip() else None
                status, answer = 200, api.handle(method, parts, parse_qs(url.query), body)
            except HttpError as e:
                status, answer = e.status, {"message": str(e)}
            except (ValueError, KeyError, TypeError) as e:
                status, answer = 400, {"message": f"bad request: {e}"}
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("METADATA_SERVICE_VERSION", SERVICE_VERSION)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._answer("GET")

        def do_POST(self):
            self._answer("POST")

        def do_PATCH(self):
            self._answer("PATCH")

        def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
            pass  # one line per request would drown the cluster's logs

    return Handler


def serve(host: str, port: int) -> ThreadingHTTPServer:
    """A bound server (port 0: any free port); call serve_forever() on it."""
    server = ThreadingHTTPServer((host, port), make_handler(Api(Store())))
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server = serve(args.host, args.port)
    print(f"http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
