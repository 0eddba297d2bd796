"""Names and paths from the YAML that become paths on this machine stay in the work directory.

Users ``mfargo run`` YAML they did not write, and the runner runs as root where it can.
The workflow's name and its template names make pod names, pod names make
``WORK/pods/<pod>``, a PVC ``claimName`` makes ``WORK/volumes/pvc/<claim>``, a
``mountPath`` a directory of the pod (mfargo writes no ``hostPath``, ``subPath`` nor
``workingDir``: the preflight refuses them).
Each is held to the API server's rule for it (``mfargo.base.k8s_syntax``, one place for
each rule), which admits no ``/`` and no ``..`` in a name; paths that join a volume are
also checked after symlinks are followed (:func:`join_inside`), since pods write into
shared PVCs. Static values are checked before the run (:func:`check_document`); values
known only at run time (``{{...}}`` tags) when the pod is created (:func:`pod_problem`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from mfargo.base import k8s_syntax

from .model import WorkflowDoc, WorkflowError

WORKFLOW_NAME_MAX = 63  # Argo labels pods with the workflow's name: a label value


def _templated(value: object) -> bool:
    return isinstance(value, str) and "{{" in value


def workflow_name_problem(name: object) -> str | None:
    if not isinstance(name, str) or not k8s_syntax.is_dns1123_subdomain(name, WORKFLOW_NAME_MAX):
        return "workflow name %r must be a lowercase DNS subdomain of at most %d chars" % (name, WORKFLOW_NAME_MAX)
    return None


def pod_name_problem(name: object) -> str | None:
    if not isinstance(name, str) or not k8s_syntax.is_dns1123_subdomain(name):
        return "pod name %r must be a lowercase DNS subdomain" % (name,)
    return None


def _later(value: object, static: bool) -> bool:
    """Before the run (``static``), a ``{{...}}`` value is checked when the pod is created."""
    return static and _templated(value)


def volume_problem(v: object, static: bool = False) -> str | None:
    """A pod volume: its name, a PVC's claimName."""
    if not isinstance(v, dict):
        return "volume %r must be a mapping" % (v,)
    name = v.get("name")
    if not _later(name, static) and not (isinstance(name, str) and k8s_syntax.is_dns1123_label(name)):
        return "volume name %r must be a DNS-1123 label" % (name,)
    pvc = v.get("persistentVolumeClaim")
    claim = pvc.get("claimName") if isinstance(pvc, dict) else None
    if claim is not None and not _later(claim, static) and not k8s_syntax.is_dns1123_subdomain(str(claim)):
        return "volume %r: claimName %r must be a lowercase DNS subdomain" % (name, claim)
    return None


def container_problem(c: object, static: bool = False) -> str | None:
    """A container's volumeMounts (name, mountPath)."""
    if not isinstance(c, dict):
        return "container %r must be a mapping" % (c,)
    where = "container %r" % (c.get("name") or "main")
    for m in c.get("volumeMounts") or []:
        if not isinstance(m, dict):
            return "%s: volumeMount %r must be a mapping" % (where, m)
        name = m.get("name")
        if not _later(name, static) and not (isinstance(name, str) and k8s_syntax.is_dns1123_label(name)):
            return "%s: volumeMount name %r must be a DNS-1123 label" % (where, name)
        if not _later(m.get("mountPath"), static):
            problem = k8s_syntax.path_problem(m.get("mountPath"), absolute=True)
            if problem:
                return "%s: volumeMount %r: mountPath %s" % (where, name, problem)
    return None


def pod_problem(name: str, volumes: list, containers: list) -> str | None:
    """Everything of a pod about to be created that becomes a path (values substituted)."""
    return (pod_name_problem(name) or next(filter(None, map(volume_problem, volumes)), None)
            or next(filter(None, map(container_problem, containers)), None))


def join_inside(root: Path, relative: str, what: str) -> Path:
    """``root / relative``, refused (ValueError naming ``what``) unless it stays inside ``root``
    with symlinks followed: a pod may have left a link to ``/`` in a shared PVC."""
    path = root / relative
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(path)]) != real_root:
        raise ValueError("%s %r leaves its volume" % (what, relative))
    return path


def check_document(doc: WorkflowDoc) -> None:
    """Raise WorkflowError (one line) for the first static name or path that would leave
    the work directory or break the API server's rules; templated ones wait for the pod."""
    meta = doc.metadata
    for key in ("name", "generateName"):
        value = meta.get(key)
        if value is None or _templated(value):
            continue
        full = str(value) + ("xxxxx" if key == "generateName" else "")
        if not k8s_syntax.is_dns1123_subdomain(full, WORKFLOW_NAME_MAX):
            raise WorkflowError("metadata.%s %r must be a lowercase DNS subdomain of at most %d chars"
                                % (key, value, WORKFLOW_NAME_MAX - (5 if key == "generateName" else 0)))
    for name in doc.template_names:
        if not k8s_syntax.is_argo_field_name(name):
            raise WorkflowError("template name %r must be 1-128 chars of [a-zA-Z0-9-], alphanumeric first" % name)
    for name in doc.template_names:
        tmpl = doc.template(name)
        for v in tmpl.get("volumes") or []:
            problem = volume_problem(v, static=True)
            if problem:
                raise WorkflowError("template %r: %s" % (name, problem))
        if isinstance(tmpl.get("container"), dict):
            problem = container_problem(tmpl["container"], static=True)
            if problem:
                raise WorkflowError("template %r: %s" % (name, problem))
        for key in ("dag", "steps"):
            for task in _tasks(tmpl.get(key)):
                tname = task.get("name")
                if not _templated(tname) and not k8s_syntax.is_argo_field_name(tname):
                    raise WorkflowError("template %r: task/step name %r must be 1-128 chars of [a-zA-Z0-9-], "
                                        "alphanumeric first" % (name, tname))


def _tasks(body: object) -> Iterator[dict]:
    if isinstance(body, dict):
        yield from (t for t in body.get("tasks") or [] if isinstance(t, dict))
    elif isinstance(body, list):
        for group in body:
            yield from (s for s in (group if isinstance(group, list) else [group]) if isinstance(s, dict))
