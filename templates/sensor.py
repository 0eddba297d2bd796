"""@trigger / @trigger_on_finish -> an Argo Events Sensor creating a Workflow from the template.

Same shape as core Metaflow's ``_compile_sensor`` (argo_workflows.py): one dependency per
event (named by its sanitized name, filtered on the payload's ``name``), one ``k8s``
trigger creating ``kind: Workflow`` with ``workflowTemplateRef``, parameters filled from
``body.payload`` by ``dataTemplate``, and each event's whole payload in the workflow
parameter named after it. One difference: mfargo's workflow parameters hold the raw CLI
string (not JSON-encoded), so a string payload value is passed as is and any other value
as its JSON text.
"""

from __future__ import annotations

import json

from mfargo.compiler import ir
from mfargo.compiler.constants import Api, Label

from . import pod
NULL = json.dumps(None)

_DATA_TEMPLATE = (
    '{{ if (hasKey $.Input.body.payload "%(key)s") }}'
    '{{- $pv:=(get $.Input.body.payload "%(key)s") -}}'
    '{{ if kindIs "string" $pv }}{{- $pv -}}{{- else -}}{{- $pv | toRawJson -}}{{- end -}}'
    '{{- else -}}{{ (fail "use-default-instead") }}{{- end -}}'
)


def data_template(payload_key: str) -> str:
    """The payload value as the parameter's raw string; missing key -> the default (`value`)."""
    return _DATA_TEMPLATE % {"key": payload_key}


def parameter_dest(name: str) -> str:
    # gjson query by name (Argo Events resolves it), so the order of arguments does not matter.
    return "spec.arguments.parameters.#(name=%s).value" % name


def template_annotations(wf: ir.Workflow) -> dict[str, str]:
    trig = wf.deployment.triggers
    out = {
        Label.TRIGGERS: json.dumps([{"name": e.name, "type": e.kind} for e in trig.events]),
        Label.SENSOR_NAME: trig.sensor_name,
    }
    namespace = trig.sensor_namespace or wf.namespace
    if namespace:
        out[Label.SENSOR_NAMESPACE] = namespace
    return out


def build(wf: ir.Workflow) -> dict | None:
    trig = wf.deployment.triggers
    if trig is None:
        return None
    params = {p.name: p for p in wf.parameters}
    start = wf.steps[wf.start].compute
    labels = dict(wf.labels)
    labels[Label.NAME] = "metaflow-sensor"
    annotations = dict(wf.annotations)
    template = {
        "metadata": {"labels": {Label.NAME: "metaflow-sensor", Label.PART_OF: Label.METAFLOW},
                     "annotations": annotations},
        # Argo Events' sensor container type has no `name` (core's V1Container adds one).
        "container": pod.sensor_container(pod.lower(pod.Kind.SENSOR, start, start)),
        "serviceAccountName": trig.service_account,
    }
    mapped = []  # (event, parameter, payload key), each parameter once
    for e in trig.events:
        mapped += [(e, params[name], key) for name, key in e.parameters]
    arguments = [{"name": p.name, "value": p.default} for _, p, _ in mapped]
    arguments += [{"name": e.sanitized_name, "value": NULL} for e in trig.events]
    trigger_params = [
        {
            "src": {"dependencyName": e.sanitized_name, "dataTemplate": data_template(key), "value": p.default},
            "dest": parameter_dest(p.name),
        }
        for e, p, key in mapped
    ]
    trigger_params += [
        {"src": {"dependencyName": e.sanitized_name, "dataKey": "body.payload", "value": NULL},
         "dest": parameter_dest(e.sanitized_name)}
        for e in trig.events
    ]
    workflow = {
        "apiVersion": Api.ARGO,
        "kind": "Workflow",
        "metadata": {
            "generateName": "%s-" % wf.name,
            "namespace": wf.namespace,
            "annotations": {
                Label.TRIGGERED_BY_EVENTS: json.dumps([{"name": e.name, "type": e.kind} for e in trig.events])
            },
        },
        "spec": {
            "arguments": {"parameters": arguments},
            "serviceAccountName": wf.deployment.bundle.service_account,
            "workflowTemplateRef": {"name": wf.name},
        },
    }
    trigger_template = {
        "name": wf.name,
        "k8s": {"operation": "create", "source": {"resource": workflow}, "parameters": trigger_params},
    }
    if trig.reset_cron:
        trigger_template["conditionsReset"] = [{"byTime": {"cron": trig.reset_cron, "timezone": trig.reset_timezone}}]
    return {
        "apiVersion": Api.ARGO,
        "kind": "Sensor",
        "metadata": {
            "name": trig.sensor_name,
            "namespace": trig.sensor_namespace or wf.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "template": template,
            "replicas": 1,
            "eventBusName": trig.event_bus,
            "triggers": [{"template": trigger_template}],
            "dependencies": [_dependency(e, params, trig) for e in trig.events],
        },
    }


def _literal(value: str | bool) -> str:
    """A filter's value in Argo Events' expression language (govaluate), which compares the
    payload's JSON value by type: Metaflow's events carry `auto-generated-by-metaflow` as JSON
    true, which core's `== 'True'` never equals (Argo Events v1.9.6: "didn't pass filter")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "'%s'" % value


def _dependency(e: ir.EventTrigger, params: dict[str, ir.Parameter], trig: ir.Triggers) -> dict:
    exprs = [{"expr": "name == '%s'" % e.name, "fields": [{"name": "name", "path": "body.payload.name"}]}]
    # A required parameter (no default): the event must carry its field.
    exprs += [
        {"expr": "true == true", "fields": [{"name": "field", "path": "body.payload.%s" % key}]}
        for name, key in e.parameters
        if params[name].default is None
    ]
    exprs += [
        {"expr": "field == %s" % _literal(value), "fields": [{"name": "field", "path": "body.payload.%s" % key}]}
        for key, value in e.filters
    ]
    return {
        "name": e.sanitized_name,
        "eventSourceName": trig.event_source,
        "eventName": trig.event_name,
        "filters": {"exprs": exprs},
    }
