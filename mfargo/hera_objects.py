"""What mfargo compiled, as hera's objects, for people who build and submit workflows with hera.

``load`` reads a bundle (the YAML `create --only-yaml` prints or a checked-in file, its
text, or its documents) through hera's public loaders: a WorkflowTemplate or CronWorkflow
becomes ``hera.workflows.WorkflowTemplate`` / ``CronWorkflow`` (``from_dict``). An object is
handed over as hera's only when hera's model holds it whole: its ``to_dict()`` must give back
the document mfargo wrote, field for field. A document hera has no model for (the gang's
Role and RoleBinding, the concurrency ConfigMap), or whose model would refuse or lose a field
(Argo 3.7's CronWorkflow ``spec.schedule``, which hera's model replaced by 4's
``schedules``), stays the plain dict it was, and ``HeraBundle.kept_as_dicts`` says why.

hera is imported here (and in ``mfargo.argo_server``) only, when called: compiling and ``--check`` never import it
(its import costs more than Metaflow's whole compiler; tests/test_imports.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import yaml

from mfargo.base.errors import UserError

# The kinds hera's workflow objects cover, by their class name in ``hera.workflows``.
HERA_KINDS = ("WorkflowTemplate", "CronWorkflow")


@dataclass
class HeraBundle:
    """The bundle in its order: hera objects, and plain dicts for what hera cannot hold."""

    objects: list[Any] = field(default_factory=list)
    kept_as_dicts: dict[str, str] = field(default_factory=dict)  # "Kind/name" -> why


def load(source: str | os.PathLike | list[dict]) -> HeraBundle:
    """The bundle in ``source`` (a YAML file's path, YAML text, or its documents) as hera objects."""
    documents = _documents(source)
    import hera.workflows as hera  # only on this path

    bundle = HeraBundle()
    for doc in documents:
        kind = doc.get("kind")
        name = "%s/%s" % (kind, (doc.get("metadata") or {}).get("name"))
        if kind not in HERA_KINDS:
            bundle.objects.append(doc)
            bundle.kept_as_dicts[name] = "not one of hera's workflow objects (%s)" % ", ".join(HERA_KINDS)
            continue
        try:
            obj = getattr(hera, kind).from_dict(doc)
        except ValueError as error:  # pydantic's ValidationError: hera's model refuses a field
            bundle.objects.append(doc)
            bundle.kept_as_dicts[name] = "hera's %s model refuses it: %s" % (kind, refusal(error))
            continue
        lost = first_difference(doc, obj.to_dict())
        if lost is not None:
            bundle.objects.append(doc)
            bundle.kept_as_dicts[name] = "hera's %s model would change %s" % (kind, lost)
            continue
        bundle.objects.append(obj)
    return bundle


def first_difference(wanted: Any, got: Any, path: str = "") -> str | None:
    """The first path (``spec.templates[2].container``) where ``got`` differs from ``wanted``."""
    if isinstance(wanted, dict) and isinstance(got, dict):
        for key in sorted(set(wanted) | set(got)):
            where = "%s.%s" % (path, key) if path else key
            if key not in got or key not in wanted:
                return where
            found = first_difference(wanted[key], got[key], where)
            if found:
                return found
        return None
    if isinstance(wanted, list) and isinstance(got, list):
        if len(wanted) != len(got):
            return path or "."
        for i, (a, b) in enumerate(zip(wanted, got)):
            found = first_difference(a, b, "%s[%d]" % (path, i))
            if found:
                return found
        return None
    return None if wanted == got and type(wanted) is type(got) else (path or ".")


def _documents(source) -> list[dict]:
    if isinstance(source, list):
        return source
    text = source
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source):
        try:
            with open(source) as f:
                text = f.read()
        except OSError as error:
            raise UserError("cannot read %s: %s" % (source, error.strerror or error))
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as error:
        raise UserError("not YAML: %s" % _first_line(error))
    if not all(isinstance(d, dict) and "kind" in d for d in docs):
        raise UserError("not a bundle mfargo compiled: every document must be an object with a kind")
    return docs


def refusal(error: ValueError) -> str:
    """Where and why pydantic refused a document (its values left out: they are the user's)."""
    try:
        first = error.errors()[0]
        return "%s: %s" % (".".join(str(part) for part in first["loc"]), first["msg"])
    except (AttributeError, IndexError, KeyError, TypeError):
        return _first_line(error)


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
