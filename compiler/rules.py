"""What the cluster or Metaflow enforces on decorator attributes and create options,
checked at compile time so a bad value is one line naming the step and the decorator
instead of YAML the cluster rejects (or, worse, accepts and misreads).

Kubernetes syntax itself lives in ``mfargo.k8s_syntax``; this module says which field
must follow which rule.
"""

from __future__ import annotations

import math
import re

from mfargo import k8s_syntax as k8s

from .errors import CompileError

MAX_MEMORY_MB = 2**30  # 1 PiB: anything larger is a typo, not a pod
TAG_MAX = 500  # Metaflow's tag rule: 1-500 characters
_CRON_FIELD = re.compile(r"^[A-Za-z0-9*?/,#LW-]+$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def positive_number(step: str, decorator: str, key: str, value, allow_zero: bool = False) -> float:
    """A finite number > 0 (>= 0 with ``allow_zero``)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CompileError("%s must be a number, not %r" % (key, value), step, decorator) from None
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        raise CompileError("%s must be a finite number %s 0, not %r" % (key, ">=" if allow_zero else ">", value),
                           step, decorator)
    return number


def count(step: str, decorator: str, key: str, value, minimum: int = 0) -> int:
    """A whole number >= ``minimum`` (bools and fractions refused)."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise CompileError("%s must be a whole number >= %d, not %r" % (key, minimum, value), step, decorator)
    try:
        number = int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise CompileError("%s must be a whole number >= %d, not %r" % (key, minimum, value), step, decorator) \
            from None
    if number < minimum:
        raise CompileError("%s must be a whole number >= %d, not %r" % (key, minimum, value), step, decorator)
    return number


def memory_mb(step: str, decorator: str, key: str, value) -> float:
    number = positive_number(step, decorator, key, value)
    if number > MAX_MEMORY_MB:
        raise CompileError("%s=%r MB is more than 1 PiB" % (key, value), step, decorator)
    return number


def mapping(step: str, decorator: str, key: str, value) -> dict:
    if value is None or value == "":
        return {}
    if not isinstance(value, dict):
        raise CompileError("%s must be a dict, not %r" % (key, value), step, decorator)
    return value


def string_list(step: str, decorator: str, key: str, value) -> list[str]:
    """A list of names, or one comma-separated string (Metaflow accepts both)."""
    if not value:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise CompileError("%s must be a list of names, not %r" % (key, value), step, decorator)
    return list(value)


def object_names(step: str, decorator: str, key: str, names) -> None:
    for name in names:
        if not k8s.is_dns1123_subdomain(name):
            raise CompileError("%s %r is not a Kubernetes object name (lowercase DNS-1123 subdomain)"
                               % (key, name), step, decorator)


def labels(step: str, decorator: str, key: str, pairs: dict, values_are_labels: bool = True) -> None:
    """Label (or annotation, ``values_are_labels=False``) keys and values."""
    for k, v in pairs.items():
        problem = k8s.label_key_problem(k) if isinstance(k, str) else "keys must be strings"
        if problem is None and not isinstance(v, str):
            problem = "value of %r must be a string, not %r" % (k, v)
        if problem is None and values_are_labels:
            problem = k8s.label_value_problem(v)
        if problem:
            raise CompileError("%s: %s" % (key, problem), step, decorator)


def env_name(step: str, decorator: str, name) -> None:
    if not isinstance(name, str) or not k8s.is_env_var_name(name):
        raise CompileError("env var name %r must match [-._a-zA-Z][-._a-zA-Z0-9]*" % (name,), step, decorator)


def image(step: str, decorator: str, value) -> None:
    if not isinstance(value, str) or not value.strip() or value != value.strip() or " " in value:
        raise CompileError("image %r must be a non-empty image reference without spaces" % (value,), step, decorator)


def absolute_path(step: str, decorator: str, key: str, value) -> None:
    if not isinstance(value, str) or not value.startswith("/"):
        raise CompileError("%s %r must be an absolute path" % (key, value), step, decorator)


def python_identifier(step: str, decorator: str, key: str, value) -> None:
    if value is not None and (not isinstance(value, str) or not _IDENTIFIER.match(value)):
        raise CompileError("%s %r must be a Python identifier (it names an artifact)" % (key, value),
                           step, decorator)


def cron(expression: str) -> None:
    """Five (or Metaflow's six) fields of cron syntax."""
    fields = str(expression).split()
    if len(fields) not in (5, 6) or not all(_CRON_FIELD.match(f) for f in fields):
        raise CompileError("cron %r is not a cron expression (5 fields, e.g. '0 * * * *')" % (expression,),
                           decorator="schedule")


def tag(value) -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= TAG_MAX:
        raise CompileError("--tag %r: Metaflow tags are 1-%d characters" % (_short(value), TAG_MAX))


def _short(value):
    return value[:40] + "..." if isinstance(value, str) and len(value) > 40 else value
