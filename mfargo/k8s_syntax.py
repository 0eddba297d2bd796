"""Kubernetes name and value syntax, as pure functions (no I/O, nothing imported but `re`).

Why one module: the document checker (`mfargo.validation`), the decorator checks of the
compiler and the local runner all need the same rules; each rule lives here once, written
from the API server's validation (k8s.io/apimachinery/pkg/util/validation, labels.Parse).
Predicates return a bool; `*_problem` functions return None or a sentence saying what is wrong.
"""

from __future__ import annotations

import re
from typing import NamedTuple

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")  # also label values, when non-empty
ENV_VAR_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# A resource quantity: a signed decimal, then a binary-SI, decimal-SI or exponent suffix.
QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
INTEGER = re.compile(r"^[-+]?\d+$")
ARGO_FIELD_NAME = re.compile(r"^[a-zA-Z0-9][-a-zA-Z0-9]*$")  # Argo's template/task/step names
LABEL_MAX = 63
SUBDOMAIN_MAX = 253
ARGO_FIELD_NAME_MAX = 128


def is_dns1123_label(name: str, limit: int = LABEL_MAX) -> bool:
    """Names of most objects and of pods' hostnames: lowercase alphanumerics and '-'."""
    return len(name) <= limit and bool(DNS1123_LABEL.match(name))


def is_dns1123_subdomain(name: str, limit: int = SUBDOMAIN_MAX) -> bool:
    """Names of most objects (WorkflowTemplates, JobSets...): dot-separated DNS-1123 labels."""
    return len(name) <= limit and bool(DNS1123_SUBDOMAIN.match(name))


def is_dns1035_label(name: str, limit: int = LABEL_MAX) -> bool:
    """Names that become Services or Jobs under a JobSet: a DNS-1123 label starting with a letter."""
    return len(name) <= limit and bool(DNS1035_LABEL.match(name))


def is_argo_field_name(name: object) -> bool:
    """Argo's template, task and step names: 1-128 chars of [a-zA-Z0-9-], alphanumeric first."""
    return isinstance(name, str) and len(name) <= ARGO_FIELD_NAME_MAX and bool(ARGO_FIELD_NAME.match(name))


def path_problem(path: object, absolute: bool) -> str | None:
    """A volume path: ``mountPath``/``hostPath.path`` (absolute) or ``subPath`` (relative),
    never stepping back with a ``..`` element (the API server's validatePathNoBacksteps,
    validateLocalDescendingPath)."""
    if not isinstance(path, str) or not path:
        return "%r must be a non-empty path" % (path,)
    if path.startswith("/") != absolute:
        return "%r must be %s path" % (path, "an absolute" if absolute else "a relative")
    if ".." in path.split("/"):
        return "%r must not contain '..'" % path
    if "\0" in path:
        return "%r must not contain a NUL character" % path
    return None


def is_env_var_name(name: str) -> bool:
    return bool(ENV_VAR_NAME.match(name))


def is_quantity(text: str) -> bool:
    """'500m', '1.5Gi', '2', '1e3'... as resources.requests/limits accept them."""
    return bool(QUANTITY.match(text))


def label_key_problem(key: str) -> str | None:
    """A label/annotation key is [prefix/]name: a DNS subdomain, then a 1-63 char name."""
    prefix, _, name = str(key).rpartition("/")
    if prefix and not is_dns1123_subdomain(prefix):
        return "prefix %r must be a lowercase DNS subdomain" % prefix
    if len(name) > LABEL_MAX or not LABEL_NAME.match(name):
        return "name %r must be 1-63 chars of [A-Za-z0-9-_.], alphanumeric at both ends" % name
    return None


def label_value_problem(value: str) -> str | None:
    if value and (len(value) > LABEL_MAX or not LABEL_NAME.match(value)):
        return "label value %r must be <= 63 chars of [A-Za-z0-9-_.], alphanumeric at both ends" % value
    return None


def jobset_child_job_name(jobset: str, replicated_job: str, index: int) -> str:
    """The JobSet controller names the Jobs of a replicatedJob `<jobset>-<rjob>-<index>`."""
    return "%s-%s-%d" % (jobset, replicated_job, index)


def child_job_problem(jobset: str, replicated_job: str, replicas: int) -> str | None:
    """The longest child Job name of a replicatedJob must be a DNS-1035 label (the webhook's rule)."""
    job = jobset_child_job_name(jobset, replicated_job, max(replicas - 1, 0))
    if not is_dns1035_label(job):
        return "child Job name %r must be a DNS-1035 label of at most 63 chars" % job
    return None


class Requirement(NamedTuple):
    """One label-selector requirement. `op` is one of == != in notin exists !exists > <
    ('=' is read as '==')."""

    key: str
    op: str
    values: list[str]

    def __str__(self) -> str:
        if self.op == "exists":
            return self.key
        if self.op == "!exists":
            return "!" + self.key
        if self.op in ("in", "notin"):
            return "%s %s (%s)" % (self.key, self.op, ",".join(self.values))
        return "%s %s %s" % (self.key, self.op, self.values[0])


# One requirement: [!]key, key op value, key in|notin (v1, v2).
_REQUIREMENT = re.compile(r"\s*(!?)\s*([^\s!=(),<>]+)(?:\s*(==|=|!=|<|>)\s*([^\s!=(),<>]*)"
                          r"|\s+(in|notin)\s*\(([^()]*)\))?\s*")


def parse_selector(expr: str) -> list[Requirement]:
    """Parse a Kubernetes label selector (also Argo's resource success/failureCondition, whose
    keys are field paths). Raises ValueError saying what is wrong."""
    if not expr.strip():
        raise ValueError("empty selector")
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(expr + ","):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    reqs = []
    for part in parts:
        m = _REQUIREMENT.fullmatch(part)
        if not m or (m.group(1) and m.group(3, 5) != (None, None)):
            raise ValueError("cannot parse %r (requirements are `key op value`, joined by ',')" % part.strip())
        neg, name, op, value, set_op, values = m.groups()
        vals = [v.strip() for v in values.split(",")] if set_op else [value] if op else []
        if set_op and not all(vals):
            raise ValueError("%s needs (value[, value...])" % set_op)
        if op in ("<", ">") and not INTEGER.match(value):
            raise ValueError("%s %s needs an integer, got %r" % (name, op, value))
        problem = label_key_problem(name) or next(filter(None, map(label_value_problem, vals)), None)
        if problem:
            raise ValueError(problem)
        kind = "!exists" if neg else {"=": "=="}.get(op, op) if op else set_op or "exists"
        reqs.append(Requirement(name, kind, vals))
    return reqs
