"""mfargo.base.validation: a good WorkflowTemplate passes; typical generator mistakes are reported."""
import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mfargo.base.validation import parse_selector, validate_documents
from shared_schemas import SHARED_AVAILABLE, SHARED_DIR, run_shared_validator

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = SHARED_DIR / "schemas" / "examples"

JOBSET = """\
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: "{{workflow.name}}-train"
spec:
  successPolicy: {operator: All, targetReplicatedJobs: [control]}
  failurePolicy: {maxRestarts: 0}
  replicatedJobs:
  - name: control
    replicas: 1
    template:
      spec:
        backoffLimit: 0
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: main
              image: python:3.11
              command: [python, -c, "print('control')"]
              env:
              - {name: MF_PARALLEL_NODE_INDEX, value: "0"}
  - name: worker
    replicas: {{inputs.parameters.worker-count}}
    template:
      spec:
        backoffLimit: 0
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: main
              image: python:3.11
              command: [python, -c, "print('worker')"]
              env:
              - name: MF_PARALLEL_NODE_INDEX
                valueFrom:
                  fieldRef: {fieldPath: "metadata.annotations['jobset.sigs.k8s.io/job-index']"}
"""

GOOD = {
    "apiVersion": "argoproj.io/v1alpha1",
    "kind": "WorkflowTemplate",
    "metadata": {"name": "demo", "labels": {"app.kubernetes.io/part-of": "metaflow"}},
    "spec": {
        "entrypoint": "main",
        "templates": [
            {"name": "main", "dag": {"tasks": [
                {"name": "start", "template": "start"},
                {"name": "train", "template": "train", "depends": "start.Succeeded",
                 "arguments": {"parameters": [{"name": "worker-count", "value": "2"}]}},
            ]}},
            {"name": "start", "retryStrategy": {"limit": 2},
             "container": {"image": "python:3.11", "command": ["python", "-c", "print(1)"], "args": None,
                           "resources": {"requests": {"cpu": 1, "memory": "1Gi"}}}},
            {"name": "train", "inputs": {"parameters": [{"name": "worker-count"}]},
             "resource": {"action": "create", "setOwnerReference": True,
                          "successCondition": "status.terminalState == Completed",
                          "failureCondition": "status.terminalState == Failed",
                          "manifest": JOBSET},
             "outputs": {"parameters": [{"name": "jobset-name", "valueFrom": {"jsonPath": "{.metadata.name}"}}]}},
        ],
    },
}


def good():
    return copy.deepcopy(GOOD)


def template(doc, name):
    return next(t for t in doc["spec"]["templates"] if t["name"] == name)


def assert_reported(doc, *needles):
    problems = validate_documents([doc])
    for needle in needles:
        assert any(needle in p for p in problems), "%r not in %s" % (needle, problems)
    return problems


def test_good_workflowtemplate_passes():
    assert validate_documents([good()]) == []


@pytest.mark.skipif(not SHARED_AVAILABLE, reason="../shared not present")
def test_good_workflowtemplate_passes_shared_validator(tmp_path):
    path = tmp_path / "wt.yaml"
    path.write_text(yaml.safe_dump(good(), sort_keys=False))
    result = run_shared_validator([path])
    assert result.returncode == 0, result.stdout + result.stderr


def test_unknown_field():
    doc = good()
    template(doc, "start")["container"]["imagee"] = "x"
    assert_reported(doc, "WorkflowTemplate/demo: spec.templates[1].container.imagee: unknown field")


def test_setownerreference_at_template_level():
    doc = good()
    train = template(doc, "train")
    train["setOwnerReference"] = train["resource"].pop("setOwnerReference")
    assert_reported(doc, "spec.templates[2].setOwnerReference: unknown field")


def test_quoted_replicas_is_a_string():
    doc = good()
    res = template(doc, "train")["resource"]
    res["manifest"] = res["manifest"].replace("replicas: {{inputs.parameters.worker-count}}",
                                              'replicas: "{{inputs.parameters.worker-count}}"')
    assert_reported(doc, "resource.manifest -> JobSet spec.replicatedJobs[1].replicas: "
                         "'{{inputs.parameters.worker-count}}' is not of type 'integer'")


def test_unknown_field_inside_jobset():
    doc = good()
    res = template(doc, "train")["resource"]
    res["manifest"] = res["manifest"].replace("backoffLimit: 0", "backofLimit: 0", 1)
    assert_reported(doc, "replicatedJobs[0].template.spec.backofLimit: unknown field (did you mean 'backoffLimit'?)")


def test_bad_condition_key():
    doc = good()
    template(doc, "train")["resource"]["successCondition"] = "status.terminalStat == Completed"
    assert_reported(doc, "resource.successCondition: JobSet v0.12.0 has no field status.terminalStat")


def test_condition_syntax():
    doc = good()
    template(doc, "train")["resource"]["failureCondition"] = "status.terminalState == Failed && status.restarts > 0"
    assert_reported(doc, "resource.failureCondition: 'status.terminalState == Failed && status.restarts > 0' "
                         "is not a valid label selector")


def test_missing_template_ref():
    doc = good()
    template(doc, "main")["dag"]["tasks"][1]["template"] = "trian"
    assert_reported(doc, "spec.templates[0].dag.tasks[1].template: no template named 'trian'")


def test_depends_on_missing_task():
    doc = good()
    template(doc, "main")["dag"]["tasks"][1]["depends"] = "strat.Succeeded || start"
    problems = assert_reported(doc, "dag.tasks[1].depends: no task named 'strat'")
    assert len(problems) == 1


def test_duplicate_template_names():
    doc = good()
    template(doc, "train")["name"] = "start"
    assert_reported(doc, "spec.templates[2].name: duplicate template name 'start'")


def test_missing_entrypoint_and_long_name():
    doc = good()
    doc["spec"]["entrypoint"] = "mian"
    doc["metadata"]["name"] = "x" * 64
    assert_reported(doc, "spec.entrypoint: no template named 'mian'", "metadata.name: '" + "x" * 64)


def test_duplicate_env_in_jobset():
    doc = good()
    res = template(doc, "train")["resource"]
    res["manifest"] = res["manifest"].replace('- {name: MF_PARALLEL_NODE_INDEX, value: "0"}',
                                              '- {name: MF_PARALLEL_NODE_INDEX, value: "0"}\n'
                                              '              - {name: MF_PARALLEL_NODE_INDEX, value: "1"}')
    assert_reported(doc, "containers[0].env[1]: duplicate of [0]")


@pytest.mark.parametrize("manifest", ["# nothing\n", "a: 1\n---\nb: 2\n", "- a\n"])
def test_manifest_must_hold_one_object(manifest):
    doc = good()
    template(doc, "train")["resource"]["manifest"] = manifest
    assert_reported(doc, "spec.templates[2].resource.manifest: must hold exactly one object")


def test_nulls_and_int_or_string():
    doc = good()
    start = template(doc, "start")
    start["retryStrategy"]["limit"] = "2"
    start["activeDeadlineSeconds"] = None
    assert validate_documents([doc]) == []


def test_light_kinds_and_unknown_kind():
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "argo-workflow"}}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {}, "rules": []}
    odd = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}
    limit = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "y"}, "data": {"runs": 2, "a b": "1"}}
    problems = validate_documents([sa, role, odd, limit])
    assert len(problems) == 4, problems
    assert problems[0].startswith("Role/document-1: metadata.name: is required")
    assert "Secret/x: kind: 'Secret' is not a kind mfargo emits" in problems[1]
    assert problems[2:] == ["ConfigMap/y: data.runs: a ConfigMap's keys are [-._a-zA-Z0-9]+ and its values strings",
                            "ConfigMap/y: data.a b: a ConfigMap's keys are [-._a-zA-Z0-9]+ and its values strings"]


@pytest.mark.parametrize("expr", ["a == b", "a=b,c!=d", "a.b.0.c > 3", "x in (a, b)", "x notin (a)", "!a", "a"])
def test_selector_ok(expr):
    assert parse_selector(expr)


@pytest.mark.parametrize("expr", ["a == b && c", "a > x", "x in ()", "xin(a)", "!a == b",
                                  "status.conditions.#(type==Completed)"])
def test_selector_bad(expr):
    with pytest.raises(ValueError):
        parse_selector(expr)


def test_schemas_load_lazily():
    code = "import mfargo.base.validation.schema as v; assert v.schemas.cache_info().currsize == 0; print('ok')"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert out.stdout.strip() == "ok", out.stderr


def big_document(n):
    doc = good()
    start, train = template(doc, "start"), template(doc, "train")
    tasks, templates = [], [template(doc, "main")]
    for i in range(n - 1):
        t = copy.deepcopy(train if i % 10 == 0 else start)
        t["name"] = "step-%d" % i
        templates.append(t)
        task = {"name": t["name"], "template": t["name"], "depends": "step-%d" % (i - 1) if i else None}
        if "resource" in t:
            task["arguments"] = {"parameters": [{"name": "worker-count", "value": "2"}]}
        tasks.append(task)
    templates[0]["dag"]["tasks"] = tasks
    doc["spec"]["templates"] = templates
    return doc


def test_large_document_is_fast():
    doc = big_document(1000)
    validate_documents([good()])  # schema loading is not what we measure
    started = time.perf_counter()
    assert validate_documents([doc]) == []
    # ~0.2 s on a laptop; the bound only catches gross regressions (e.g. recompiling schemas).
    assert time.perf_counter() - started < 5


@pytest.mark.skipif(not SHARED_AVAILABLE, reason="../shared not present")
def test_shared_examples():
    def load(name):
        return list(yaml.safe_load_all((EXAMPLES / name).read_text()))

    assert validate_documents(load("good-workflowtemplate.yaml")) == []
    metaflow = json.loads((EXAMPLES / "metaflow-2.19.39-parflow.json").read_text())
    assert validate_documents([metaflow]) == []
    problems = validate_documents(load("bad-workflowtemplate.yaml"))
    expected = [
        "metadata.labels.app.kubernetes.io/part-of: label value 'metaflow/argo'",
        "dag.tasks[1].template: no template named 'trian'",
        "dag.tasks[1].dependencies: no task named 'strat'",
        "spec.templates[1].container.imagee: unknown field",
        "resource.successCondition: 'status.terminalState == Completed && status.restarts < 1' is not a valid",
        "-> JobSet spec.successPolicy.targetReplicatedJobs: JobSet v0.12's admission webhook refuses this: "
        "no replicatedJob named 'controller'",
        "-> JobSet spec.replicatedJobs[0].replicas: '1' is not of type 'integer'",
        "-> JobSet spec.replicatedJobs[0].template.spec.backofLimit: unknown field",
        "containers[0].env[1]: duplicate of [0]",
    ]
    for needle in expected:
        assert any(needle in p for p in problems), "%r not in %s" % (needle, problems)
