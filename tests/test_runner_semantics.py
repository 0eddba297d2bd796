"""Runner: less common Argo semantics of what mfargo writes - a failed fan-out's result,
workflow expression hooks. (Fields mfargo never writes - continueOn, dag.target, retry
maxDuration, exit handlers, AnySucceeded/AllFailed, withSequence... - are refused by the
preflight: tests/test_runner_argo.py.)"""
from runner_tools import run_yaml

SH = """
  - name: sh
    inputs: {parameters: [{name: cmd}]}
    outputs:
      parameters: [{name: out, valueFrom: {path: /tmp/out}}]
    container: {image: bash, command: [bash, -c, "touch /tmp/out; {{inputs.parameters.cmd}}"]}
  - name: note
    outputs:
      parameters: [{name: out, valueFrom: {path: /tmp/out}}]
    container: {image: bash, command: [bash, -c, "echo {{workflow.status}} > /tmp/out"]}
  - name: ok
    container: {image: bash, command: ["true"]}
  - name: fails
    container: {image: bash, command: [bash, -c, "exit 3"]}
"""


def wf(body: str) -> str:
    import textwrap
    return textwrap.dedent(body) + SH


def test_a_failed_fan_out_and_the_tasks_that_depend_on_it(tmp_path):
    result, _ = run_yaml(wf("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: sem}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - name: some
                template: sh
                withParam: '["1", "2", "3"]'
                arguments: {parameters: [{name: cmd, value: "test {{item}} != 2"}]}
              - name: report
                depends: some.Failed || some.Errored
                template: sh
                arguments: {parameters: [{name: cmd, value: "echo {{tasks.some.status}} > /tmp/out"}]}
              - name: after-some
                depends: some.Succeeded
                template: sh
                arguments: {parameters: [{name: cmd, value: "true"}]}
        """), tmp_path)
    assert result.node("some").phase == "Failed"
    assert [result.nodes[c].display_name for c in result.node("some").children] == [
        "some(0:1)", "some(1:2)", "some(2:3)"]
    assert result.node("report").outputs["parameters"]["out"] == "Failed"
    assert result.node("after-some").phase == "Omitted"
    # 'after-some' is an Omitted target whose parent branch failed, so the DAG fails like Argo's
    assert result.status == "Failed"


def test_expression_hooks_run_after_the_workflow_and_never_fail_it(tmp_path):
    # Argo v4.0.5 on e2e/cluster (tests/test_cluster_deploy.py, notifications): a `spec.hooks`
    # expression hook that fails leaves the run Succeeded.
    result, _ = run_yaml(wf("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: hooks}
        spec:
          entrypoint: ok
          hooks:
            on-success: {expression: "workflow.status == 'Succeeded'", template: note}
            on-failure: {expression: "workflow.status != 'Succeeded'", template: note}
            failing: {expression: "workflow.status == 'Succeeded'", template: fails}
          templates: []
        """).replace("templates: []\n", "templates:\n"), tmp_path)
    assert result.status == "Succeeded", result.message
    assert result.node("hooks.on-success").outputs["parameters"]["out"] == "Succeeded"
    assert not [n for n in result.nodes.values() if n.display_name == "hooks.on-failure"]
    assert result.node("hooks.failing").phase == "Failed"
