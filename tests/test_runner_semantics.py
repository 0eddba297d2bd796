"""Runner: less common Argo semantics - a failed fan-out's result, continueOn, dag.target,
retry maxDuration, expression hooks, JobSet delete. (AnySucceeded/AllFailed, withSequence,
legacy dependencies and retry expressions, which mfargo never writes, are refused by the
preflight: tests/test_runner_argo.py.)"""
from mfargo.runner.testing import run_yaml

SH = """
  - name: sh
    inputs: {parameters: [{name: cmd, value: "true"}]}
    outputs:
      parameters: [{name: out, valueFrom: {path: /tmp/out, default: none}}]
    container: {image: bash, command: [bash, -c, "{{inputs.parameters.cmd}}"]}
"""


def wf(body: str) -> str:
    import textwrap
    return textwrap.dedent(body) + SH


def test_fan_out_results_and_continue_on(tmp_path):
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
                withItems: ["1", "2", "3"]
                arguments: {parameters: [{name: cmd, value: "test {{item}} != 2"}]}
              - name: report
                depends: some.Failed || some.Errored
                template: sh
                arguments: {parameters: [{name: cmd, value: "echo {{tasks.some.status}} > /tmp/out"}]}
              - name: after-some
                depends: some.Succeeded
                template: sh
              - name: flaky
                template: sh
                continueOn: {failed: true}
                arguments: {parameters: [{name: cmd, value: "exit 1"}]}
              - name: after-flaky
                depends: flaky.Succeeded || flaky.Failed
                template: sh
        """), tmp_path)
    assert result.node("some").phase == "Failed"
    assert [result.nodes[c].display_name for c in result.node("some").children] == [
        "some(0:1)", "some(1:2)", "some(2:3)"]
    assert result.node("report").outputs["parameters"]["out"] == "Failed"
    assert result.node("after-some").phase == "Omitted"
    assert result.node("after-flaky").phase == "Succeeded"
    # 'after-some' is an Omitted target whose parent branch failed, so the DAG fails like Argo's
    assert result.status == "Failed"


def test_dag_target_and_steps_continue_on(tmp_path):
    result, _ = run_yaml(wf("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: target}
        spec:
          entrypoint: main
          templates:
          - name: main
            steps:
            - - {name: partial, template: partial}
              - name: tolerated
                template: sh
                continueOn: {failed: true}
                arguments: {parameters: [{name: cmd, value: "exit 5"}]}
            - - name: fan
                template: sh
                withItems: [a, b]
                arguments: {parameters: [{name: cmd, value: "echo {{item}}-{{steps.tolerated.status}} > /tmp/out"}]}
            - - name: last
                template: sh
                arguments: {parameters: [{name: cmd, value: "echo '{{steps.fan.outputs.parameters.out}}' > /tmp/out"}]}
          - name: partial
            dag:
              target: b
              tasks:
              - {name: a, template: sh}
              - {name: b, depends: a, template: sh}
              - {name: never, depends: a, template: sh}
        """), tmp_path)
    assert result.status == "Succeeded", result.message
    assert result.node("b").phase == "Succeeded"
    assert not [n for n in result.nodes.values() if n.display_name == "never"]
    assert result.node("last").outputs["parameters"]["out"] == '["a-Failed","b-Failed"]'


def test_retry_max_duration(tmp_path):
    result, _ = run_yaml(wf("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: retryexpr}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              failFast: false
              tasks:
              - {name: capped, template: capped}
          - name: capped
            retryStrategy:
              limit: 10
              backoff: {duration: 1s, maxDuration: 2s}
            container: {image: bash, command: [bash, -c, "exit 1"]}
        """), tmp_path, backoff_scale=1.0)
    capped = result.node("capped")
    assert capped.phase == "Failed" and "Max duration" in capped.message
    assert 2 <= len(capped.children) <= 3


def test_expression_hooks_and_jobset_delete_in_exit_handler(tmp_path):
    result, rec = run_yaml(wf("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: hooks}
        spec:
          entrypoint: start-js
          hooks:
            exit: {template: cleanup}
            on-success:
              expression: workflow.status == 'Succeeded'
              template: sh
              arguments: {parameters: [{name: cmd, value: "echo {{workflow.status}} > /tmp/out"}]}
            on-failure:
              expression: workflow.status != 'Succeeded'
              template: sh
          templates:
          - name: start-js
            resource:
              action: create
              manifest: |
                apiVersion: jobset.x-k8s.io/v1alpha2
                kind: JobSet
                metadata: {name: "bg-{{workflow.name}}"}
                spec:
                  replicatedJobs:
                  - name: w
                    template:
                      spec:
                        template:
                          spec:
                            restartPolicy: Never
                            containers: [{name: main, image: bash, command: [sleep, "1000"]}]
            outputs:
              parameters: [{name: name, valueFrom: {jsonPath: "{.metadata.name}"}}]
          - name: cleanup
            resource:
              action: delete
              manifest: |
                apiVersion: jobset.x-k8s.io/v1alpha2
                kind: JobSet
                metadata: {name: "bg-{{workflow.name}}"}
        """), tmp_path)
    assert result.status == "Succeeded", result.message
    assert result.node("hooks.on-success").outputs["parameters"]["out"] == "Succeeded"
    assert not [n for n in result.nodes.values() if n.display_name == "hooks.on-failure"]
    assert result.node("onExit").phase == "Succeeded"
    assert not result.jobsets  # deleted by the exit handler (its pod was killed)
    assert any(e.message == "deleted" for e in rec.events if e.kind == "jobset")


def test_only_the_exit_handler_can_fail_a_succeeded_workflow(tmp_path):
    # Argo v4.0.5 on e2e/cluster (tests/test_cluster_deploy.py, notifications): a `spec.hooks`
    # expression hook that fails leaves the run Succeeded; a failing exit handler fails it.
    def run(exit_cmd: str, name: str):
        return run_yaml(wf("""
            apiVersion: argoproj.io/v1alpha1
            kind: WorkflowTemplate
            metadata: {name: %s}
            spec:
              entrypoint: sh
              hooks:
                exit: {template: sh, arguments: {parameters: [{name: cmd, value: "%s"}]}}
                notify:
                  expression: workflow.status == 'Succeeded'
                  template: sh
                  arguments: {parameters: [{name: cmd, value: "exit 3"}]}
              templates: []
            """ % (name, exit_cmd)).replace("templates: []\n", "templates:\n"), tmp_path / name)[0]

    ok = run("true", "hookfails")
    assert (ok.status, ok.node("hooks.notify").phase, ok.node("onExit").phase) == ("Succeeded", "Failed", "Succeeded")
    bad = run("exit 4", "exitfails")
    assert (bad.status, bad.node("hooks.notify").phase, bad.node("onExit").phase) == ("Failed", "Failed", "Failed")
    assert bad.message.startswith("onExit failed"), bad.message
