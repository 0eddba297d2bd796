"""Runner: Argo behaviours as Argo's docs/source define them (issue 12, item 1).

Each test is written from Argo's documentation or controller source, cited per test.
"""
import textwrap
from pathlib import Path

import pytest

from mfargo.runner import preflight
from mfargo.runner.cli import main
from mfargo.runner.model import WorkflowDoc, load_document
from mfargo.runner.dag import DAEMON_STOPPED
from runner_tools import run_yaml

SH = """
  - name: sh
    inputs: {parameters: [{name: cmd}]}
    container: {image: bash, command: [bash, -c, "{{inputs.parameters.cmd}}"]}
"""


def with_sh(text: str) -> str:
    """The workflow plus a `sh` template running its `cmd` input."""
    return textwrap.dedent(text).rstrip() + SH


def test_skipped_producer_and_guarded_output(tmp_path):
    # Argo docs, variables.md "Outputs of Skipped and Omitted Nodes": a skipped task's output
    # is absent: mfargo's guard (templates/expr.py output_if_succeeded) never reads it.
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
              - {name: plain, template: plain, when: "1 == 2"}
              - name: consumer
                depends: plain
                template: sh
                arguments:
                  parameters:
                  - name: cmd
                    value: "echo {{=tasks['plain'].status == 'Succeeded' ? tasks['plain'].outputs.parameters['z'] : 'fb'}}"
          - name: plain
            container: {image: bash, command: [bash, -c, "echo real > /tmp/z"]}
            outputs: {parameters: [{name: z, valueFrom: {path: /tmp/z}}]}
        """), tmp_path)
    assert result.status == "Succeeded", result.message
    assert result.node("plain").phase == "Skipped"
    assert result.node("consumer").outputs["result"] == "fb"


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
     "template 'bad': http is not supported by the local runner"),
    ("  - name: bad\n    script: {image: bash, command: [bash], source: 'echo hi'}\n",
     "template 'bad': script is not supported by the local runner"),
    ("  - name: bad\n    suspend: {duration: '1s'}\n",
     "template 'bad': suspend is not supported by the local runner"),
    ("  - name: bad\n    parallelism: 1\n    failFast: true\n    dag: {tasks: [{name: a, template: ok}]}\n",
     "template 'bad': parallelism is not supported by the local runner"),
    ("  - name: bad\n    timeout: 10s\n    container: {image: bash, command: [true]}\n",
     "template 'bad': timeout is not supported by the local runner"),
    ("  - name: bad\n    sidecars: [{name: s, image: bash, command: [true]}]\n    container: {image: bash, command: [true]}\n",
     "template 'bad': sidecars is not supported by the local runner"),
    ("  - name: bad\n    container: {image: bash, command: [true], workingDir: /app}\n",
     "template 'bad': container.workingDir is not supported by the local runner"),
    ("  - name: bad\n    container: {image: bash, command: [true], env: [{name: C, valueFrom: {resourceFieldRef: "
     "{resource: limits.cpu}}}]}\n",
     "template 'bad', env 'C': valueFrom.resourceFieldRef is not supported by the local runner"),
    ("  - name: bad\n    container: {image: bash, command: [true], envFrom: [{configMapRef: {name: m}}]}\n",
     "template 'bad', envFrom: configMapRef is not supported by the local runner"),
    ("  - name: bad\n    dag: {tasks: [{name: a, template: ok, depends: b}, {name: b, template: ok, depends: a}]}\n",
     "template 'bad': dependency cycle a -> b -> a"),
    ("  - name: bad\n    dag: {tasks: [{name: a, template: ok, depends: c}]}\n",
     "template 'bad', task 'a': depends on unknown task 'c'"),
    ("  - name: bad\n    dag: {tasks: [{name: a, template: ok}, {name: a, template: ok}]}\n",
     "template 'bad': duplicate task name 'a'"),
    ("  - name: bad\n    volumes: [{name: v, hostPath: {path: /data}}]\n    container: {image: bash, command: [true]}\n",
     "template 'bad', volume 'v': hostPath is not supported by the local runner"),
    ("  - name: bad\n    volumes: [{name: v, emptyDir: {}}]\n"
     "    container: {image: bash, command: [true], volumeMounts: [{name: v, mountPath: /v, subPath: s}]}\n",
     "template 'bad', volumeMount 'v': subPath is not supported by the local runner"),
    ("  - name: bad\n    inputs: {parameters: [{name: x, default: d}]}\n    container: {image: bash, command: [true]}\n",
     "template 'bad', inputs parameter 'x': default is not supported by the local runner"),
    ("  - name: bad\n    outputs: {parameters: [{name: x, globalName: g, valueFrom: {path: /tmp/x}}]}\n"
     "    container: {image: bash, command: [true]}\n",
     "template 'bad', outputs parameter 'x': globalName is not supported by the local runner"),
    ("  - name: bad\n    outputs: {parameters: [{name: x, valueFrom: {path: /tmp/x, default: d}}]}\n"
     "    container: {image: bash, command: [true]}\n",
     "template 'bad', outputs parameter 'x': valueFrom.default is not supported by the local runner"),
    ("  - name: bad\n    retryStrategy: {limit: 2, retryPolicy: OnError}\n    container: {image: bash, command: [true]}\n",
     "template 'bad': retryStrategy.retryPolicy 'OnError' is not supported by the local runner"),
    ("  - name: bad\n    retryStrategy: {limit: 2, backoff: {duration: 1s, factor: 2}}\n"
     "    container: {image: bash, command: [true]}\n",
     "template 'bad': retryStrategy.backoff.factor is not supported by the local runner"),
    ("  - name: bad\n    resource: {action: get, manifest: 'kind: X'}\n",
     "template 'bad': resource.action 'get' is not supported by the local runner"),
    ("  - name: bad\n    resource: {manifest: 'kind: X'}\n",
     "template 'bad': resource.action: required (mfargo writes create)"),
    ("  - name: bad\n    resource: {action: create, manifest: 'kind: X', successCondition: 'status.restarts > 1'}\n",
     "template 'bad': resource.successCondition 'status.restarts > 1' is not supported by the local runner"),
    ("  - name: bad\n    container: {image: bash, command: [echo, '{{workflow.creationTimestamp.Y}}']}\n",
     "template 'bad': tag {{workflow.creationTimestamp.Y}} is not supported by the local runner"),
    ("  - name: bad\n    container: {image: bash, command: [echo, '{{workflow.parameters.x}}']}\n",
     "template 'bad': tag {{workflow.parameters.x}} is not supported by the local runner"),
    ("  - name: bad\n    container: {image: alpine, args: [echo, hi]}\n",
     "template 'bad': container 'main' has no command: the image's entrypoint is unknown to the local runner"),
    ("  - name: bad\n    outputs: {artifacts: [{name: a, path: /tmp/a}]}\n    container: {image: bash, command: [true]}\n",
     "template 'bad': outputs.artifacts is not supported by the local runner"),
    ("  - name: bad\n    podSpecPatch: '{\"hostNetwork\": true}'\n    container: {image: bash, command: [true]}\n",
     "template 'bad': podSpecPatch field 'hostNetwork' is not supported by the local runner (mfargo writes "
     "only imagePullSecrets, topologySpreadConstraints)"),
    ("  - name: bad\n    synchronization: {mutex: {name: m}}\n    container: {image: bash, command: [true]}\n",
     "template 'bad': synchronization is not supported by the local runner"),
    ("  - name: bad\n    daemon: true\n    dag: {tasks: [{name: a, template: ok}]}\n",
     "template 'bad': only a container can be a daemon in the local runner"),
    # Expressions and fields mfargo never writes (runner/expr.py: the shapes it reads).
    ("  - name: bad\n    container: {image: bash, command: [echo, \"{{=sprig.genPrivateKey('rsa')}}\"]}\n",
     "template 'bad', {{=sprig.genPrivateKey('rsa')}}: function sprig.genPrivateKey() is not accepted "
     "(the runner reads only toBase64(), asInt())"),
    ("  - name: bad\n    container: {image: bash, command: [echo, \"{{=inputs.parameters.x ?? 'fb'}}\"]}\n",
     "template 'bad', {{=inputs.parameters.x ?? 'fb'}}: '??' at column 21 is not accepted (in an expression"),
    ("  - name: bad\n    retryStrategy: {limit: 2, expression: \"lastRetry.status == 'Failed'\"}\n"
     "    container: {image: bash, command: [true]}\n",
     "template 'bad': retryStrategy.expression \"lastRetry.status == 'Failed'\" is not supported by the local "
     "runner (mfargo writes lastRetry.exitCode != \"<code>\")"),
    ("  - name: bad\n    metrics: {prometheus: [{name: m, help: h, counter: {value: '1'}}]}\n"
     "    container: {image: bash, command: [true]}\n",
     "template 'bad': metrics is not supported by the local runner"),
    ("  - name: bad\n    outputs: {parameters: [{name: p, valueFrom: {expression: \"inputs.parameters.x | upper\"}}]}\n"
     "    container: {image: bash, command: [true]}\n",
     "template 'bad', outputs parameter 'p', valueFrom.expression: '|' at column 21 is not accepted"),

    # A null item of a list is not an absent field: one line, not a traceback.
    ("  - name: bad\n    dag: {tasks: [null]}\n", "template 'bad', task must be a mapping"),
    ("  - name: bad\n    steps: [null]\n", "template 'bad': steps[0] must be a list"),
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
    ("hooks: {exit: {template: ok}}", ": hooks is not supported by the local runner"),
    ("onExit: ok", ": onExit is not supported by the local runner"),
    ("continueOn: {failed: true}", ": continueOn is not supported by the local runner"),
    ("withItems: [a, b]", ": withItems is not supported by the local runner"),
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


@pytest.mark.parametrize("spec,message", [
    ("hooks: {h: {expression: 'workflow.duration > 10', template: ok}}",
     "spec.hooks.h.expression: '>' at column 19 is not accepted (in an expression"),
    ("hooks: {exit: {template: ok}}", "spec.hooks.exit: a hook without an expression is not supported"),
    ("hooks: {h: null}", "spec.hooks.h must be a mapping"),
    ("onExit: ok", "spec.onExit is not supported by the local runner"),
    ("volumes: [{name: v, emptyDir: {}}]", "spec.volumes is not supported by the local runner"),
    ("retryStrategy: {limit: 1}", "spec.retryStrategy is not supported by the local runner"),
    ("arguments: {parameters: [{name: p, value: a, enum: [a, b]}]}",
     "spec, arguments parameter 'p': enum is not supported by the local runner"),
])
def test_workflow_fields_mfargo_never_writes_are_refused(tmp_path, capsys, spec, message):
    wf = tmp_path / "wf.yaml"
    wf.write_text(REFUSED_BASE.replace("TEMPLATE", "ok").replace("spec:\n", f"spec:\n  {spec}\n", 1))
    assert main([str(wf), "--work-dir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"mfargo run: {message}"), err
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
    (("{name: beat, template: beat}", "{name: beat, template: beat, withParam: '[1, 2]'}"),
     "template 'main', task 'beat': a daemon fanned out is not supported by the local runner"),
])
def test_a_daemon_other_than_a_leaf_dag_task_is_refused(tmp_path, capsys, change, message):
    wf = tmp_path / "wf.yaml"
    wf.write_text(DAEMON.replace(*change))
    assert main([str(wf), "--work-dir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"mfargo run: {message}"], err
