"""Template ``metrics``: evaluated once the node has finished, as Argo's controller does.

Argo substitutes a template's Prometheus metrics after the node completes, with
``status``, ``duration``, ``exitCode``, ``inputs.*``, ``outputs.*`` and ``workflow.*``
(docs: metrics.md, "Template-level metrics"; workflow/controller/operator.go,
computeMetrics/prepareMetricScope), and only when the metric's ``when`` holds.  Here
there is no Prometheus endpoint: each emitted metric is recorded on the node
(``Node.metrics``, in ``status.json``) and as an event.  A metric that cannot be
evaluated is a warning, as in Argo: it never fails the node.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import events as ev
from .nodes import Node
from .substitute import Scope, SubstitutionError
from .when import WhenError, evaluate_when

if TYPE_CHECKING:
    from .scheduler import Executor

KINDS = ("gauge", "counter", "histogram")


def metric_scope(ex: "Executor", node: Node) -> Scope:
    duration = (node.finished_at or 0) - (node.started_at or node.finished_at or 0)
    outputs: dict[str, Any] = {"parameters": dict(node.outputs.get("parameters") or {})}
    if "result" in node.outputs:
        outputs["result"] = node.outputs["result"]
    data: dict[str, Any] = {"workflow": ex.wf_vars, "inputs": {"parameters": node.inputs},
                            "outputs": outputs, "status": node.phase, "duration": f"{duration:.3f}"}
    if "exitCode" in node.outputs:
        data["exitCode"] = node.outputs["exitCode"]
    return Scope(data)


def emit_metrics(ex: "Executor", node: Node, tmpl: dict) -> None:
    """Evaluate the template's metrics for the finished ``node``."""
    specs = (tmpl.get("metrics") or {}).get("prometheus") or []
    if not specs:
        return
    scope = metric_scope(ex, node)
    for spec in specs:
        try:
            when = spec.get("when")
            if when and not evaluate_when(scope.substitute(str(when))):
                continue
            kind = next((k for k in KINDS if spec.get(k) is not None), None)
            value = scope.substitute(str((spec.get(kind) or {}).get("value", ""))) if kind else ""
            metric = {"name": spec.get("name"), "help": scope.substitute(str(spec.get("help", ""))),
                      "type": kind or "", "value": value,
                      "labels": {str(lb.get("key")): scope.substitute(str(lb.get("value", "")))
                                 for lb in spec.get("labels") or []}}
        except (SubstitutionError, WhenError) as e:
            ex.on_event(ev.Event(ev.WARNING, node=node.display_name,
                                 message=f"metric {spec.get('name')!r} not emitted: {e}"))
            continue
        node.metrics.append(metric)
        ex.on_event(ev.Event(ev.METRIC, node=node.display_name, message=f"{metric['name']}={value}",
                             data=metric))
