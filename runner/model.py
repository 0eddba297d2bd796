"""Load a Workflow / WorkflowTemplate into plain dicts and look templates up.

The runner works on the YAML's own dict shape (no schema classes): what Argo
reads is exactly what we read.  This module adds the few things every other
module needs: picking the document, ``spec.templateDefaults`` merging (done once
per template, cached), Go-style duration parsing, node phases and names.
"""
from __future__ import annotations

import copy
import re
import secrets
import string
import time
from pathlib import Path
from typing import Any

from mfargo.base import template_defaults

from . import bounded_yaml


def rfc3339(t: float | None) -> str:
    """A Kubernetes/Argo timestamp (second precision, UTC); '' for no time."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if t else ""


ARGO_KINDS = ("Workflow", "WorkflowTemplate")  # what mfargo writes (a bundle also holds other kinds)

# Node phases (Argo's NodePhase values).
PENDING, RUNNING, SUCCEEDED, FAILED, ERROR, SKIPPED, OMITTED = (
    "Pending", "Running", "Succeeded", "Failed", "Error", "Skipped", "Omitted")
DONE_PHASES = (SUCCEEDED, FAILED, ERROR, SKIPPED, OMITTED)
BAD_PHASES = (FAILED, ERROR)


class WorkflowError(Exception):
    """The workflow document cannot be run (bad shape, missing template...)."""


def load_document(source: Any, deadline: float | None = None) -> dict:
    """Return the Workflow/WorkflowTemplate dict from a path, YAML text or dict. YAML is read
    within :mod:`runner.bounded_yaml`'s bounds (``deadline``: a time.monotonic() value)."""
    if isinstance(source, dict):
        return copy.deepcopy(source)
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source):
        source = Path(source).read_text()
    return parse_document(str(source), deadline)


def parse_document(text: str, deadline: float | None = None) -> dict:
    """The Workflow/WorkflowTemplate dict in YAML ``text`` (load_document's parsing, for text
    already read: an empty or one-line file is text, never a path)."""
    try:
        docs = [d for d in bounded_yaml.load_all(text, deadline) if d]
    except bounded_yaml.YamlError as e:
        raise WorkflowError(str(e)) from None
    for d in docs:
        if isinstance(d, dict) and d.get("kind") in ARGO_KINDS:
            return d
    raise WorkflowError("no Workflow or WorkflowTemplate document found")


class WorkflowDoc:
    """The document plus template lookup with templateDefaults applied."""

    def __init__(self, doc: dict):
        if not isinstance(doc.get("spec"), dict):
            raise WorkflowError("document has no spec")
        self.doc = doc
        self.kind = doc.get("kind", "Workflow")
        self.metadata: dict = doc.get("metadata") or {}
        self.spec: dict = doc["spec"]
        if self.spec.get("workflowTemplateRef"):
            raise WorkflowError("spec.workflowTemplateRef is not supported: run the WorkflowTemplate file itself")
        self._raw = {}
        for t in self.spec.get("templates") or []:
            name = t.get("name")
            if not name:
                raise WorkflowError("a template has no name")
            if name in self._raw:
                raise WorkflowError(f"duplicate template name {name!r}")
            self._raw[name] = t
        self._merged: dict[str, dict] = {}
        if not self.spec.get("entrypoint"):
            raise WorkflowError("spec.entrypoint is missing")

    @property
    def template_names(self) -> list[str]:
        return list(self._raw)

    def template(self, name: str) -> dict:
        """Template ``name`` with ``spec.templateDefaults`` merged in (cached)."""
        if name not in self._merged:
            if name not in self._raw:
                raise WorkflowError(f"template {name!r} not found (templates: {', '.join(self._raw)})")
            # As Argo runs it (the template keeps its own type: a default `container:` never
            # turns a DAG into a container template).
            tmpl = template_defaults.merged(self.spec.get("templateDefaults"), self._raw[name])
            self._merged[name] = tmpl
        return self._merged[name]

    def annotation(self, key: str) -> str | None:
        return (self.metadata.get("annotations") or {}).get(key)


TEMPLATE_TYPES = ("container", "dag", "steps", "resource")  # mfargo's (the preflight refuses others)


def template_type(tmpl: dict) -> str:
    for kind in TEMPLATE_TYPES:
        if tmpl.get(kind) is not None:
            return kind
    raise WorkflowError(f"template {tmpl.get('name')!r} has no container/dag/steps/resource")


_DUR_RE = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_DUR_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: Any) -> float:
    """Seconds from an int, a numeric string (seconds) or a Go duration ("1m30s")."""
    if value is None or value == "":
        return 0.0
    if isinstance(value, bool):
        raise WorkflowError(f"invalid duration {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for m in _DUR_RE.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DUR_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text) or pos == 0:
        raise WorkflowError(f"invalid duration {value!r}")
    return total


def parse_int(value: Any, what: str) -> int:
    """An IntOrString field (``limit: "3"``) as an int."""
    if isinstance(value, bool):
        raise WorkflowError(f"{what}: expected an integer, got {value!r}")
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        raise WorkflowError(f"{what}: expected an integer, got {value!r}") from None


def random_suffix(n: int = 5) -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(n))


def fnv32a(text: str) -> int:
    h = 0x811C9DC5
    for b in text.encode():
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def pod_name(workflow_name: str, template_name: str, node_name: str) -> str:
    """Argo's v2 pod name ``<wf>-<template>-<fnv32a(node name)>``, kept <= 63 chars."""
    suffix = str(fnv32a(node_name))
    prefix = f"{workflow_name}-{template_name}"
    room = 63 - len(suffix) - 1
    if len(prefix) > room:
        prefix = prefix[:room].rstrip("-.")
    return f"{prefix}-{suffix}"


def node_id(workflow_name: str, node_name: str) -> str:
    if node_name == workflow_name:
        return workflow_name
    return f"{workflow_name}-{fnv32a(node_name)}"


def param_str(value: Any) -> str:
    """Parameter values may be ints/bools/floats in YAML; Argo treats them as strings."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        import json
        return json.dumps(value, separators=(",", ":"))
    return str(value)
