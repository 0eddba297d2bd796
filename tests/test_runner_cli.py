"""Runner CLI: exit codes, output, --run-id-file (also on failure), SIGTERM kills
every pod, concurrent runs do not collide."""
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mfargo.runner import local_datastore
from mfargo.runner.cli import main
from mfargo.runner.slots import machine_cores
from runner_tools import pod_env

OK = """
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: cli}
spec:
  entrypoint: main
  arguments: {parameters: [{name: code, value: "0"}]}
  templates:
  - name: main
    inputs: {parameters: [{name: code}]}
    container:
      image: bash
      command: [bash, -c, "echo hi > /tmp/x; echo from-pod; exit {{inputs.parameters.code}}"]
"""


def test_cli_success_and_failure(tmp_path, capsys):
    wf = tmp_path / "wf.yaml"
    wf.write_text(OK)
    rid = tmp_path / "run-id"
    assert main([str(wf), "--run-id-file", str(rid), "--backoff-scale", "0.01"]) == 0
    out = capsys.readouterr().out
    name = rid.read_text().strip()[len("argo-"):]
    assert name.startswith("cli-")
    assert f"Workflow {name}: Succeeded" in out
    assert f"Metaflow run id: argo-{name}" in out
    assert f"{name}-main-" in out and "| from-pod" in out
    rid.unlink()
    assert main([str(wf), "-p", "code=3", "--run-id-file", str(rid), "--quiet"]) == 1
    out = capsys.readouterr().out
    name = rid.read_text().strip()[len("argo-"):]
    assert f"Workflow {name}: Failed" in out and "from-pod" not in out
    assert "work directory:" in out  # kept after a failure
    assert main([str(wf), "-p", "nope=1"]) == 2


def _run_cli(wf, work, *extra):
    env = pod_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.Popen([sys.executable, "-m", "mfargo.runner.cli", str(wf), "--work-dir", str(work), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def test_sigterm_kills_every_pod(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text("""
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: sleepers}
spec:
  entrypoint: main
  templates:
  - name: main
    dag:
      tasks:
      - {name: s, template: sleep, withParam: '[1, 2, 3]'}
  - name: sleep
    container:
      image: bash
      command: [bash, -c, "sleep 1000 & echo $! > /tmp/pid; wait"]
""")
    work = tmp_path / "work"
    proc = _run_cli(wf, work)
    try:
        deadline = time.time() + 20
        pids = []
        while time.time() < deadline:
            pids = [int(p.read_text()) for p in work.glob("pods/*/tmp/pid") if p.read_text().strip()]
            if len(pids) == 3:
                break
            time.sleep(0.1)
        assert len(pids) == 3
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out
    assert "terminated by SIGTERM" in out
    for pid in pids:
        deadline = time.time() + 3
        while True:
            try:
                state = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                break  # gone
            if "\nState:\tZ" in state or time.time() > deadline:
                assert "\nState:\tZ" in state, f"pod process {pid} survived SIGTERM of the runner"
                break
            time.sleep(0.05)


def test_two_runs_at_once_do_not_collide(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text(OK.replace("exit {{inputs.parameters.code}}", "sleep 0.5"))
    a = _run_cli(wf, tmp_path / "a", "--run-id-file", str(tmp_path / "a.id"))
    b = _run_cli(wf, tmp_path / "b", "--run-id-file", str(tmp_path / "b.id"))
    out_a, _ = a.communicate(timeout=60)
    out_b, _ = b.communicate(timeout=60)
    assert a.returncode == 0 and b.returncode == 0, out_a + out_b
    ida, idb = (tmp_path / "a.id").read_text(), (tmp_path / "b.id").read_text()
    assert ida != idb


def test_s3_option_uses_the_s3server_api(tmp_path, capsys, monkeypatch):
    """--s3 starts runner.s3server.S3Server, creates the buckets the workflow names and
    passes its env to pods (a fake server here; the real one has the same API)."""
    import types

    calls = []

    class FakeS3:
        endpoint_url = "http://127.0.0.1:1"

        @classmethod
        def start(cls, data_dir=None, keep=False, timeout=30):
            calls.append(("start", keep))
            return cls()

        def env(self):
            return {"METAFLOW_S3_ENDPOINT_URL": self.endpoint_url, "AWS_ACCESS_KEY_ID": "k"}

        def create_bucket(self, name):
            calls.append(("bucket", name))

        def stop(self):
            calls.append(("stop",))

    monkeypatch.setitem(sys.modules, "mfargo.runner.s3server", types.SimpleNamespace(S3Server=FakeS3))
    wf = tmp_path / "wf.yaml"
    wf.write_text("""
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: s3}
spec:
  entrypoint: main
  templates:
  - name: main
    container:
      image: bash
      command: [bash, -c, "echo $METAFLOW_S3_ENDPOINT_URL $ROOT"]
      env: [{name: ROOT, value: "s3://my-bucket/metaflow"}]
""")
    assert main([str(wf), "--s3", "--s3-bucket", "extra"]) == 0
    out = capsys.readouterr().out
    assert "| http://127.0.0.1:1 s3://my-bucket/metaflow" in out
    assert calls == [("start", False), ("bucket", "extra"), ("bucket", "my-bucket"), ("stop",)]


def test_a_relative_include_file_path_is_passed_absolute(tmp_path, monkeypatch):
    """The init pod uploads a -p IncludeFile path from another directory: pass it absolute."""
    import json as _json

    from mfargo.runner.cli import include_file_paths_absolute

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.csv").write_text("a,b\n")
    descriptor = _json.dumps({"type": "uploader-v2", "url": "s3://b/x", "is_text": True, "encoding": "utf-8"})
    doc = {"spec": {"arguments": {"parameters": [{"name": "data", "value": descriptor},
                                                 {"name": "plain", "value": "x"}]}}}
    given = {"data": "data.csv", "plain": "data.csv"}
    out = include_file_paths_absolute(doc, given)
    assert out == {"data": str(tmp_path / "data.csv"), "plain": "data.csv"}
    assert include_file_paths_absolute(doc, {"data": "missing.csv"}) == {"data": "missing.csv"}


S3_WORKERS_POD = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {name: workers}
spec:
  entrypoint: main
  templates:
  - name: main
    container:
      image: bash
      command: [bash, -c, 'echo "workers=[${METAFLOW_S3_WORKER_COUNT-unset}]"']
"""


def _pod_s3_workers(tmp_path, capsys, monkeypatch, endpoint, caller=None, yaml_value=None):
    text = S3_WORKERS_POD
    if yaml_value is not None:
        text += "      env: [{name: METAFLOW_S3_WORKER_COUNT, value: '%s'}]\n" % yaml_value
    wf = tmp_path / "wf.yaml"
    wf.write_text(text)
    monkeypatch.setenv("METAFLOW_S3_ENDPOINT_URL", endpoint)
    if caller is None:
        monkeypatch.delenv("METAFLOW_S3_WORKER_COUNT", raising=False)
    else:
        monkeypatch.setenv("METAFLOW_S3_WORKER_COUNT", caller)
    assert main([str(wf), "--backoff-scale", "0.01"]) == 0
    [line] = [ln for ln in capsys.readouterr().out.splitlines() if "workers=[" in ln]
    return line.split("workers=[", 1)[1].split("]", 1)[0]


def test_pods_get_one_s3_worker_per_core_only_against_a_loopback_s3(tmp_path, capsys, monkeypatch):
    cores = str(machine_cores())
    assert _pod_s3_workers(tmp_path, capsys, monkeypatch, "http://127.0.0.1:9") == cores
    assert _pod_s3_workers(tmp_path, capsys, monkeypatch, "http://localhost:9/") == cores
    assert _pod_s3_workers(tmp_path, capsys, monkeypatch, "http://[::1]:9") == cores
    # a remote S3 keeps Metaflow's default (parallel transfers pay off over a network)
    assert _pod_s3_workers(tmp_path, capsys, monkeypatch, "https://s3.example.com") == "unset"
    assert _pod_s3_workers(tmp_path, capsys, monkeypatch, "http://10.0.0.5:8333") == "unset"
    # the caller's value, then the YAML's, win over the default
    assert _pod_s3_workers(tmp_path, capsys, monkeypatch, "http://127.0.0.1:9", caller="7") == "7"
    assert _pod_s3_workers(tmp_path, capsys, monkeypatch, "http://127.0.0.1:9", caller="7", yaml_value="3") == "3"


DATASTORE_POD = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {name: ds}
spec:
  entrypoint: main
  templates:
  - name: main
    container:
      image: python
      command: [bash, -c, 'export MF_DATASTORE=s3 MF_DATASTORE_ROOT=s3://bkt/m; exec python "$0" --quiet --datastore s3
                 --datastore-root s3://bkt/m --datastore=s3 --datastore-root=s3://bkt/m step x --datastore-roots y', SHOW]
      env: [{name: METAFLOW_DEFAULT_DATASTORE, value: s3}, {name: METAFLOW_DATASTORE_SYSROOT_S3, value: 's3://bkt/m'}]
"""
SHOW = """import json, os, sys
print("SHOW" + json.dumps([sys.argv[1:]] + [os.environ.get(k) for k in (
    "MF_DATASTORE", "MF_DATASTORE_ROOT", "METAFLOW_DEFAULT_DATASTORE", "METAFLOW_DATASTORE_SYSROOT_LOCAL")]))
"""
S3_ARGV = ["--quiet", "--datastore", "s3", "--datastore-root", "s3://bkt/m", "--datastore=s3",
           "--datastore-root=s3://bkt/m", "step", "x", "--datastore-roots", "y"]


@pytest.fixture
def listening():
    """A loopback port that accepts TCP connections (pods check their S3 endpoint first)."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as server:
        yield "http://127.0.0.1:%d" % server.getsockname()[1]


def _fake_s3(monkeypatch, endpoint) -> list:
    import types

    started = []

    class FakeS3:
        endpoint_url = endpoint

        @classmethod
        def start(cls, data_dir=None, keep=False, timeout=None):
            started.append(data_dir)
            return cls()

        def env(self):
            return {"METAFLOW_S3_ENDPOINT_URL": self.endpoint_url}

        def create_bucket(self, name):
            pass

        def stop(self):
            pass

    monkeypatch.setitem(sys.modules, "mfargo.runner.s3server", types.SimpleNamespace(S3Server=FakeS3))
    return started


def _datastore_seen(tmp_path, capsys, monkeypatch, text, *extra):
    """What a pod's Python process saw: its argv after the script, MF_DATASTORE(_ROOT),
    METAFLOW_DEFAULT_DATASTORE, METAFLOW_DATASTORE_SYSROOT_LOCAL; and the CLI's output."""
    import json as _json

    for k in ("METAFLOW_S3_ENDPOINT_URL", "METAFLOW_DATASTORE_SYSROOT_LOCAL", "METAFLOW_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("METAFLOW_HOME", str(tmp_path / "no-config"))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "show.py").write_text(SHOW)  # the work directory is visible in every pod
    wf = tmp_path / "wf.yaml"
    wf.write_text(text.replace("SHOW", str(work / "show.py")))
    rc = main([str(wf), "--work-dir", str(work), "--backoff-scale", "0.01", *extra])
    out = capsys.readouterr().out
    assert rc == 0, out
    [line] = [ln for ln in out.splitlines() if "| SHOW" in ln]
    return _json.loads(line.split("| SHOW", 1)[1]), out, work


def test_default_local_datastore_replaces_the_yamls_s3_in_env_and_argv(tmp_path, capsys, monkeypatch, listening):
    started = _fake_s3(monkeypatch, listening)
    (argv, mf_ds, mf_root, default_ds, sysroot), out, work = _datastore_seen(tmp_path, capsys, monkeypatch,
                                                                             DATASTORE_POD)
    assert argv == ["--quiet", "--datastore", "local", "--datastore=local", "step", "x", "--datastore-roots", "y"]
    assert (mf_ds, mf_root, default_ds, sysroot) == ("local", None, "local", str(work / "metaflow-local"))
    assert started == [] and "local S3 at" not in out
    assert f"local datastore in {work / 'metaflow-local'}" in out
    # the hint reads it back with the local datastore
    hint = out.split("Read this run with Metaflow's client:\n", 1)[1].splitlines()[0]
    words = shlex.split(hint)
    assert dict(w.split("=", 1) for w in words[:3]) == {
        "METAFLOW_DEFAULT_DATASTORE": "local", "METAFLOW_DEFAULT_METADATA": "local",
        "METAFLOW_DATASTORE_SYSROOT_LOCAL": str(work / "metaflow-local")}


def test_s3_option_keeps_the_yamls_datastore(tmp_path, capsys, monkeypatch, listening):
    started = _fake_s3(monkeypatch, listening)
    (argv, mf_ds, mf_root, default_ds, _), out, work = _datastore_seen(tmp_path, capsys, monkeypatch,
                                                                       DATASTORE_POD, "--s3")
    assert (argv, mf_ds, mf_root, default_ds) == (S3_ARGV, "s3", "s3://bkt/m", "s3")
    assert started == [work / "s3"] and "local datastore" not in out


def test_an_endpoint_in_the_yaml_keeps_s3(tmp_path, capsys, monkeypatch, listening):
    started = _fake_s3(monkeypatch, listening)
    text = DATASTORE_POD.replace("env: [", "env: [{name: METAFLOW_S3_ENDPOINT_URL, value: '%s'}, " % listening)
    (argv, mf_ds, _, default_ds, _), out, _ = _datastore_seen(tmp_path, capsys, monkeypatch, text)
    assert (argv, mf_ds, default_ds) == (S3_ARGV, "s3", "s3")
    assert started == [] and "local datastore" not in out


def test_a_code_package_from_s3_gets_the_s3_server(tmp_path, capsys, monkeypatch, listening):
    started = _fake_s3(monkeypatch, listening)
    text = DATASTORE_POD.replace("env: [", "env: [{name: METAFLOW_CODE_DS, value: s3}, ")
    (argv, mf_ds, _, default_ds, _), out, work = _datastore_seen(tmp_path, capsys, monkeypatch, text)
    assert (argv, mf_ds, default_ds) == (S3_ARGV, "s3", "s3")
    assert started == [work / "s3"]
    assert "S3 needed: its pods download Metaflow's code package from S3" in out


def test_a_static_kubernetes_decorator_on_the_local_datastore_is_told_to_use_s3(tmp_path, capsys, monkeypatch,
                                                                               listening):
    """Metaflow's @kubernetes refuses a local datastore in the step process; the YAML cannot say
    the flow has one, so the run's failure says what to do (runner/local_datastore.py)."""
    _fake_s3(monkeypatch, listening)
    for k in ("METAFLOW_S3_ENDPOINT_URL", "METAFLOW_DATASTORE_SYSROOT_LOCAL", "METAFLOW_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("METAFLOW_HOME", str(tmp_path / "no-config"))
    wf = tmp_path / "wf.yaml"
    wf.write_text(DATASTORE_POD.replace("exec python \"$0\"", 'echo "    %s or --datastore=azure"; exit 1; exec python'
                                        % local_datastore.KUBERNETES_NEEDS_S3.replace("@kubernetes", "*@kubernetes*")))
    rc = main([str(wf), "--work-dir", str(tmp_path / "work"), "--backoff-scale", "0.01"])
    captured = capsys.readouterr()
    assert rc == 1, captured.out
    assert captured.err.strip().splitlines()[-1] == "mfargo run: " + local_datastore.NEEDS_S3_HINT
