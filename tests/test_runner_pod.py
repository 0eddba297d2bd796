"""Runner: what a pod sees - code dir mapping, env (fieldRef, $(VAR), secrets),
PYTHONPATH/sitecustomize chaining, start failures."""
import json

from mfargo.runner import events as ev
from mfargo.runner import mountns
from runner_tools import pod_env, run_yaml


def test_code_dir_mapping(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "mymod.py").write_text("X = 'from code dir'\n")
    result, rec = run_yaml("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata:
          name: codedir
          annotations: {mfargo/code-dir: /app}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - {name: cd, template: cd}
              - {name: wd, template: wd}
          - name: cd
            container:
              image: img
              command: [bash, -c, "cd /app && ls mymod.py && python -c 'import mymod; print(mymod.X)'"]
          - name: wd
            container:
              image: img
              env: [{name: APP_FILE, value: /app/mymod.py}]
              command: [bash, -c, "cat $APP_FILE | head -1; python -c 'import sys; print(sys.path[1:3])'"]
        """, tmp_path, code_dir=code)
    assert result.status == "Succeeded", result.message
    logs = {e.node: [] for e in rec.kinds(ev.LOG)}
    for e in rec.kinds(ev.LOG):
        logs[e.node].append(e.message)
    assert logs["cd"] == ["mymod.py", "from code dir"]
    assert logs["wd"][0] == "X = 'from code dir'"
    site_dir = str((__import__("mfargo.runner.pod", fromlist=["x"]).SITE_DIR))
    # PYTHONPATH names the code dir where the pod sees it (one copy of each package)
    assert json.loads(logs["wd"][1].replace("'", '"')) == [site_dir, "/app" if mountns.available() else str(code)]


def test_env_field_refs_and_kubernetes_expansion(tmp_path):
    result, rec = run_yaml("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: envs, namespace: team}
        spec:
          entrypoint: show
          serviceAccountName: runner-sa
          podMetadata:
            labels: {app: demo}
            annotations: {run: "argo-{{workflow.name}}"}
          templates:
          - name: show
            metadata:
              annotations: {step: show}
            container:
              image: img
              command: [bash, -c, "echo $(GREETING) '$$(NOT_EXPANDED) $(UNKNOWN)'; env | grep ^X_ | sort"]
              env:
              - {name: BASE, value: hello}
              - {name: GREETING, value: "$(BASE) world"}
              - {name: X_POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
              - {name: X_NS, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
              - {name: X_SA, valueFrom: {fieldRef: {fieldPath: spec.serviceAccountName}}}
              - {name: X_IP, valueFrom: {fieldRef: {fieldPath: status.hostIP}}}
              - {name: X_APP, valueFrom: {fieldRef: {fieldPath: "metadata.labels['app']"}}}
              - {name: X_WF, valueFrom: {fieldRef: {fieldPath: "metadata.labels['workflows.argoproj.io/workflow']"}}}
              - {name: X_RUN, valueFrom: {fieldRef: {fieldPath: "metadata.annotations['run']"}}}
              - {name: X_STEP, valueFrom: {fieldRef: {fieldPath: "metadata.annotations['step']"}}}
        """, tmp_path)
    assert result.status == "Succeeded", result.message
    lines = [e.message for e in rec.kinds(ev.LOG)]
    pod = result.nodes[result.workflow_name].pod_name
    assert lines[0] == "hello world $(NOT_EXPANDED) $(UNKNOWN)"
    env = dict(line.split("=", 1) for line in lines[1:])
    assert env == {"X_POD": pod, "X_NS": "team", "X_SA": "runner-sa", "X_IP": "127.0.0.1", "X_APP": "demo",
                   "X_WF": result.workflow_name, "X_RUN": f"argo-{result.workflow_name}", "X_STEP": "show"}


def test_secrets_are_errors_unless_given(tmp_path):
    text = """
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: secret}
        spec:
          entrypoint: s
          templates:
          - name: s
            container:
              image: img
              command: [bash, -c, "echo $TOKEN"]
              env:
              - name: TOKEN
                valueFrom: {secretKeyRef: {name: my-secret, key: token}}
        """
    result, _ = run_yaml(text, tmp_path / "a")
    node = result.nodes[result.workflow_name]
    assert result.status == "Failed" and "my-secret" in node.message
    result, rec = run_yaml(text, tmp_path / "b", secrets={"my-secret": {"token": "s3cr3t"}})
    assert result.status == "Succeeded"
    assert [e.message for e in rec.kinds(ev.LOG)] == ["s3cr3t"]


def test_start_failures_and_absolute_commands(tmp_path):
    result, _ = run_yaml("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: start}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - {name: missing, template: missing}
              - {name: image-python, template: image-python}
          - name: missing
            container: {image: img, command: [no-such-binary-xyz]}
          - name: image-python
            container: {image: python:3.11, command: [/usr/local/bin/python-not-here/../python, -c, "print(1)"]}
        """, tmp_path)
    missing = result.node("missing")
    assert missing.phase == "Failed" and "executable file not found" in missing.message
    assert result.node("image-python").phase == "Succeeded"  # found by base name on PATH
    assert result.status == "Failed"


def test_sitecustomize_chaining(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = 'yes'\n")
    env = pod_env({"PYTHONPATH": str(other)})
    result, _ = run_yaml("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: chain}
        spec:
          entrypoint: main
          templates:
          - name: main
            dag:
              tasks:
              - {name: s, template: s}
              - {name: use, depends: s, template: use, arguments: {parameters: [{name: r, value: "{{tasks.s.outputs.parameters.r}}"}]}}
          - name: s
            outputs: {parameters: [{name: r, valueFrom: {path: /tmp/r}}]}
            container:
              image: python:3.11
              command: [python, -c, "import os, socket; open('/tmp/r', 'w').write('%s %s' % (os.environ.get('CHAINED'), socket.gethostbyname('anything.ns.svc')))"]
          - name: use
            inputs: {parameters: [{name: r}]}
            container: {image: img, command: [bash, -c, "test '{{inputs.parameters.r}}' = 'yes 127.0.0.1'"]}
        """, tmp_path, env=env)
    assert result.status == "Succeeded", result.message
    assert result.node("s").outputs["parameters"]["r"] == "yes 127.0.0.1"


def test_private_tmp_by_default_shared_on_request(tmp_path):
    assert str(tmp_path).startswith("/tmp/")
    target = tmp_path / "shared.txt"
    text = f"""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {{name: tmp}}
        spec:
          entrypoint: w
          templates:
          - name: w
            container: {{image: img, command: [bash, -c, "mkdir -p {tmp_path} && echo x > {target}"]}}
        """
    result, rec = run_yaml(text, tmp_path / "private")
    assert result.status == "Succeeded"
    assert not target.exists()  # went to <pod dir>/tmp/...
    pod = result.nodes[result.workflow_name].pod_name
    assert (result.work_dir / "pods" / pod / "tmp" / target.relative_to("/tmp")).is_file()
    result, _ = run_yaml(text, tmp_path / "shared", private_tmp=False)
    assert result.status == "Succeeded" and target.read_text() == "x\n"


UNREACHABLE = """
    apiVersion: argoproj.io/v1alpha1
    kind: Workflow
    metadata: {name: unreachable}
    spec:
      entrypoint: main
      templates:
      - name: main
        container:
          image: python
          command: [bash, -c, "echo 'print(\\"task ran\\")' > flow.py && python flow.py --datastore=s3 step start"]
          env:
          - {name: METAFLOW_S3_ENDPOINT_URL, value: "http://user:secret@127.0.0.1:1"}
          - {name: METAFLOW_DEFAULT_METADATA, value: service}
          - {name: METAFLOW_SERVICE_URL, value: "http://metadata.default.svc:2"}
"""


def test_unreachable_endpoints_fail_the_task_at_once_with_one_line(tmp_path):
    result, rec = run_yaml(UNREACHABLE, tmp_path / "s3")
    node = result.node("unreachable")
    assert node.phase == "Failed" and node.message == "Error (exit code 1)"
    lines = [e.message for e in rec.kinds(ev.LOG)]
    assert lines == [f"mfargo runner: S3 endpoint http://127.0.0.1:1 (METAFLOW_S3_ENDPOINT_URL) is unreachable "
                     f"from pod {node.pod_name}: Connection refused"]
    # the metadata service (a cluster DNS name, resolved to this machine) is checked too
    result, rec = run_yaml(UNREACHABLE.replace("127.0.0.1:1", "127.0.0.1:9").replace(
        "--datastore=s3", "--datastore=local"), tmp_path / "md")
    lines = [e.message for e in rec.kinds(ev.LOG)]
    node = result.node("unreachable")
    assert lines == [f"mfargo runner: metadata service http://metadata.default.svc:2 (METAFLOW_SERVICE_URL) is "
                     f"unreachable from pod {node.pod_name}: Connection refused"]


MOUNTS = """
    apiVersion: argoproj.io/v1alpha1
    kind: Workflow
    metadata: {name: mounts}
    spec:
      entrypoint: main
      arguments: {parameters: [{name: v, value: /tmp/x}]}
      templates:
      - name: main
        volumes: [{name: scratch, emptyDir: {}}]
        container:
          image: bash
          command: [bash, -c, 'printf "%s|%s\\n" "$0" "$V"; grep " /data " /proc/mounts | cut -d" " -f2; echo t > /tmp/x; cd /data && pwd', "{{=workflow.parameters['v']}}"]
          env: [{name: V, value: "{{=workflow.parameters['v']}}"}]
          volumeMounts: [{name: scratch, mountPath: /data}]
"""


def test_volumes_are_mounts_and_values_arrive_byte_for_byte(tmp_path):
    # Kubernetes: a volumeMount is a mount point, /tmp is the container's own, and a
    # parameter value naming /tmp/x is the text /tmp/x (never rewritten).
    if not mountns.available():
        import pytest
        pytest.skip("this machine gives no mount namespaces (not root): paths are rewritten instead")
    result, rec = run_yaml(MOUNTS, tmp_path)
    assert result.status == "Succeeded", result.message
    lines = [e.message for e in rec.kinds(ev.LOG)]
    assert lines == ["/tmp/x|/tmp/x", "/data", "/data"]
    pod_dir = result.work_dir / "pods" / result.node("mounts").pod_name
    assert (pod_dir / "tmp" / "x").read_text() == "t\n"  # the pod's private /tmp
    assert not __import__("os").path.exists("/data")  # the mount point the run made is gone
