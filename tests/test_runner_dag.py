"""Runner: DAG templates - outputs, depends/when/Omitted, fan-out, failures, errors."""
import json
import textwrap
import time

import pytest

from mfargo.runner import events as ev
from mfargo.runner.model import WorkflowError
from runner_tools import run_yaml

# A container template that writes its message to an output file.
ECHO = """
  - name: echo
    inputs:
      parameters: [{name: msg}]
    outputs:
      parameters:
      - name: out
        valueFrom: {path: /mnt/out/value}
    volumes: [{name: out, emptyDir: {}}]
    container:
      image: python:3.11
      command: [bash, -c]
      args: ["printf '%s\\n' '{{inputs.parameters.msg}}' > /mnt/out/value; echo said '{{inputs.parameters.msg}}'"]
      volumeMounts: [{name: out, mountPath: /mnt/out}]
"""


def with_echo(text):
    return textwrap.dedent(text) + ECHO


def test_linear_dag_with_outputs(tmp_path):
    result, rec = run_yaml(with_echo("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: linear}
        spec:
          entrypoint: main
          arguments:
            parameters:
            - {name: greeting, value: hello}
            - {name: count, value: 2}
          templateDefaults:
            container:
              env: [{name: FROM_DEFAULTS, value: yes}]
          templates:
          - name: main
            outputs:
              parameters:
              - name: final
                valueFrom: {expression: "tasks['c'].outputs.parameters['out']"}
            dag:
              tasks:
              - name: a
                template: echo
                arguments: {parameters: [{name: msg, value: "{{=workflow.parameters['greeting']}}"}]}
              - name: b
                depends: a
                template: echo
                arguments: {parameters: [{name: msg, value: "{{tasks.a.outputs.parameters.out}}-b-{{=workflow.parameters['count']}}"}]}
              - name: c
                depends: b.Succeeded
                template: echo
                arguments: {parameters: [{name: msg, value: "{{tasks.b.outputs.parameters.out}}-c ${FROM_DEFAULTS}"}]}
        """), tmp_path, {"greeting": "hi"})
    assert result.status == "Succeeded", result.message
    assert result.workflow_name.startswith("linear-") and len(result.workflow_name) == len("linear-") + 5
    assert result.run_id == f"argo-{result.workflow_name}"
    assert result.node("a").outputs["parameters"]["out"] == "hi"
    assert result.node("b").outputs["parameters"]["out"] == "hi-b-2"
    # quoted in the args, so the shell does not expand ${FROM_DEFAULTS}
    assert result.node("c").outputs["parameters"]["out"] == "hi-b-2-c ${FROM_DEFAULTS}"
    assert result.nodes[result.workflow_name].outputs["parameters"]["final"] == "hi-b-2-c ${FROM_DEFAULTS}"
    # pods: own dirs, logs, name <wf>-<template>-<hash>
    pod = result.node("b")
    assert pod.pod_name.startswith(f"{result.workflow_name}-echo-")
    assert (result.work_dir / "pods" / pod.pod_name / "log").read_text() == "said hi-b-2\n"
    assert (result.work_dir / "pods" / pod.pod_name / "mounts" / "_mnt_out" / "value").is_file()
    logs = [e for e in rec.kinds(ev.LOG) if e.pod == pod.pod_name]
    assert [e.message for e in logs] == ["said hi-b-2"]
    started = [e.node for e in rec.kinds(ev.NODE_STARTED)]
    assert started.index("a") < started.index("b") < started.index("c")
    assert rec.kinds(ev.WORKFLOW_FINISHED)[-1].phase == "Succeeded"


def test_depends_when_skipped_and_omitted(tmp_path):
    result, _ = run_yaml(with_echo("""
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {generateName: branches-}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - {name: flip, template: echo, arguments: {parameters: [{name: msg, value: b}]}}
              - name: a
                depends: flip
                when: "{{tasks.flip.outputs.parameters.out}} == a"
                template: echo
                arguments: {parameters: [{name: msg, value: took-a}]}
              - name: b
                depends: flip.Succeeded
                when: "'{{tasks.flip.outputs.parameters.out}}' == 'b'"
                template: echo
                arguments: {parameters: [{name: msg, value: took-b}]}
              - name: after-a
                depends: a.Succeeded
                template: echo
                arguments: {parameters: [{name: msg, value: never}]}
              - name: join
                depends: "a || b"
                template: echo
                arguments: {parameters: [{name: msg, value: "a={{tasks.a.status}} b={{tasks.b.status}} {{tasks.b.outputs.parameters.out}}"}]}
              - name: on-omit
                depends: "after-a.Omitted && (join.Succeeded || join.Failed)"
                template: echo
                arguments: {parameters: [{name: msg, value: "after-a={{tasks.after-a.status}}"}]}
              - name: needs-after-a
                depends: after-a
                template: echo
                arguments: {parameters: [{name: msg, value: never}]}
        """), tmp_path)
    assert result.workflow_name.startswith("branches-")
    assert result.status == "Succeeded", result.message
    phases = {n: result.node(n).phase for n in ("flip", "a", "b", "after-a", "join", "on-omit", "needs-after-a")}
    assert phases == {"flip": "Succeeded", "a": "Skipped", "b": "Succeeded", "after-a": "Omitted",
                      "join": "Succeeded", "on-omit": "Succeeded", "needs-after-a": "Omitted"}
    assert result.node("a").message == "when 'b == a' evaluated false"
    assert result.node("join").outputs["parameters"]["out"] == "a=Skipped b=Succeeded took-b"
    assert result.node("on-omit").outputs["parameters"]["out"] == "after-a=Omitted"


def test_with_param_fan_out_and_aggregated_outputs(tmp_path):
    result, _ = run_yaml(with_echo("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: fan}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - {name: gen, template: echo, arguments: {parameters: [{name: msg, value: '[1, 2, 3]'}]}}
              - name: square
                depends: gen
                template: square
                withParam: "{{tasks.gen.outputs.parameters.out}}"
                arguments: {parameters: [{name: n, value: "{{item}}"}]}
              - name: maps
                depends: gen
                template: echo
                withParam: '["x=1", "y=2"]'
                arguments: {parameters: [{name: msg, value: "{{item}}"}]}
              - name: collect
                depends: square && maps
                template: echo
                arguments: {parameters: [{name: msg, value: "{{tasks.square.outputs.parameters.sq}}|{{tasks.maps.outputs.parameters.out}}"}]}
          - name: square
            inputs: {parameters: [{name: n}]}
            outputs:
              parameters: [{name: sq, valueFrom: {path: /tmp/sq}}]
            container:
              image: python:3.11
              command: [python, -c, "import sys; open('/tmp/sq', 'w').write(str(int(sys.argv[1]) ** 2))", "{{inputs.parameters.n}}"]
        """), tmp_path)
    assert result.status == "Succeeded", result.message
    out = result.node("collect").outputs["parameters"]["out"]
    squares, maps = out.split("|")
    assert json.loads(squares) == ["1", "4", "9"]
    assert json.loads(maps) == ["x=1", "y=2"]
    group = result.node("square")
    assert group.type == "TaskGroup" and group.phase == "Succeeded"
    children = [result.nodes[c] for c in group.children]
    assert [c.display_name for c in children] == ["square(0:1)", "square(1:2)", "square(2:3)"]
    assert len({c.pod_name for c in children}) == 3
    # /tmp is private per pod: each pod wrote its own /tmp/sq
    assert all((result.work_dir / "pods" / c.pod_name / "tmp" / "sq").is_file() for c in children)


DAG_WITH_A_FAILURE = """
    apiVersion: argoproj.io/v1alpha1
    kind: WorkflowTemplate
    metadata: {name: ff}
    spec:
      entrypoint: main
      templates:
      - name: main
        dag:
          tasks:
          - {name: bad, template: sh, arguments: {parameters: [{name: cmd, value: "exit 3"}]}}
          - {name: slow, template: sh, arguments: {parameters: [{name: cmd, value: "sleep 1"}]}}
          - {name: after-slow, depends: slow, template: sh, arguments: {parameters: [{name: cmd, value: "true"}]}}
      - name: sh
        inputs: {parameters: [{name: cmd}]}
        container: {image: bash, command: [bash, -c, "{{inputs.parameters.cmd}}"]}
"""


def test_dag_keeps_starting_ready_tasks_after_a_failure(tmp_path):
    # Argo (workflow/controller/dag.go): every pass walks all targets, so a task whose
    # dependencies are met still starts after another branch failed.
    result, _ = run_yaml(DAG_WITH_A_FAILURE, tmp_path)
    assert result.status == "Failed"
    assert result.node("bad").phase == "Failed"
    assert result.node("bad").message == "Error (exit code 3)"
    assert result.node("slow").phase == "Succeeded"
    assert result.node("after-slow").phase == "Succeeded"
    assert "child 'bad' failed" in result.message


def test_handled_failure_does_not_fail_the_dag(tmp_path):
    result, _ = run_yaml("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: handled}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - {name: bad, template: sh, arguments: {parameters: [{name: cmd, value: "exit 1"}]}}
              - {name: cleanup, depends: bad.Failed, template: sh, arguments: {parameters: [{name: cmd, value: "true"}]}}
              - {name: normal, depends: bad.Succeeded, template: sh, arguments: {parameters: [{name: cmd, value: "true"}]}}
          - name: sh
            inputs: {parameters: [{name: cmd}]}
            container: {image: bash, command: [bash, -c, "{{inputs.parameters.cmd}}"]}
        """, tmp_path)
    assert result.node("cleanup").phase == "Succeeded"
    assert result.node("normal").phase == "Omitted"
    # targets: cleanup (Succeeded) and normal (Omitted, inherits bad's Failed branch) -> Failed like Argo
    assert result.status == "Failed"


def test_unknown_variable_is_an_error_not_empty(tmp_path):
    result, rec = run_yaml(with_echo("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: unknown}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - {name: a, template: echo, arguments: {parameters: [{name: msg, value: "{{=workflow.parameters['nope']}}"}]}}
              - {name: r, template: retries-without-strategy}
          - name: retries-without-strategy
            container: {image: bash, command: [bash, -c, "echo {{retries}}"]}
        """), tmp_path)
    assert result.status == "Error"
    assert result.node("a").phase == "Error"
    assert "{{=workflow.parameters['nope']}}" in result.node("a").message
    assert result.node("r").phase == "Error"
    assert "retryStrategy" in result.node("r").message
    assert not result.pods()  # nothing ran
    assert rec.kinds(ev.NODE_FAILED)


def test_missing_output_file(tmp_path):
    result, _ = run_yaml("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: outs}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - {name: without, template: without}
          - name: without
            outputs:
              parameters: [{name: x, valueFrom: {path: /mnt/out/none}}]
            volumes: [{name: out, emptyDir: {}}]
            container: {image: bash, command: ["true"], volumeMounts: [{name: out, mountPath: /mnt/out}]}
        """, tmp_path)
    assert result.node("without").phase == "Error"
    assert "no such file" in result.node("without").message
    assert result.status == "Error"


def test_parameters_must_have_values(tmp_path):
    text = """
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: params}
        spec:
          entrypoint: main
          arguments: {parameters: [{name: needed}]}
          templates:
          - name: main
            inputs: {parameters: [{name: needed}]}
            container: {image: bash, command: [bash, -c, "test {{inputs.parameters.needed}} = ok"]}
        """
    with pytest.raises(WorkflowError, match="-p needed="):
        run_yaml(text, tmp_path)
    with pytest.raises(WorkflowError, match="unknown workflow parameter"):
        run_yaml(text, tmp_path, {"needed": "ok", "typo": "1"})
    result, _ = run_yaml(text, tmp_path, {"needed": "ok"})
    assert result.status == "Succeeded"  # workflow arguments reach the entrypoint's inputs


def test_parallelism_limits_concurrent_pods(tmp_path):
    t0 = time.time()
    result, rec = run_yaml("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: par}
        spec:
          entrypoint: main
          parallelism: 2
          templates:
          - name: main
            dag:
              tasks:
              - {name: s, template: sleep, withParam: '[1, 2, 3, 4]'}
          - name: sleep
            container: {image: bash, command: [bash, -c, "sleep 0.4"]}
        """, tmp_path)
    assert result.status == "Succeeded"
    pods = sorted(result.pods(), key=lambda n: n.started_at)
    # at most 2 pods run at any time
    for p in pods:
        running = [q for q in pods if q.started_at <= p.started_at < q.finished_at]
        assert len(running) <= 2
    assert time.time() - t0 >= 0.8


def test_the_first_failed_leaf_in_name_order_decides_like_argo(tmp_path):
    """Argo's default targets are the leaves sorted by name (dag.go: findLeafTaskNames), and
    assessDAGPhase stops at the first failed one: here `alpha`, though `zeta` comes first."""
    result, _ = run_yaml("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: order}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - {name: zeta, template: fail, arguments: {parameters: [{name: code, value: "3"}]}}
              - {name: alpha, template: fail, arguments: {parameters: [{name: code, value: "4"}]}}
          - name: fail
            inputs: {parameters: [{name: code}]}
            container: {image: python:3.11, command: [bash, -c, "exit {{inputs.parameters.code}}"]}
        """, tmp_path)
    assert result.status == "Failed"
    assert result.message.startswith("child 'alpha' failed"), result.message
