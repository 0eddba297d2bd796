"""Output parameters: of a pod (``valueFrom.path`` files), of a dag/steps template
(``valueFrom.expression`` over its children's), of a fan-out (aggregated)."""
from __future__ import annotations

import json
from typing import Any

from . import limits
from .expr import format_value
from .model import WorkflowError
from .substitute import Scope


def aggregate_json(values: list[str]) -> str:
    """Argo's aggregation of fanned-out outputs: nested JSON if every value is a JSON
    list/object, otherwise a JSON list of strings."""
    parsed = []
    for v in values:
        try:
            x = json.loads(v)
        except (ValueError, TypeError):
            return json.dumps(values, separators=(",", ":"))
        if not isinstance(x, (list, dict)):
            return json.dumps(values, separators=(",", ":"))
        parsed.append(x)
    return json.dumps(parsed, separators=(",", ":"))


def fan_out_outputs(children_outputs: list[dict[str, Any]]) -> dict[str, Any]:
    """A TaskGroup's outputs: per parameter name the aggregated list, and ``result``."""
    names: list[str] = []
    for out in children_outputs:
        for k in (out.get("parameters") or {}):
            if k not in names:
                names.append(k)
    return {"parameters": {k: aggregate_json([out["parameters"][k] for out in children_outputs
                                              if k in (out.get("parameters") or {})]) for k in names},
            "result": aggregate_json([out["result"] for out in children_outputs if "result" in out])}


def container_outputs(t: dict, res, strict: bool) -> dict[str, str]:
    """A container template's output parameters, read from the pod's files (``strict``: a
    missing file is an error, as for a pod that succeeded)."""
    params: dict[str, str] = {}
    for p in (t.get("outputs") or {}).get("parameters") or []:
        name = p["name"]
        path = (p.get("valueFrom") or {}).get("path")
        if not path:
            raise WorkflowError(f"output parameter {name!r}: container templates need valueFrom.path")
        host = res.host_path(path)
        if host is None or not host.is_file():
            if not strict:
                continue
            where = "" if host is not None else (
                " (the path is not under a volumeMount or /tmp, so the local runner cannot see it)")
            raise WorkflowError(f"failed to save output parameter {name!r}: open {path}: "
                                f"no such file or directory{where}")
        with open(host, "rb") as f:
            data = f.read(limits.MAX_VALUE_BYTES + 2)  # + a final newline, + one byte too many
        if len(data.removesuffix(b"\n")) > limits.MAX_VALUE_BYTES:
            raise WorkflowError(f"output parameter {name!r}: " + limits.over(
                path, host.stat().st_size, limits.MAX_VALUE_BYTES, "bytes"))
        params[name] = data.decode("utf-8", "replace").removesuffix("\n")
    return params


def composite_outputs(tmpl: dict, scope: Scope) -> dict[str, str]:
    """A dag/steps template's output parameters: mfargo writes each as ``valueFrom.expression``."""
    params: dict[str, str] = {}
    for p in (tmpl.get("outputs") or {}).get("parameters") or []:
        expression = (p.get("valueFrom") or {}).get("expression")
        if expression is None:
            raise WorkflowError(f"output parameter {p['name']!r}: dag/steps templates need valueFrom.expression")
        params[p["name"]] = format_value(scope.evaluate(str(expression)))
    return params
