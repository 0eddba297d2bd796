"""Replace Argo template tags (``{{var}}``, and ``{{= expr}}`` by :mod:`runner.expr`) in strings and objects.

Argo substitutes in several passes, leaving tags it cannot resolve yet for later.
The runner instead substitutes each field at the moment it is used, with every
variable that exists at that moment (globals, inputs, finished tasks/steps, item,
retries, pod name...).  So a tag that still does not resolve is a real mistake and
raises :class:`SubstitutionError` naming it - never an empty string.

Values live in a nested dict (the :class:`Scope`), the same shape expressions see:
``workflow.parameters.x``, ``inputs.parameters.x``, ``tasks.a.outputs.parameters.p``,
``steps.s.status``, ``item`` / ``item.key``, ``retries``, ``pod.name``...
Special simple tags: ``workflow.parameters`` / ``workflow.parameters.json`` and
``inputs.parameters`` (JSON list of name/value objects),
``workflow.labels.json`` / ``workflow.annotations.json``,
``workflow.creationTimestamp.<strftime char>`` and ``.RFC3339``.
"""
from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from . import expr as _expr

TAG_RE = re.compile(r"\{\{(.*?)\}\}", re.S)


class SubstitutionError(Exception):
    """A tag could not be resolved."""


class AggregateMap(dict):
    """A fan-out's ``outputs.parameters``: by name, each parameter's aggregated JSON list
    (``tasks.x.outputs.parameters.p``); as a whole (``tasks.x.outputs.parameters``) a JSON
    list of per-child maps, as Argo's controller builds it (workflow/controller/operator.go,
    processAggregateNodeOutputs)."""

    def __init__(self, by_name: dict[str, str], per_child: list[dict[str, str]]):
        super().__init__(by_name)
        self.per_child = per_child

    def __copy__(self) -> "AggregateMap":
        return AggregateMap(dict(self), list(self.per_child))


def render(value: Any) -> str:
    """String form of a scope value inside a simple tag."""
    if isinstance(value, str):
        return value
    if isinstance(value, AggregateMap):
        return json.dumps(value.per_child, separators=(",", ":"))
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return _expr.format_value(value)


class Scope:
    """Nested variables available to tags and expressions."""

    def __init__(self, data: dict[str, Any] | None = None):
        self.data: dict[str, Any] = data or {}

    def child(self, **overrides: Any) -> "Scope":
        data = dict(self.data)
        data.update(overrides)
        return Scope(data)

    def with_item(self, item: Any) -> "Scope":
        return self.child(item=item)

    # -- lookup ---------------------------------------------------------------
    def lookup(self, name: str) -> Any:
        name = name.strip()
        special = self._special(name)
        if special is not None:
            return special
        cur: Any = self.data
        parts = name.split(".")
        i = 0
        while i < len(parts):
            if isinstance(cur, dict):
                rest = ".".join(parts[i:])
                if i > 0 and len(parts) - i > 1 and rest in cur:
                    return cur[rest]  # a key containing dots (label keys)
                if parts[i] in cur:
                    cur = cur[parts[i]]
                    i += 1
                    continue
            raise SubstitutionError(self._unknown(name, parts[:i]))
        return cur

    def _special(self, name: str) -> str | None:
        wf = self.data.get("workflow") or {}
        if name in ("workflow.parameters", "workflow.parameters.json"):
            params = wf.get("parameters") or {}
            return json.dumps([{"name": k, "value": v} for k, v in params.items()],
                              separators=(",", ":"))
        if name == "inputs.parameters":
            params = (self.data.get("inputs") or {}).get("parameters")
            if params is not None:
                return json.dumps([{"name": k, "value": v} for k, v in params.items()],
                                  separators=(",", ":"))
        if name in ("workflow.labels.json", "workflow.annotations.json"):
            key = name.split(".")[1]
            return json.dumps(wf.get(key) or {}, separators=(",", ":"))
        if name.startswith("workflow.creationTimestamp.") and "creationTimestamp" in wf:
            fmt = name.split(".", 2)[2]
            ts = datetime.strptime(wf["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
            if fmt == "RFC3339":
                return wf["creationTimestamp"]
            if fmt == "s":
                return str(int(ts.timestamp()))
            if len(fmt) == 1:
                return ts.strftime("%" + fmt)
        return None

    def _unknown(self, name: str, found: list[str]) -> str:
        cur: Any = self.data
        for p in found:
            cur = cur[p]
        prefix = ".".join(found)
        if isinstance(cur, dict) and cur:
            avail = ", ".join(sorted(cur)[:20])
            where = f" under '{prefix}'" if prefix else ""
            hint = f" (available{where}: {avail})"
        else:
            hint = ""
        if name == "retries" or name.startswith("retries"):
            hint = " ({{retries}} exists only in templates with a retryStrategy)"
        if name == "workflow.status" or name == "workflow.failures":
            hint = f" ({{{{{name}}}}} exists only in exit handlers)"
        return f"failed to resolve {{{{{name}}}}}: unknown variable{hint}"

    # -- substitution ---------------------------------------------------------
    def substitute(self, text: str) -> str:
        """Replace every tag in ``text``; raises SubstitutionError."""
        if "{{" not in text:
            return text

        def repl(m: re.Match) -> str:
            body = m.group(1)
            if body.startswith("="):
                src = body[1:].strip()
                try:
                    result = _expr.evaluate(src, self.data)
                except _expr.ExprError as e:
                    raise SubstitutionError(f"failed to evaluate expression {{{{={src}}}}}: {e}") from None
                return _expr.format_value(result)
            return render(self.lookup(body))

        return TAG_RE.sub(repl, text)

    def substitute_obj(self, obj: Any) -> Any:
        """Deep-copy ``obj`` substituting every string."""
        if isinstance(obj, str):
            return self.substitute(obj)
        if isinstance(obj, list):
            return [self.substitute_obj(x) for x in obj]
        if isinstance(obj, dict):
            return {k: self.substitute_obj(v) for k, v in obj.items()}
        return obj

    def evaluate(self, expression: str) -> Any:
        """Evaluate a bare expression (``valueFrom.expression``)."""
        try:
            return _expr.evaluate(expression, self.data)
        except _expr.ExprError as e:
            raise SubstitutionError(f"failed to evaluate expression {expression!r}: {e}") from None


def tags(text: str) -> list[str]:
    """All tag bodies in ``text`` (used for diagnostics)."""
    return [m.group(1) for m in TAG_RE.finditer(text or "")]
