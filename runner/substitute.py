"""Replace Argo template tags (``{{var}}``, and ``{{= expr}}`` by :mod:`runner.expr`) in strings and objects.

Argo substitutes in several passes, leaving tags it cannot resolve yet for later.
The runner instead substitutes each field at the moment it is used, with every
variable that exists at that moment (globals, inputs, finished tasks/steps, item,
retries, pod name...).  So a tag that still does not resolve is a real mistake and
raises :class:`SubstitutionError` naming it - never an empty string.

Values live in a nested dict (the :class:`Scope`), the same shape expressions see:
``workflow.parameters.x``, ``inputs.parameters.x``, ``tasks.a.outputs.parameters.p``,
``tasks.a.status``, ``item``, ``retries``. The simple tags mfargo writes are a short list
(:data:`preflight.SIMPLE_TAGS`); the preflight refuses any other.
"""
from __future__ import annotations

import json
import re
from typing import Any

from . import expr as _expr

TAG_RE = re.compile(r"\{\{(.*?)\}\}", re.S)


class SubstitutionError(Exception):
    """A tag could not be resolved."""


def render(value: Any) -> str:
    """String form of a scope value inside a simple tag."""
    if isinstance(value, str):
        return value
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
        cur: Any = self.data
        parts = name.split(".")
        i = 0
        while i < len(parts):
            if isinstance(cur, dict):
                if parts[i] in cur:
                    cur = cur[parts[i]]
                    i += 1
                    continue
            raise SubstitutionError(self._unknown(name, parts[:i]))
        return cur

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
        if name == "workflow.status":
            hint = " ({{workflow.status}} exists only in workflow hooks)"
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


