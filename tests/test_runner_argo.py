"""Runner: Argo behaviours as Argo's docs/source define them (issue 12, item 1).

Each test is written from Argo's documentation or controller source, cited per test.
"""
import json
import re
import textwrap
from pathlib import Path

import pytest

from mfargo.runner import preflight
from mfargo.runner.cli import main
from mfargo.runner.model import WorkflowDoc, load_document
from mfargo.runner.dag import DAEMON_STOPPED
from mfargo.runner.fanout import FAIL_FAST_MESSAGE
from mfargo.runner.testing import run_yaml

SH = """
  - name: sh
    inputs: {parameters: [{name: cmd}]}
    container: {image: bash, command: [bash, -c, "{{inputs.parameters.cmd}}"]}
"""


def with_sh(text: str) -> str:
    """The workflow plus a `sh` template running its `cmd` input."""
    return textwrap.dedent(text).rstrip() + SH


def test_script_file_is_executable(tmp_path):
    # Argo writes a script template's source to a file with mode 0755 (executor), so
    # `command: [sh, -c]` can execute it as a program.
    result, _ = run_yaml("""
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {name: script-mode}
        spec:
          entrypoint: main
          templates:
          - name: main
            script:
              image: alpine
              command: [sh, -c]
              source: |
                echo from-script
        """, tmp_path)
    assert result.status == "Succeeded", result.message
    node = result.node("script-mode")
    assert node.outputs["result"] == "from-script"
    assert (result.work_dir / "pods" / node.pod_name / "script").stat().st_mode & 0o777 == 0o755


def test_fanned_out_parameters_are_a_list_of_per_child_maps(tmp_path):
    # operator.go processAggregateNodeOutputs: `<task>.outputs.parameters` of a fan-out is
    # a JSON list of per-child {name: value} maps; `.parameters.<name>` a JSON list of values.
    result, _ = run_yaml(with_sh("""
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {name: agg}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - {name: gen, template: gen, withItems: [a, b], arguments: {parameters: [{name: x, value: "{{item}}"}]}}
              - name: each
                depends: gen
                template: sh
                withParam: "{{tasks.gen.outputs.parameters}}"
                arguments: {parameters: [{name: cmd, value: "echo {{item.up}}-{{item.x}}"}]}
              - name: whole
                depends: gen
                template: sh
                arguments: {parameters: [{name: cmd, value: "echo '{{tasks.gen.outputs.parameters}}|{{tasks.gen.outputs.parameters.up}}'"}]}
          - name: gen
            inputs: {parameters: [{name: x}]}
            container: {image: bash, command: [bash, -c, "echo {{inputs.parameters.x}} | tr a-z A-Z > /tmp/up"]}
            outputs:
              parameters:
              - {name: up, valueFrom: {path: /tmp/up}}
              - {name: x, value: "{{inputs.parameters.x}}"}
        """), tmp_path)
    assert result.status == "Succeeded", result.message
    whole, by_name = result.node("whole").outputs["result"].split("|")
    assert json.loads(whole) == [{"up": "A", "x": "a"}, {"up": "B", "x": "b"}]
    assert json.loads(by_name) == ["A", "B"]
    each = [result.nodes[c] for c in result.node("each").children]
    assert [c.outputs["result"] for c in each] == ["A-a", "B-b"]


def test_skipped_producer_default_and_guarded_output(tmp_path):
    # Argo docs, variables.md "Outputs of Skipped and Omitted Nodes": a skipped task's output
    # is its valueFrom.default, else absent: mfargo's guard (templates/expr.py
    # output_if_succeeded) never reads it, a consumer input's default applies.
    result, _ = run_yaml(with_sh("""
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {name: skipped}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - {name: producer, template: produce, when: "1 == 2"}
              - {name: plain, template: plain, when: "1 == 2"}
              - name: consumer
                depends: producer && plain
                template: sh
                arguments:
                  parameters:
                  - name: cmd
                    value: "echo {{tasks.producer.outputs.parameters.y}}/{{=tasks['plain'].status == 'Succeeded' ? tasks['plain'].outputs.parameters['z'] : 'fb'}}"
              - name: defaulted
                depends: plain
                template: with-default
                arguments: {parameters: [{name: v, value: "{{tasks.plain.outputs.parameters.z}}"}]}
          - name: with-default
            inputs: {parameters: [{name: v, default: input-default}]}
            container: {image: bash, command: [bash, -c, "echo {{inputs.parameters.v}}"]}
          - name: produce
            container: {image: bash, command: [bash, -c, "echo real > /tmp/y"]}
            outputs: {parameters: [{name: y, valueFrom: {path: /tmp/y, default: fallback}}]}
          - name: plain
            container: {image: bash, command: [bash, -c, "echo real > /tmp/z"]}
            outputs: {parameters: [{name: z, valueFrom: {path: /tmp/z}}]}
        """), tmp_path)
    assert result.status == "Succeeded", result.message
    assert result.node("producer").phase == "Skipped"
    assert result.node("consumer").outputs["result"] == "fallback/fb"
    # an argument that is only an absent output is left out: the input's default applies
    assert result.node("defaulted").outputs["result"] == "input-default"


FAIL_FAST_STEPS = with_sh("""
    apiVersion: argoproj.io/v1alpha1
    kind: Workflow
    metadata: {name: ffsteps}
    spec:
      entrypoint: main
      templates:
      - name: main
        parallelism: 1
        failFast: FAILFAST
        steps:
        - - name: item
            template: sh
            withItems: ["exit 1", "true", "true"]
            arguments: {parameters: [{name: cmd, value: "{{item}}"}]}
""")


def test_fail_fast_with_parallelism_stops_starting_items(tmp_path):
    # operator.go checkParallelism / e2e expectedfailures/parallelism-step-fail-fast.yaml:
    # with failFast and parallelism, no child starts after one failed; the template fails
    # with "template has failed or errored children and failFast enabled".
    result, _ = run_yaml(FAIL_FAST_STEPS.replace("FAILFAST", "true"), tmp_path / "ff")
    assert result.status == "Failed"
    assert result.message == FAIL_FAST_MESSAGE
    assert result.node("item(0:exit 1)").phase == "Failed"
    for name in ("item(1:true)", "item(2:true)"):
        assert result.node(name).phase == "Omitted" and result.node(name).pod_name is None
    result, _ = run_yaml(FAIL_FAST_STEPS.replace("FAILFAST", "false"), tmp_path / "noff")
    assert result.status == "Failed"
    assert result.node("item(2:true)").phase == "Succeeded"


REFUSED_BASE = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {name: refused}
spec:
  entrypoint: main
  templates:
  - name: main
    dag:
      tasks:
      - {name: ok, template: ok}
      - {name: later, depends: ok, template: TEMPLATE}
  - name: ok
    container: {image: bash, command: [bash, -c, "touch /work-should-not-exist"]}
"""


@pytest.mark.parametrize("extra,message", [
    ("  - name: bad\n    http: {url: 'http://example.com'}\n",
     "template 'bad': http templates are not supported by the local runner"),
    ("  - name: bad\n    container: {image: alpine, args: [echo, hi]}\n",
     "template 'bad': container 'main' has args but no command: the image's entrypoint is unknown "
     "to the local runner"),
    ("  - name: bad\n    outputs: {artifacts: [{name: a, path: /tmp/a}]}\n    container: {image: bash, command: [true]}\n",
     "template 'bad': outputs artifacts are not supported by the local runner"),
    ("  - name: bad\n    podSpecPatch: '{\"hostNetwork\": true}'\n    container: {image: bash, command: [true]}\n",
     "template 'bad': podSpecPatch field 'hostNetwork' is not supported by the local runner (mfargo writes "
     "only imagePullSecrets)"),
    ("  - name: bad\n    synchronization: {mutex: {name: m}}\n    container: {image: bash, command: [true]}\n",
     "template 'bad': synchronization is not supported by the local runner"),
    ("  - name: bad\n    daemon: true\n    script: {image: bash, command: [bash], source: 'sleep 9'}\n",
     "template 'bad': only a container can be a daemon in the local runner"),
    ("  - name: bad\n    suspend: {}\n",
     "template 'bad': a suspend without a duration cannot be resumed in the local runner"),
    # Expressions and fields mfargo never writes (runner/expr.py: the shapes it reads).
    ("  - name: bad\n    container: {image: bash, command: [echo, \"{{=sprig.genPrivateKey('rsa')}}\"]}\n",
     "template 'bad', {{=sprig.genPrivateKey('rsa')}}: function sprig.genPrivateKey() is not accepted "
     "(the runner reads only toBase64(), asInt())"),
    ("  - name: bad\n    container: {image: bash, command: [echo, \"{{=inputs.parameters.x ?? 'fb'}}\"]}\n",
     "template 'bad', {{=inputs.parameters.x ?? 'fb'}}: '??' at column 21 is not accepted (in an expression"),
    ("  - name: bad\n    retryStrategy: {limit: 2, expression: \"lastRetry.status == 'Failed'\"}\n"
     "    container: {image: bash, command: [true]}\n",
     "template 'bad': retryStrategy.expression is not supported by the local runner"),
    ("  - name: bad\n    metrics: {prometheus: [{name: m, help: h, counter: {value: '1'}}]}\n"
     "    container: {image: bash, command: [true]}\n",
     "template 'bad': metrics is not supported by the local runner"),
    ("  - name: bad\n    outputs: {parameters: [{name: p, valueFrom: {expression: \"inputs.parameters.x | upper\"}}]}\n"
     "    container: {image: bash, command: [true]}\n",
     "template 'bad', outputs parameter 'p', valueFrom.expression: '|' at column 21 is not accepted"),
])
def test_unsupported_features_are_refused_before_the_run(tmp_path, capsys, extra, message):
    # Refused up front, in one line: the first task (which would run fine) never starts.
    wf = tmp_path / "wf.yaml"
    wf.write_text(REFUSED_BASE.replace("TEMPLATE", "bad") + extra)
    assert main([str(wf), "--work-dir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"mfargo run: {message}"), err
    assert not (tmp_path / "w" / "pods").exists()


@pytest.mark.parametrize("field,message", [
    ("when: \"{{tasks.ok.status}} =~ Succ\"", ", when: '=~' at column 3 is not accepted (in a when"),
    ("when: \"{{tasks.ok.status}} == Succeeded ? a : b\"", ", when: '?' at column 16 is not accepted"),
    ("depends: ok.AnySucceeded", ", depends: task result 'AnySucceeded' at column 4 is not accepted"),
    ("depends: ok.AllFailed || !ok", ", depends: task result 'AllFailed' at column 4 is not accepted"),
    ("hooks: {h: {expression: \"tasks.ok.status == 'Failed' && len(x) == 1\", template: ok}}",
     ", hooks.h.expression: function len() is not accepted"),
    ("withSequence: {count: '2'}", ": withSequence is not supported by the local runner"),
    ("dependencies: [ok]", ": dependencies is not supported by the local runner"),
])
def test_when_depends_and_fan_outs_mfargo_never_writes_are_refused(tmp_path, capsys, field, message):
    wf = tmp_path / "wf.yaml"
    text = REFUSED_BASE.replace("TEMPLATE", "ok").replace("- {name: later, depends: ok, template: ok}",
                                                           "- name: later\n        template: ok\n        " + field)
    wf.write_text(text)
    assert main([str(wf), "--work-dir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"mfargo run: template 'main', task 'later'{message}"), err
    assert not (tmp_path / "w" / "pods").exists()


def test_a_workflow_hook_expression_mfargo_never_writes_is_refused(tmp_path, capsys):
    wf = tmp_path / "wf.yaml"
    wf.write_text(REFUSED_BASE.replace("TEMPLATE", "ok").replace(
        "spec:\n", "spec:\n  hooks: {h: {expression: 'workflow.duration > 10', template: ok}}\n", 1))
    assert main([str(wf), "--work-dir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "mfargo run: spec.hooks.h.expression: '>' at column 19 is not accepted (in an expression"), err
    assert not (tmp_path / "w" / "pods").exists()


def test_every_example_passes_the_preflight():
    """What mfargo writes is what the runner reads: every checked-in example (examples/*.yaml,
    kept fresh by tests/test_examples.py) passes the preflight, expressions included."""
    examples = sorted((Path(__file__).parent.parent / "examples").glob("*.yaml"))
    assert examples
    for path in examples:
        preflight.check(WorkflowDoc(load_document(path)))


DAEMON = with_sh("""
    apiVersion: argoproj.io/v1alpha1
    kind: Workflow
    metadata: {name: daemon}
    spec:
      entrypoint: main
      templates:
      - name: main
        dag:
          tasks:
          - {name: beat, template: beat}
          - name: a
            template: sh
            arguments: {parameters: [{name: cmd, value: "sleep 1; echo a"}]}
          - name: b
            depends: a.Succeeded
            template: sh
            arguments: {parameters: [{name: cmd, value: "echo b"}]}
      - name: beat
        daemon: true
        container: {image: bash, command: [bash, -c, "echo $BASHPID > /tmp/pid; exec sleep 600"]}
""")


def test_a_daemon_runs_beside_its_dag_and_is_stopped_when_the_rest_has_finished(tmp_path):
    """Argo's daemon containers (docs/walk-through/daemon-containers.md): nothing waits for the
    daemon, and it is stopped when its DAG's other tasks are done; the run ends there."""
    import os

    result, _ = run_yaml(DAEMON, tmp_path, max_workers=1)  # the daemon takes no machine slot
    assert result.status == "Succeeded", result.message
    beat = result.node("beat")
    assert (beat.phase, beat.message) == ("Succeeded", "daemon stopped: the rest of its DAG has finished")
    assert beat.finished_at >= result.node("b").finished_at
    assert beat.name in result.node("daemon").children
    pid = int((Path(beat.pod_dir) / "tmp" / "pid").read_text())
    assert not os.path.exists(f"/proc/{pid}"), "the daemon's process outlived the run"


def test_a_dag_of_only_a_daemon_ends_at_once(tmp_path):
    """Nothing else to wait for: the daemon is stopped before its pod has even begun."""
    top = DAEMON.index("      - name: a\n")
    only = DAEMON[:top] + DAEMON[DAEMON.index("  - name: beat\n"):]
    import yaml

    assert [t["name"] for t in yaml.safe_load(only)["spec"]["templates"][0]["dag"]["tasks"]] == ["beat"]
    result, _ = run_yaml(only, tmp_path)
    assert result.status == "Succeeded", result.message
    assert (result.node("beat").phase, result.node("beat").message) == ("Succeeded", DAEMON_STOPPED)


@pytest.mark.parametrize("change, message", [
    (("depends: a.Succeeded", "depends: beat"),
     "template 'main', task 'b': a task depending on a daemon is not supported by the local runner"),
    (("{name: beat, template: beat}", "{name: beat, template: beat, withItems: [1, 2]}"),
     "template 'main', task 'beat': a daemon fanned out is not supported by the local runner"),
])
def test_a_daemon_other_than_a_leaf_dag_task_is_refused(tmp_path, capsys, change, message):
    wf = tmp_path / "wf.yaml"
    wf.write_text(DAEMON.replace(*change))
    assert main([str(wf), "--work-dir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"mfargo run: {message}"], err


HOOKS = with_sh("""
    apiVersion: argoproj.io/v1alpha1
    kind: Workflow
    metadata: {name: hooks}
    spec:
      entrypoint: main
      templates:
      - name: main
        dag:
          tasks:
          - name: a
            template: sh
            continueOn: {failed: true}
            arguments: {parameters: [{name: cmd, value: "echo out > /tmp/o; exit 1"}]}
            hooks:
              exit:
                template: sh
                arguments: {parameters: [{name: cmd, value: "echo exit-saw-{{tasks.a.status}}"}]}
              running:
                expression: tasks.a.status == 'Running'
                template: sh
                arguments: {parameters: [{name: cmd, value: "echo running"}]}
              failed:
                expression: tasks.a.status == 'Failed'
                template: sh
                arguments: {parameters: [{name: cmd, value: "echo failed"}]}
              never:
                expression: tasks.a.status == 'Succeeded'
                template: sh
                arguments: {parameters: [{name: cmd, value: "echo never"}]}
          - {name: b, depends: a.Failed, template: sh, arguments: {parameters: [{name: cmd, value: "true"}]}}
""")


def test_task_lifecycle_and_exit_hooks(tmp_path):
    # docs/lifecyclehook.md: an expression hook runs once when its expression holds; the exit
    # hook after the task; tasks depending on it wait for all its hooks; a Failed hook is ignored.
    result, _ = run_yaml(HOOKS, tmp_path)
    assert result.status == "Succeeded", result.message
    by_name = {n.display_name: n for n in result.nodes.values()}
    assert by_name["a.onExit"].outputs["result"] == "exit-saw-Failed"
    assert by_name["a.hooks.running"].outputs["result"] == "running"
    assert by_name["a.hooks.failed"].outputs["result"] == "failed"
    assert "a.hooks.never" not in by_name
    b = result.node("b")
    assert all(b.started_at >= by_name[h].finished_at for h in ("a.onExit", "a.hooks.running", "a.hooks.failed"))


def test_a_hook_that_errors_fails_the_template_and_onexit_runs_per_step(tmp_path):
    # A hook ending Error fails its DAG/Steps template (continueOn does not cover it).
    bad = re.sub(r"(exit:\n\s+template: )sh", r"\1no-such-template", HOOKS)
    assert bad != HOOKS
    result, _ = run_yaml(bad, tmp_path / "bad")
    assert result.status == "Failed"
    assert result.message.startswith("hook 'a.onExit' errored: template 'no-such-template' not found")
    result, _ = run_yaml(with_sh("""
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {name: steps-onexit}
        spec:
          entrypoint: main
          templates:
          - name: main
            steps:
            - - name: s
                template: sh
                onExit: bye
                withItems: [1, 2]
                arguments: {parameters: [{name: cmd, value: "echo {{item}}"}]}
          - name: bye
            container: {image: bash, command: [bash, -c, "echo bye"]}
        """), tmp_path / "steps")
    assert result.status == "Succeeded", result.message
    exits = sorted(n.display_name for n in result.nodes.values() if n.display_name.endswith(".onExit"))
    assert exits == ["s(0:1).onExit", "s(1:2).onExit"]
