"""The run's heartbeat daemon (templates/heartbeat.py, plugins/run_heartbeat.py): where the
YAML has it and what its pod runs; the command against a service that answers and one that
does not. On the real engine: tests/test_cluster_heartbeat.py."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import threading
import time

import pytest
import requests
from flowtools import clean_env, compile_source, dag_tasks, linear_flow, templates, write_flow
from test_metadata_service import service  # noqa: F401 - the fixture

FLOW = linear_flow("BeatFlow", start_decorators='@kubernetes(image="registry.example/team/py:1", image_pull_secrets=["regcred"], '
                                               'node_selector={"pool": "cpu"}, service_account="runner")')

SERVICE = ("--metadata=service", "--datastore=s3", "--datastore-root=s3://mfargo-examples/metaflow")


def service_env(url: str = "http://metadata.example:8080", **extra) -> dict:
    """What a pod's env says of Metaflow's metadata and datastore (the flow's @kubernetes needs S3)."""
    return clean_env(METAFLOW_SERVICE_URL=url, METAFLOW_DEFAULT_DATASTORE="s3",
                     METAFLOW_DATASTORE_SYSROOT_S3="s3://mfargo-examples/metaflow", **extra)


@pytest.mark.parametrize("argo_version", ["4.1", "3.7"])
def test_with_the_metadata_service_the_top_dag_starts_a_heartbeat_daemon(tmp_path, argo_version):
    [doc] = compile_source(tmp_path, FLOW, "--code-in-image", "/app", "--max-workers", "7", "--tag", "nightly",
                           "--tag", "$(reboot) 'x'", "--argo-version", argo_version,
                           top_args=SERVICE, env=service_env())
    spec = doc["spec"]
    assert spec["parallelism"] == 8  # --max-workers 7 step pods, beside the daemon
    top = spec["templates"][[t["name"] for t in spec["templates"]].index(spec["entrypoint"])]
    assert top["dag"]["tasks"][0] == {"name": "Heartbeat", "template": "0-heartbeat"}
    assert "depends" not in json.dumps(dag_tasks(doc, spec["entrypoint"])["start"])  # the start does not wait for it
    daemon = templates(doc)["0-heartbeat"]
    assert daemon["daemon"] is True and "activeDeadlineSeconds" not in daemon  # bounded by the run
    # templateDefaults' CPU request overridden: it never keeps a gang that fills a node from starting
    assert daemon["container"]["resources"] == {"requests": {"cpu": "0", "memory": "256Mi"}}
    # the start step's pod: image, pull secret, placement, account
    assert daemon["container"]["image"] == "registry.example/team/py:1"
    assert json.loads(daemon["podSpecPatch"]) == {"imagePullSecrets": [{"name": "regcred"}]}
    assert (daemon["nodeSelector"], daemon["serviceAccountName"]) == ({"pool": "cpu"}, "runner")
    # its own script: one command, the tags as plain words (never shell, nor Kubernetes' $(VAR),
    # which it escapes as $$ and undoes)
    [script] = daemon["container"]["args"]
    assert shlex.split(script.replace("$$", "$")) == ["exec", "python", "flow.py", "--quiet", "--no-pylint", "argo-workflows",
                                   "heartbeat", "--run-id", "argo-{{workflow.name}}", "--tag", "nightly",
                                   "--tag", "$(reboot) 'x'"]


@pytest.mark.parametrize("top_args, create_args", [
    (SERVICE, ("--no-enable-heartbeat-daemon",)),  # turned off
    (("--datastore=s3", "--datastore-root=s3://mfargo-examples/metaflow"), ()),  # local metadata: no service
])
def test_no_daemon_without_a_service_or_when_turned_off(tmp_path, top_args, create_args):
    [doc] = compile_source(tmp_path, FLOW, "--code-in-image", "/app", "--max-workers", "7", *create_args,
                           top_args=top_args, env=service_env())
    assert doc["spec"]["parallelism"] == 7
    assert "0-heartbeat" not in templates(doc)
    assert "Heartbeat" not in dag_tasks(doc, doc["spec"]["entrypoint"])


def _heartbeat(tmp_path, env: dict, *tags: str) -> subprocess.Popen:
    flow = write_flow(tmp_path, FLOW)
    cmd = [sys.executable, flow.name, "--metadata=service", "--quiet", "argo-workflows", "heartbeat",
           "--run-id", "argo-beatflow-x1y2z"]
    for tag in tags:
        cmd += ["--tag", tag]
    return subprocess.Popen(cmd, cwd=flow.parent, env=env, stderr=subprocess.PIPE, text=True)


def _stop(proc: subprocess.Popen) -> tuple[int, str]:
    """SIGTERM, as Argo stops a daemon: the command's exit code and what it said."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    return proc.returncode, err


def test_the_command_registers_the_run_with_its_tags_and_beats_until_stopped(tmp_path, service):  # noqa: F811
    proc = _heartbeat(tmp_path, service_env(service), "nightly")
    try:
        url, deadline, record = f"{service}/flows/BeatFlow/runs/argo-beatflow-x1y2z", time.monotonic() + 60, {}
        while not record.get("last_heartbeat_ts"):
            assert time.monotonic() < deadline and proc.poll() is None, (record, proc.poll())
            got = requests.get(url, timeout=10)
            record = got.json() if got.status_code == 200 else {}
            time.sleep(0.5)
    finally:
        code, err = _stop(proc)
    assert code == 0, err  # stopped: a clean end, so Argo's daemon node is not a failure
    assert record["run_number"] == "argo-beatflow-x1y2z" and record["tags"] == ["nightly"], record


def test_a_service_that_does_not_answer_costs_the_heartbeat_never_the_run(tmp_path):
    """The daemon is a leaf of the top DAG: if it failed, the run would fail with it."""
    env = service_env("http://127.0.0.1:9", METAFLOW_SERVICE_RETRY_COUNT="1")
    proc = _heartbeat(tmp_path, env)
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not any(line.startswith("mfargo: heartbeat: registering") for line in said):
            assert time.monotonic() < deadline and proc.poll() is None, (said, proc.poll())
            time.sleep(0.2)
        time.sleep(1)
        assert proc.poll() is None  # it said so, and it still runs, as the run does
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        reader.join(timeout=10)
    assert proc.returncode == 0, said
    [line] = [line for line in said if line.startswith("mfargo: heartbeat:")]  # once, though tried again
    assert "registering the run argo-beatflow-x1y2z failed" in line and "the run goes on" in line, said
    assert not any("Traceback" in line for line in said), said


def test_stopped_while_the_service_hangs_it_ends_at_once(tmp_path):
    """Argo stops a terminated run's daemon with SIGTERM only (it sends no SIGKILL after), so
    the command must end on it even inside a request the service never answers. It did not:
    the SystemExit its handler raised was lost in the provider's retrying request, and a
    terminated run's heartbeat pod stayed Running (a CI run saw it)."""
    import socket

    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(server.accept()[0]), daemon=True).start()
    proc = _heartbeat(tmp_path, service_env("http://127.0.0.1:%d" % server.getsockname()[1]))
    try:
        deadline = time.monotonic() + 60
        while not accepted:  # it is inside its first request, which is never answered
            assert time.monotonic() < deadline and proc.poll() is None, proc.poll()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        server.close()
    assert proc.returncode == 0
