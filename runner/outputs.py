"""Output parameters: of a pod (files), of a dag/steps template (from its children), of a
fan-out (aggregated), and ``globalName`` exports into ``workflow.outputs.parameters``."""
from __future__ import annotations

import json
from typing import Any

from . import limits
from .expr import format_value
from .model import WorkflowError, param_str
from .substitute import AggregateMap, Scope, SubstitutionError


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
    by_name = {k: aggregate_json([out["parameters"][k] for out in children_outputs
                                  if k in (out.get("parameters") or {})]) for k in names}
    per_child = [dict(out["parameters"]) for out in children_outputs if out.get("parameters")]
    return {"parameters": AggregateMap(by_name, per_child),
            "result": aggregate_json([out["result"] for out in children_outputs if "result" in out])}


def container_outputs(t: dict, res, strict: bool, exports: dict[str, str]) -> dict[str, str]:
    """A container/script template's output parameters, read from the pod's files."""
    params: dict[str, str] = {}
    for p in (t.get("outputs") or {}).get("parameters") or []:
        name = p["name"]
        vf = p.get("valueFrom") or {}
        if vf.get("path"):
            host = res.host_path(vf["path"])
            if host is not None and host.is_file():
                with open(host, "rb") as f:
                    data = f.read(limits.MAX_VALUE_BYTES + 2)  # + a final newline, + one byte too many
                if len(data.removesuffix(b"\n")) > limits.MAX_VALUE_BYTES:
                    raise WorkflowError(f"output parameter {name!r}: " + limits.over(
                        f"{vf['path']}", host.stat().st_size, limits.MAX_VALUE_BYTES, "bytes"))
                value = data.decode("utf-8", "replace")
                if value.endswith("\n"):
                    value = value[:-1]
            elif vf.get("default") is not None:
                value = param_str(vf["default"])
            elif not strict:
                continue
            else:
                where = "" if host is not None else (
                    " (the path is not under a volumeMount or /tmp, so the local runner cannot see it)")
                raise WorkflowError(f"failed to save output parameter {name!r}: open {vf['path']}: "
                                    f"no such file or directory{where}")
        elif vf.get("default") is not None:
            value = param_str(vf["default"])
        elif p.get("value") is not None:
            value = param_str(p["value"])
        elif strict:
            raise WorkflowError(f"output parameter {name!r}: container templates need valueFrom.path")
        else:
            continue
        params[name] = value
        if p.get("globalName"):
            exports[p["globalName"]] = value
    return params


def composite_outputs(tmpl: dict, scope: Scope, exports: dict[str, str]) -> dict[str, str]:
    """A dag/steps template's output parameters, from its children's (``valueFrom.parameter``
    / ``expression``; ``valueFrom.default`` when the reference cannot be resolved)."""
    params: dict[str, str] = {}
    for p in (tmpl.get("outputs") or {}).get("parameters") or []:
        vf = p.get("valueFrom") or {}
        try:
            if vf.get("parameter") is not None:
                value = scope.substitute(param_str(vf["parameter"]))
            elif vf.get("expression") is not None:
                value = format_value(scope.evaluate(str(vf["expression"])))
            elif p.get("value") is not None:
                value = scope.substitute(param_str(p["value"]))
            elif vf.get("default") is not None:
                value = param_str(vf["default"])
            else:
                raise WorkflowError(f"output parameter {p['name']!r}: dag/steps templates need "
                                    "valueFrom.parameter or valueFrom.expression")
        except SubstitutionError:
            if vf.get("default") is None:
                raise
            value = param_str(vf["default"])
        params[p["name"]] = value
        if p.get("globalName"):
            exports[p["globalName"]] = value
    return params
