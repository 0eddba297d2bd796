"""The backstop over emitted documents: what the API server or Argo refuses that no shipped
schema says (base/validation/pods.py, the int32/int64 formats, cron_syntax), each rule
broken once in an otherwise valid WorkflowTemplate, its JobSet manifest or a CronWorkflow."""
from __future__ import annotations

import pytest

from mfargo.base import cron_syntax
from mfargo.base.validation import validate_documents
from test_validation import assert_reported, good, template


def start(doc):
    return template(doc, "start")


def manifest_edit(old, new):
    def edit(doc):
        res = template(doc, "train")["resource"]
        assert old in res["manifest"]
        res["manifest"] = res["manifest"].replace(old, new, 1)
    return edit


CASES = {
    "pull policy": (lambda d: start(d)["container"].update(imagePullPolicy="Sometimes"),
                    "container.imagePullPolicy: imagePullPolicy 'Sometimes' is not one of"),
    "image tab": (lambda d: start(d)["container"].update(image="python:3.11\t"), "has whitespace"),
    "env name": (lambda d: start(d)["container"].update(env=[{"name": "..x", "value": "1"}]),
                 "container.env[0].name: '..x' is not an environment variable name"),
    "cpu past int64": (lambda d: start(d)["container"]["resources"]["requests"].update(cpu="1e30"),
                       "more than 2^63-1"),
    "cpu finer than 1m": (lambda d: start(d)["container"]["resources"]["requests"].update(cpu="0.1m"),
                          "more than 3 decimal places"),
    "half a gpu": (lambda d: start(d)["container"]["resources"].update(limits={"nvidia.com/gpu": "0.5"}),
                   "must be a whole number"),
    "two mounts one path": (lambda d: (start(d).update(volumes=[{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}]),
                                       start(d)["container"].update(volumeMounts=[{"name": "a", "mountPath": "/x"},
                                                                                  {"name": "b", "mountPath": "/x"}])),
                            "volumeMounts[1].mountPath: '/x': two volumes mounted at one path"),
    "mount of no volume": (lambda d: start(d)["container"].update(volumeMounts=[{"name": "nope", "mountPath": "/x"}]),
                           "no volume named 'nope'"),
    "duplicate volume": (lambda d: start(d).update(volumes=[{"name": "a", "emptyDir": {}}, {"name": "a", "emptyDir": {}}]),
                         "duplicate volume name 'a'"),
    "toleration operator": (lambda d: start(d).update(tolerations=[{"key": "a", "operator": "Sometimes"}]),
                            "tolerations[0]: operator 'Sometimes' is not one of Equal, Exists"),
    "toleration seconds": (lambda d: start(d).update(tolerations=[{"key": "a", "operator": "Exists",
                                                                    "tolerationSeconds": 5}]),
                           "effect must be NoExecute when tolerationSeconds is set"),
    "deadline past int32": (lambda d: start(d).update(activeDeadlineSeconds=2**31),
                            "activeDeadlineSeconds: 2147483648 is outside int32"),
    "priority past int32": (lambda d: d["spec"].update(priority=2**31), "spec.priority: 2147483648 is outside int32"),
    "ttl past int32": (lambda d: d["spec"].update(ttlStrategy={"secondsAfterSuccess": 2**31}),
                       "secondsAfterSuccess: 2147483648 is outside int32"),
    "parallelism past int64": (lambda d: d["spec"].update(parallelism=2**63), "outside int64"),
    "service account": (lambda d: d["spec"].update(serviceAccountName="Bad SA"), "'Bad SA' is not a service account"),
    "duplicate parameter": (lambda d: d["spec"].update(arguments={"parameters": [{"name": "p"}, {"name": "p"}]}),
                            "duplicate parameter name 'p'"),
    "annotations 300 kB": (lambda d: start(d).update(metadata={"annotations": {"a": "x" * 300000}}),
                           "spec.templates[1].metadata.annotations: annotations total 300,001 bytes"),
    # inside the JobSet manifest, Argo tags replaced by values they could take
    "jobset env name": (manifest_edit("{name: MF_PARALLEL_NODE_INDEX, value: \"0\"}", "{name: ..x, value: \"0\"}"),
                        "containers[0].env[0].name: '..x'"),
    "jobset pull policy": (manifest_edit("image: python:3.11\n", "image: python:3.11\n              imagePullPolicy: Sometimes\n"),
                           "imagePullPolicy 'Sometimes'"),
    "jobset max restarts past int32": (manifest_edit("maxRestarts: 0", "maxRestarts: 2147483648"), "maxRestarts"),
    "jobset label with a tag": (manifest_edit('name: "{{workflow.name}}-train"',
                                              'name: "{{workflow.name}}-train"\n  labels: {a: "{{workflow.name}}-"}'),
                                "label value '{{workflow.name}}-' must be"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_rule_is_enforced_on_emitted_documents(name):
    edit, needle = CASES[name]
    doc = good()
    edit(doc)
    assert_reported(doc, needle)


CRON = {"apiVersion": "argoproj.io/v1alpha1", "kind": "CronWorkflow", "metadata": {"name": "c"},
        "spec": {"schedules": ["0 * * * *"], "timezone": "Europe/Paris",
                 "workflowSpec": {"workflowTemplateRef": {"name": "demo"}}}}


@pytest.mark.parametrize("schedule,timezone,needle", [
    ("99 99 * * *", "UTC", "minute '99' is outside 0-59"),
    ("*/0 * * * *", "UTC", "the step must be a positive number"),
    ("0 0 L * *", "UTC", "'L' is not a number"),
    ("0 0 * * 7", "UTC", "day of week '7' is outside 0-6"),
    ("0 0 * * * *", "UTC", "has 6 fields"),
    ("0 * * * *", "Mars/Olympus", "timezone 'Mars/Olympus' is not an IANA time zone name"),
])
def test_a_cron_workflow_argo_would_refuse(schedule, timezone, needle):
    doc = {**CRON, "spec": {**CRON["spec"], "schedules": [schedule], "timezone": timezone}}
    assert any(needle in p for p in validate_documents([doc])), validate_documents([doc])


@pytest.mark.parametrize("schedule", ["0 * * * *", "*/15 0 1,15 * 1-5", "0 0 ? * SUN", "0 0 1 jan-mar *",
                                      "5/10 * * * *", "@daily", "@every 1h30m", "0 0 * * ?"])
def test_what_argo_accepts(schedule):
    assert cron_syntax.cron_problem(schedule) is None
    doc = {**CRON, "spec": {**CRON["spec"], "schedules": [schedule]}}
    assert validate_documents([doc]) == []


def test_a_sensor_reset_time_takes_five_fields_not_a_descriptor():
    assert cron_syntax.cron_problem("@daily") is None  # a CronWorkflow's parser knows descriptors
    assert "not a descriptor" in cron_syntax.cron_problem("@daily", descriptors=False)  # Argo Events' does not
    sensor = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Sensor", "metadata": {"name": "s"},
              "spec": {"triggers": [{"template": {"name": "t", "conditionsReset": [
                  {"byTime": {"cron": "@daily", "timezone": "UTC"}}]}}]}}
    assert any("not a descriptor" in p for p in validate_documents([sensor]))
    sensor["spec"]["triggers"][0]["template"]["conditionsReset"][0]["byTime"]["cron"] = "0 0 * * *"
    assert validate_documents([sensor]) == []
