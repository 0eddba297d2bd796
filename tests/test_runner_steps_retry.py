"""Runner: steps recursion (templates/recursion.py's shape), expression outputs, retries, deadlines,
workflow hooks."""
import time

from mfargo.runner import events as ev
from runner_tools import run_yaml

COUNTER = """
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: counter}
spec:
  entrypoint: main
  templates:
  - name: main
    dag:
      tasks:
      - name: count
        template: loop
        arguments: {parameters: [{name: n, value: "0"}]}
      - name: report
        depends: count
        template: show
        arguments: {parameters: [{name: n, value: "{{tasks.count.outputs.parameters.n}}"}]}
  - name: loop
    inputs: {parameters: [{name: n}]}
    outputs:
      parameters:
      - name: n
        valueFrom:
          expression: "steps['again'].status == 'Skipped' ? steps['run'].outputs.parameters['n'] : steps['again'].outputs.parameters['n']"
    steps:
    - - name: run
        template: incr
        arguments: {parameters: [{name: n, value: "{{=asInt(inputs.parameters.n) + 1}}"}]}
    - - name: again
        template: loop
        when: "{{steps.run.outputs.parameters.next}} == loop"
        arguments: {parameters: [{name: n, value: "{{steps.run.outputs.parameters.n}}"}]}
  - name: incr
    inputs: {parameters: [{name: n}]}
    outputs:
      parameters: [{name: n, valueFrom: {path: /tmp/n}}, {name: next, valueFrom: {path: /tmp/next}}]
    container:
      image: bash
      command: [bash, -c, "n={{inputs.parameters.n}}; echo $n > /tmp/n; if ((n < 3)); then echo loop; else echo end; fi > /tmp/next"]
  - name: show
    inputs: {parameters: [{name: n}]}
    container: {image: bash, command: [bash, -c, "echo final={{inputs.parameters.n}}"]}
"""


def test_steps_recursion_counts_to_three(tmp_path):
    result, rec = run_yaml(COUNTER, tmp_path)
    assert result.status == "Succeeded", result.message
    assert result.node("count").outputs["parameters"]["n"] == "3"
    runs = [n for n in result.nodes.values() if n.display_name == "run"]
    assert sorted(n.outputs["parameters"]["n"] for n in runs) == ["1", "2", "3"]
    agains = [n for n in result.nodes.values() if n.display_name == "again"]
    assert sorted(n.phase for n in agains) == ["Skipped", "Succeeded", "Succeeded"]
    logs = [e.message for e in rec.kinds(ev.LOG)]
    assert "final=3" in logs


RETRY = """
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: retry}
spec:
  entrypoint: main
  templates:
  - name: main
    dag:
      tasks:
      - {name: flaky, template: flaky}
      - {name: hopeless, template: hopeless}
  - name: flaky
    retryStrategy:
      limit: 2
      retryPolicy: Always
      backoff: {duration: "10s"}
    outputs:
      parameters: [{name: attempt, valueFrom: {path: /tmp/attempt}}]
    container:
      image: bash
      command: [bash, -c]
      args: ["echo {{retries}} > /tmp/attempt; echo attempt {{retries}}; test {{retries}} -ge 1"]
  - name: hopeless
    retryStrategy: {limit: 1, retryPolicy: Always}
    container: {image: bash, command: [bash, -c, "exit 2"]}
"""


def test_retry_fails_once_then_succeeds(tmp_path):
    t0 = time.time()
    result, rec = run_yaml(RETRY, tmp_path, backoff_scale=0.01)
    elapsed = time.time() - t0
    flaky = result.node("flaky")
    assert flaky.type == "Retry" and flaky.phase == "Succeeded"
    attempts = [result.nodes[c] for c in flaky.children]
    assert [a.display_name for a in attempts] == ["flaky(0)", "flaky(1)"]
    assert [a.phase for a in attempts] == ["Failed", "Succeeded"]
    assert attempts[0].pod_name != attempts[1].pod_name
    assert flaky.outputs["parameters"]["attempt"] == "1"
    retries = rec.kinds(ev.NODE_RETRY)
    assert [(e.node, e.attempt) for e in retries] == [("flaky", 1), ("hopeless", 1)]
    assert "backoff 0.10s" in retries[0].message  # 10s * 0.01
    hopeless = result.node("hopeless")
    assert hopeless.phase == "Failed" and len(hopeless.children) == 2
    assert result.status == "Failed"
    assert elapsed < 20


def test_retry_limit_exhausted_and_backoff(tmp_path):
    result, rec = run_yaml("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: exhaust}
        spec:
          entrypoint: always-fails
          templates:
          - name: always-fails
            retryStrategy: {limit: 3, retryPolicy: Always, backoff: {duration: 1s}}
            container: {image: bash, command: [bash, -c, "exit 1"]}
        """, tmp_path, backoff_scale=0.01)
    node = result.nodes[result.workflow_name]
    assert node.phase == "Failed" and len(node.children) == 4
    assert "no more retries left" in node.message
    waits = [e.message.rsplit("backoff ", 1)[1] for e in rec.kinds(ev.NODE_RETRY)]
    assert waits == ["0.01s", "0.01s", "0.01s"]  # mfargo's back-off is constant


def test_active_deadline_kills_the_pod(tmp_path):
    t0 = time.time()
    result, _ = run_yaml("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: deadline}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - {name: slow, template: slow}
          - name: slow
            activeDeadlineSeconds: 1
            container:
              image: bash
              command: [bash, -c, "sleep 1000 & echo $! > /tmp/pid; wait"]
        """, tmp_path)
    assert time.time() - t0 < 10
    slow = result.node("slow")
    assert slow.phase == "Failed"
    assert slow.message == "Pod was active on the node longer than the specified deadline"
    assert result.status == "Failed"
    # the whole process group is gone (bash and its background sleep)
    pid = int((result.work_dir / "pods" / slow.pod_name / "tmp" / "pid").read_text())
    assert not _alive(pid)


def _alive(pid, wait=3.0):
    """True if pid is still a live (non-zombie) process after ``wait`` seconds."""
    from pathlib import Path
    deadline = time.time() + wait
    while True:
        try:
            state = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False
        if "\nState:\tZ" in state:  # killed, waiting to be reaped by init
            return False
        if time.time() > deadline:
            return True
        time.sleep(0.05)


def test_workflow_deadline_and_error_hook(tmp_path):
    t0 = time.time()
    result, _ = run_yaml("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: wfdeadline}
        spec:
          entrypoint: main
          activeDeadlineSeconds: 1
          hooks:
            on-error: {expression: "workflow.status == 'Error' || workflow.status == 'Failed'", template: report}
          templates:
          - name: main
            steps:
            - - {name: forever, template: forever}
          - name: forever
            container: {image: bash, command: [bash, -c, "sleep 1000"]}
          - name: report
            outputs:
              parameters: [{name: seen, valueFrom: {path: /tmp/seen}}]
            container:
              image: bash
              command: [bash, -c, "echo '{{workflow.status}}' > /tmp/seen"]
        """, tmp_path)
    assert time.time() - t0 < 10
    assert result.status == "Failed"
    assert "activeDeadlineSeconds" in result.message
    assert result.node("forever").phase == "Failed"
    assert result.node("forever").message == "Step exceeded its deadline"
    assert result.node("hooks.on-error").outputs["parameters"]["seen"] == "Failed"


def test_runner_timeout_bounds_everything(tmp_path):
    t0 = time.time()
    result, _ = run_yaml("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: hang}
        spec:
          entrypoint: hang
          templates:
          - name: hang
            container: {image: bash, command: [bash, -c, "trap '' TERM; sleep 1000"]}
        """, tmp_path, timeout=1.0)
    assert time.time() - t0 < 8  # TERM is ignored: SIGKILL after the grace period
    assert result.status == "Failed"
    assert "timed out" in result.message
