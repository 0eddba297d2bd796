"""mfargo run, bounded by construction (issue 28): each stated limit (runner/limits.py) refused
in one line naming the field and the limit (in the preflight when the YAML shows it, else the
node fails with it), a gang larger than --max-workers refused, --timeout from parse to exit,
every process a pod starts ends with it, and a full disk fails the run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from mfargo.runner import limits, podgroup
from mfargo.runner.cli import STOP_GRACE, main
from runner_tools import pod_env, run_yaml
from test_runner_jobset import gang

LIMIT_LINE = "over the runner's limit of"


def _wf(tmp_path: Path, text: str) -> Path:
    wf = tmp_path / "wf.yaml"
    wf.write_text(text)
    return wf


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def _refused_before_any_pod(tmp_path, capsys, text: str, *extra: str) -> str:
    work = tmp_path / "w"
    assert main([str(_wf(tmp_path, text)), "--work-dir", str(work), "--quiet", "--no-s3", *extra]) == 2
    assert not (work / "pods").exists() or not any((work / "pods").iterdir())
    return _one_line(capsys)


def _steps(field: str) -> str:
    return f"""
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {{name: wide}}
spec:
  entrypoint: main
  arguments: {{parameters: [{{name: n, value: "1"}}, {{name: items, value: "[1]"}}]}}
  templates:
  - name: main
    dag:
      tasks:
      - name: child
        template: child
        {field}
  - name: child
    container: {{command: [true]}}
"""


# ------------------------------------------------------------------ fan-out

def test_with_sequence_is_refused_in_the_preflight(tmp_path, capsys):
    """mfargo never writes withSequence: refused whatever its count, before any pod."""
    line = _refused_before_any_pod(tmp_path, capsys, _steps('withSequence: {count: "10000000"}'))
    assert line == "mfargo run: template 'main', task 'child': withSequence is not supported by the local runner"


@pytest.mark.parametrize("field, params", [
    ("withParam: \"{{=workflow.parameters['items']}}\"", {"items": json.dumps([0] * (limits.MAX_FANOUT + 1))}),
])
def test_fanout_known_at_run_time_fails_the_node_before_any_pod(tmp_path, field, params):
    result, _ = run_yaml(_steps(field), tmp_path, params, timeout=30)
    assert result.status in ("Failed", "Error")
    kind = field.split(":")[0]
    messages = [n.message for n in result.nodes.values() if LIMIT_LINE in (n.message or "")]
    assert messages and all(m.splitlines() == [m] for m in messages)
    assert f"{kind} is" in messages[0] and f"{limits.MAX_FANOUT:,} items" in messages[0]
    assert not any((result.work_dir / "pods").iterdir())


# ------------------------------------------------------------------ values

EXPR = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {name: expr}
spec:
  entrypoint: main
  arguments: {parameters: [{name: big, value: "x"}]}
  templates:
  - name: main
    container: {command: [echo, "EXPRESSION"]}
"""


def test_an_expression_that_builds_a_huge_value_is_refused_before_any_pod(tmp_path, capsys):
    """sprig.repeat (or any function mfargo never writes) is refused by the preflight: nothing is built."""
    started = time.monotonic()
    line = _refused_before_any_pod(tmp_path, capsys, EXPR.replace("EXPRESSION", "{{=sprig.repeat(1000000000, 'x')}}"))
    assert time.monotonic() - started < 20
    assert line == ("mfargo run: template 'main', {{=sprig.repeat(1000000000, 'x')}}: function sprig.repeat() "
                    "is not accepted (the runner reads only toBase64(), asInt())")


def test_expression_result_past_the_limit_fails_the_node(tmp_path):
    """mfargo's own toBase64 of a parameter past limits.MAX_VALUE_BYTES: one line, no pod."""
    big = "x" * (limits.MAX_VALUE_BYTES * 3 // 4 + 3)
    result, _ = run_yaml(EXPR.replace("EXPRESSION", "{{=toBase64(workflow.parameters['big'])}}"), tmp_path,
                         {"big": big}, timeout=30)
    assert result.status in ("Failed", "Error")
    msg = result.node(result.workflow_name).message
    assert msg.splitlines() == [msg]
    assert msg.endswith(f"{{{{=toBase64(workflow.parameters['big'])}}}}: its result is "
                        f"{limits.MAX_VALUE_BYTES + 4:,} characters, over the runner's limit of "
                        f"{limits.MAX_VALUE_BYTES:,} characters (runner/limits.py)"), msg
    assert not any((result.work_dir / "pods").iterdir())


OUTPUT = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {name: out}
spec:
  entrypoint: main
  templates:
  - name: main
    container: {command: [bash, -c, 'head -c SIZE /dev/zero | tr "\\0" x > /tmp/out']}
    outputs: {parameters: [{name: big, valueFrom: {path: /tmp/out}}]}
"""


def test_output_parameter_past_the_limit_fails_the_node(tmp_path):
    size = limits.MAX_VALUE_BYTES + 1
    result, _ = run_yaml(OUTPUT.replace("SIZE", str(size)), tmp_path, timeout=30)
    assert result.status in ("Failed", "Error")
    msg = result.node(result.workflow_name).message
    assert msg == (f"output parameter 'big': /tmp/out is {size:,} bytes, over the runner's limit of "
                   f"{limits.MAX_VALUE_BYTES:,} bytes (runner/limits.py)")


def test_output_parameter_at_the_limit_is_kept(tmp_path):
    result, _ = run_yaml(OUTPUT.replace("SIZE", str(limits.MAX_VALUE_BYTES)), tmp_path, timeout=30)
    assert result.status == "Succeeded", result.message
    assert len(result.node(result.workflow_name).outputs["parameters"]["big"]) == limits.MAX_VALUE_BYTES


# ------------------------------------------------------------------ YAML

def test_yaml_nesting_past_the_limit_is_one_line(tmp_path, capsys):
    deep = "[" * (limits.MAX_YAML_DEPTH + 1) + "]" * (limits.MAX_YAML_DEPTH + 1)
    line = _refused_before_any_pod(tmp_path, capsys, f"apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nx: {deep}\n")
    assert line.startswith("mfargo run: ") and f"nests deeper than {limits.MAX_YAML_DEPTH} levels" in line


def test_an_empty_or_one_line_file_is_read_as_yaml_not_as_a_path(tmp_path, capsys):
    # The file's text once went back through load_document's "a one-line string is a path":
    # an empty file opened "." (IsADirectoryError, a traceback).
    line = _refused_before_any_pod(tmp_path, capsys, "")
    assert line == "mfargo run: no Workflow or WorkflowTemplate document found"
    line = _refused_before_any_pod(tmp_path, capsys, '{"kind": "ConfigMap"}')
    assert line == "mfargo run: no Workflow or WorkflowTemplate document found"


def test_yaml_size_past_the_limit_is_one_line(tmp_path, capsys):
    text = "kind: Workflow\n#" + "x" * limits.MAX_YAML_BYTES + "\n"
    line = _refused_before_any_pod(tmp_path, capsys, text)
    assert f"over the {limits.MAX_YAML_BYTES:,} this runner reads" in line


# ------------------------------------------------------------------ gangs

def test_gang_larger_than_max_workers_is_refused_and_never_forked(tmp_path):
    result, _ = run_yaml(gang(retry=False), tmp_path, {"worker-count": "3"}, max_workers=2, timeout=30)
    assert result.status in ("Failed", "Error")
    msgs = [n.message for n in result.nodes.values() if "--max-workers" in (n.message or "")]
    assert msgs and msgs[0].endswith("its gang of 4 pods that run at once is more than --max-workers 2; "
                                     "run with --max-workers 4 or more")
    assert not list((result.work_dir / "pods").glob("js-*"))  # no pod of the gang was made


def test_gang_past_the_gang_size_limit_is_refused(tmp_path):
    result, _ = run_yaml(gang(retry=False), tmp_path, {"worker-count": str(limits.MAX_GANG_SIZE)},
                         max_workers=2, timeout=30)
    assert result.status in ("Failed", "Error")
    msgs = [n.message for n in result.nodes.values() if LIMIT_LINE in (n.message or "")]
    assert msgs and f"its pods (replicas x completions) is {limits.MAX_GANG_SIZE + 1:,}, over the runner's limit " \
                     f"of {limits.MAX_GANG_SIZE:,}" in msgs[0]
    assert not list((result.work_dir / "pods").glob("js-*"))


# ------------------------------------------------------------------ containment

def _alive(marker: str) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "cmdline").read_bytes():
                    found.append(int(d.name))
            except OSError:
                pass
    return found


def _pod(command: str) -> str:
    return f"""
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {{name: contain}}
spec:
  entrypoint: main
  templates:
  - name: main
    container: {{command: [bash, -c, {json.dumps(command)}]}}
"""


needs_cgroups = pytest.mark.skipif(podgroup.root() is None, reason="needs a writable cgroup hierarchy (root)")


@needs_cgroups
@pytest.mark.parametrize("case, command", [
    ("setsid", "setsid sleep {m} & echo started"),
    ("double fork", "(sleep {m} &) ; echo started"),
    ("log pipe held", "setsid bash -c 'sleep {m}; echo late' & echo started"),
    ("log pipe held, output closed elsewhere", "nohup setsid sleep {m} >/dev/null 2>&1 & setsid sleep {m} & echo started"),
])
def test_every_process_a_pod_starts_ends_with_it(tmp_path, case, command):
    marker = f"9{uuid.uuid4().int % 10**8:08d}.5"  # a sleep argument no other process has
    started = time.monotonic()
    wf = _wf(tmp_path, _pod(command.format(m=marker)))
    proc = subprocess.run([sys.executable, "-m", "mfargo.runner.cli", str(wf), "--no-s3", "--timeout", "60",
                           "--work-dir", str(tmp_path / "w")], capture_output=True, text=True, timeout=90,
                          env=pod_env())
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert "Workflow contain: Succeeded" in proc.stdout.splitlines()
    assert "Traceback" not in proc.stderr and "Event loop is closed" not in proc.stderr
    assert took < 20, took  # ended with its main process, not at --timeout
    assert _alive(marker) == []


@pytest.fixture
def small_disk(tmp_path):
    """A 20 MiB tmpfs, mounted for the test and removed after it (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_fails_the_run_in_one_line(small_disk, tmp_path):
    marker = f"9{uuid.uuid4().int % 10**8:08d}.5"
    wf = _wf(tmp_path, _pod(f"setsid sleep {marker} & head -c 50000000 /dev/zero | tr '\\0' x | fold -w 99"))
    proc = subprocess.run([sys.executable, "-m", "mfargo.runner.cli", str(wf), "--no-s3", "--quiet",
                           "--timeout", "60", "--work-dir", str(small_disk / "w")],
                          capture_output=True, text=True, timeout=90, env=pod_env())
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.startswith("mfargo run:")]
    assert len(lines) == 1, proc.stderr
    assert "No space left on device" in lines[0] and "status.json" in lines[0]
    assert not (small_disk / "w" / "status.json").exists() or json.loads(
        (small_disk / "w" / "status.json").read_text())["status"] != "Succeeded"
    assert _alive(marker) == [] or podgroup.root() is None


# ------------------------------------------------------------------ --timeout

def test_timeout_holds_for_a_running_pod(tmp_path):
    marker = f"9{uuid.uuid4().int % 10**8:08d}.5"
    wf = _wf(tmp_path, _pod(f"setsid sleep {marker} & sleep {marker}"))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "mfargo.runner.cli", str(wf), "--no-s3", "--quiet",
                           "--timeout", "2", "--work-dir", str(tmp_path / "w")],
                          capture_output=True, text=True, timeout=60, env=pod_env())
    assert time.monotonic() - started < 2 + STOP_GRACE + 3  # + the interpreter's start
    assert proc.returncode == 1
    assert "Workflow contain: Failed (Workflow timed out (runner --timeout))" in proc.stdout.splitlines()
    assert _alive(marker) == [] or podgroup.root() is None


def test_timeout_holds_before_the_first_pod(tmp_path):
    """The preflight (here made to hang) counts: the process exits at --timeout + STOP_GRACE, one line."""
    wf = _wf(tmp_path, _pod("true"))
    code = ("import sys, time; from mfargo.runner import preflight, cli; "
            "preflight.check = lambda doc: time.sleep(300); sys.exit(cli.main(sys.argv[1:]))")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, str(wf), "--no-s3", "--quiet", "--timeout", "1",
                           "--work-dir", str(tmp_path / "w")], capture_output=True, text=True, timeout=60,
                          env=pod_env())
    assert time.monotonic() - started < 1 + STOP_GRACE + 3
    assert proc.returncode == 124
    assert proc.stderr.strip().splitlines() == [
        f"mfargo run: --timeout 1s passed and the run did not stop within {STOP_GRACE:g}s more; exiting (pods killed)"]


def test_without_cgroups_a_held_log_pipe_ends_the_pod_and_no_traceback(tmp_path, monkeypatch, capsys):
    """The documented fallback (no writable cgroup hierarchy): process groups only. The pod
    still ends with its main process (its pipes closed 2 s later); what left its group survives."""
    monkeypatch.setattr(podgroup, "root", lambda: None)
    marker = f"9{uuid.uuid4().int % 10**8:08d}.5"
    started = time.monotonic()
    try:
        result, _ = run_yaml(_pod(f"setsid sleep {marker} & sleep 0.5; echo started"), tmp_path, timeout=60)
        assert result.status == "Succeeded", result.message
        assert time.monotonic() - started < 20
        assert "Event loop is closed" not in capsys.readouterr().err
        assert len(_alive(marker)) == 1  # the fallback's documented limit
    finally:
        for pid in _alive(marker):
            os.kill(pid, 9)
