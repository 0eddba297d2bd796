"""Applying a bundle all or nothing (`create`).

Every object is read first (what was there before, and whose it is), then written in an
order where nothing that starts runs (CronWorkflow, Sensor) exists before what those runs
need: the passive objects (RBAC, WorkflowTemplate, ...), the previous deployment's objects
the bundle no longer has (deleted), the run starters, then the --workflow run. A failure
part-way undoes what was written, in reverse; if undoing fails too, the error says object by
object what is left and how to finish or undo it (the previous versions saved to files).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from typing import Callable

from mfargo.cluster import Cluster, ClusterError, Resource
from mfargo.compiler import naming
from mfargo.base.errors import UserError

STARTS_RUNS = ("CronWorkflow", "Sensor")
# What the API server sets on an object; a restored or re-created object must not send them.
SERVER_FIELDS = ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "selfLink")


class PartialDeploy(UserError):
    """A deploy that failed part-way: what was undone, or what is left (one line)."""


@dataclass
class Write:
    """One write of a deploy, with the object it replaces or deletes (None: nothing there)."""

    kind: str
    name: str
    namespace: str
    res: Resource
    body: dict | None  # None: delete the previous object
    previous: dict | None
    is_run: bool = False

    @property
    def label(self) -> str:
        return "%s %s/%s" % (self.kind, self.namespace, self.name)


@dataclass
class Done:
    write: Write
    action: str  # created, replaced, deleted, started
    result: dict | None


def plan(cluster: Cluster, docs: list[dict], stale: list[dict], namespace: str,
         check_owner: Callable[[str, dict | None], None]) -> list[Write]:
    """Read what each write replaces (``check_owner`` may refuse it) and order the writes.
    Nothing is written here."""
    passive, starters, runs = [], [], []
    for doc in docs:
        meta = doc["metadata"]
        ns = meta.get("namespace") or namespace
        if doc["kind"] == "Workflow" and not meta.get("name"):  # --workflow: a run, started last
            runs.append(Write("Workflow", meta.get("generateName", ""), ns, Resource.of(doc), doc, None, True))
            continue
        res = Resource.of(doc)
        live = cluster.get(res, meta["name"], ns)
        check_owner(doc["kind"], live)
        (starters if doc["kind"] in STARTS_RUNS else passive).append(Write(doc["kind"], meta["name"], ns, res, doc,
                                                                         live))
    deletes = []
    for ref in stale:
        res = Resource.of(ref)
        live = cluster.get(res, ref["name"], ref["namespace"])
        if live is not None:
            check_owner(ref["kind"], live)
            deletes.append(Write(ref["kind"], ref["name"], ref["namespace"], res, None, live))
    return passive + deletes + starters + runs


def run(cluster: Cluster, writes: list[Write], workflow: str, echo) -> list[Done]:
    """Do every write; on a failure undo the done ones (reverse order) and raise PartialDeploy."""
    done: list[Done] = []
    for w in writes:
        try:
            item = _do(cluster, w)
        except ClusterError as e:
            raise _failed(cluster, workflow, done, e, w) from None
        done.append(item)
        if item.action == "started":
            echo("Started run *%s*" % naming.run_id(item.result["metadata"]["name"]))
        elif item.action == "deleted":
            echo("Deleted the previous %s *%s*" % (w.kind, w.name))
        else:
            echo("%s %s *%s*" % (item.action.capitalize(), w.kind, w.name))
    return done


def _do(cluster: Cluster, w: Write) -> Done:
    if w.is_run:
        return Done(w, "started", cluster.create(w.res, w.body, w.namespace))
    if w.body is None:
        cluster.delete(w.res, w.name, w.namespace)
        return Done(w, "deleted", None)
    meta = w.body["metadata"]
    if w.previous is None:
        meta.pop("resourceVersion", None)
        return Done(w, "created", cluster.create(w.res, w.body, w.namespace))
    meta["resourceVersion"] = w.previous["metadata"]["resourceVersion"]  # a change since it was read: 409
    return Done(w, "replaced", cluster.replace(w.res, w.name, w.body, w.namespace))


def restorable(obj: dict) -> dict:
    """``obj`` as it can be sent back: without what the API server sets."""
    out = json.loads(json.dumps(obj))
    meta = out.setdefault("metadata", {})
    for key in SERVER_FIELDS:
        meta.pop(key, None)
    return out


def _undo(cluster: Cluster, item: Done) -> str:
    """Undo one write; returns what was done (ClusterError if it could not be)."""
    w = item.write
    if item.action in ("created", "started"):
        name = item.result["metadata"]["name"] if item.result else w.name
        cluster.delete(w.res, name, w.namespace)
        return "%s: deleted" % w.label if not w.is_run else "run %s: deleted" % name
    if item.action == "replaced":  # the same object (uid and all), at the version this deploy wrote
        body = json.loads(json.dumps(w.previous))
        body["metadata"].pop("managedFields", None)
        body["metadata"]["resourceVersion"] = item.result["metadata"]["resourceVersion"]
        cluster.replace(w.res, w.name, body, w.namespace)
        return "%s: previous version restored" % w.label
    cluster.create(w.res, restorable(w.previous), w.namespace)
    return "%s: re-created" % w.label


def _unanswered(cluster: Cluster, w: Write) -> Done | None:
    """A write that got no answer (a deadline, a dropped connection) may have happened: what
    it did, read back, as a write to undo (None: it did not happen)."""
    live = cluster.get(w.res, w.name, w.namespace)
    if w.body is None:
        return Done(w, "deleted", None) if live is None else None
    if w.previous is None:
        return Done(w, "created", live) if live is not None else None
    if live is not None and live["metadata"].get("resourceVersion") != w.previous["metadata"].get("resourceVersion"):
        return Done(w, "replaced", live)
    return None


def _failed(cluster: Cluster, workflow: str, done: list[Done], error: ClusterError,
            failing: Write | None = None) -> PartialDeploy:
    undone, left, unknown = [], [], []
    if failing is not None and error.status is None and not failing.is_run:
        try:
            maybe = _unanswered(cluster, failing)
            done = done + [maybe] if maybe is not None else done
        except ClusterError as e:
            unknown.append("%s may or may not have been written (the write got no answer and reading it back "
                           "failed: %s); check it with `kubectl get -n %s %s %s`"
                           % (failing.label, e, failing.namespace, _kubectl_type(failing.res), failing.name))
    for item in reversed(done):
        try:
            undone.append(_undo(cluster, item))
        except ClusterError as e:
            left.append((item, e))
    if not left and not unknown:
        return PartialDeploy("deploy of %s failed, nothing changed: %s%s"
                             % (workflow, error, "; undone: " + ", ".join(undone) if undone else ""))
    saved = _save_dir(workflow) if left else None
    return _report(workflow, error, unknown + [_left(item, e, saved) for item, e in left], undone)


def _report(workflow: str, error: ClusterError, report: list[str], undone: list[str]) -> PartialDeploy:
    return PartialDeploy(
        "deploy of %s failed: %s; undoing it failed too, so the namespace holds a mix. Left: %s.%s Everything "
        "else is as before the deploy. To finish the deploy, fix the cause and rerun `argo-workflows create`; "
        "to undo it, run the command given for each object left."
        % (workflow, error, "; ".join(report), " Undone: %s." % ", ".join(undone) if undone else ""))


def _left(item: Done, error: ClusterError, saved: str | None) -> str:
    """One object the rollback could not undo: its state and the command that undoes it."""
    w = item.write
    if item.action in ("created", "started"):
        name = item.result["metadata"]["name"] if item.result else w.name
        return "%s %s/%s created by this deploy is still there (deleting it failed: %s); undo: `kubectl delete -n " \
               "%s %s %s`" % (w.kind, w.namespace, name, error, w.namespace, _kubectl_type(w.res), name)
    path = _save(saved, w)
    if item.action == "replaced":
        state, verb = "is the new version (restoring the previous one failed: %s)" % error, "replace --force"
    else:
        state, verb = "was deleted (re-creating it failed: %s)" % error, "create"
    if path is None:
        return "%s %s; its previous version could not be saved to a file" % (w.label, state)
    return "%s %s; undo: `kubectl %s -f %s`" % (w.label, state, verb, path)


def _kubectl_type(res: Resource) -> str:
    return "%s.%s" % (res.plural, res.group) if res.group else res.plural


def _save_dir(workflow: str) -> str | None:
    try:
        return tempfile.mkdtemp(prefix="mfargo-undo-%s-" % workflow)  # mode 0700
    except OSError:
        return None


def _save(directory: str | None, w: Write) -> str | None:
    """The previous object, as `kubectl replace/create -f` takes it; None if it cannot be written."""
    if directory is None:
        return None
    path = os.path.join(directory, "%s-%s.json" % (w.kind.lower(), w.name))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(restorable(w.previous), f, indent=1, sort_keys=True)
    except OSError:
        return None
    return path
