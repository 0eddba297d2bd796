"""The in-pod log keeper (extension/metaflow_extensions/mfargo/plugins/task_logs.py), run as pods
run it, against a local datastore; logs are read back with Metaflow's datastore and
mflog parser."""
import os
import signal
import subprocess
import sys
import textwrap

from metaflow.datastore import FlowDataStore
from metaflow.mflog.mflog import parse
from metaflow.plugins import DATASTORES

from mfargo.compiler.constants import TASK_LOGS_MODULE

PATHSPEC = "LogFlow/argo-run/step/t-1"


def _env(tmp_path, attempt="0"):
    env = dict(os.environ, MF_PATHSPEC=PATHSPEC, MF_ATTEMPT=attempt, MF_DATASTORE="local",
               MF_DATASTORE_ROOT=str(tmp_path / "ds"), MFLOG_STDOUT=str(tmp_path / "out"),
               MFLOG_STDERR=str(tmp_path / "err"), PYTHONUNBUFFERED="x")
    env.pop("PYTHONPATH", None)
    return env


def _keeper(tmp_path, code: str, attempt="0", **kw):
    cmd = [sys.executable, "-m", TASK_LOGS_MODULE, sys.executable, "-c", textwrap.dedent(code)]
    return subprocess.Popen(cmd, env=_env(tmp_path, attempt), stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def _saved(tmp_path, stream: str, attempt: int = 0) -> list[str]:
    """The task's saved log lines, as Metaflow's client would parse them."""
    storage = [d for d in DATASTORES if d.TYPE == "local"][0]
    flow, run, step, task = PATHSPEC.split("/")
    store = FlowDataStore(flow, None, storage_impl=storage, ds_root=str(tmp_path / "ds"))
    [(_, blob)] = store.get_task_datastore(run, step, task, attempt, mode="r", allow_not_done=True).load_logs(
        ["task"], stream)
    return [parse(line).msg.decode() for line in blob.splitlines()]


def test_both_streams_saved_as_mflog_and_echoed_unchanged_exit_code_kept(tmp_path):
    proc = _keeper(tmp_path, """
        import sys
        print("to stdout")
        print("to stderr", file=sys.stderr)
        sys.exit(3)
    """)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3
    assert out == b"to stdout\n" and err == b"to stderr\n"
    assert _saved(tmp_path, "stdout") == ["to stdout"]
    assert _saved(tmp_path, "stderr") == ["to stderr"]


def test_logs_go_to_the_attempt_in_MF_ATTEMPT(tmp_path):
    proc = _keeper(tmp_path, "print('second try')", attempt="1")
    proc.communicate(timeout=60)
    assert _saved(tmp_path, "stdout", attempt=1) == ["second try"]


def test_logs_are_saved_while_the_command_runs(tmp_path):
    # The command itself waits (bounded) until its first line is in the datastore.
    saved = tmp_path / "ds" / PATHSPEC / "0.task_stdout.log"
    proc = _keeper(tmp_path, """
        import os, sys, time
        print("first")
        deadline = time.monotonic() + 30
        while not os.path.exists(%r) and time.monotonic() < deadline:
            time.sleep(0.05)
        print("saved while running" if os.path.exists(%r) else "never saved")
    """ % (str(saved), str(saved)))
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert _saved(tmp_path, "stdout") == ["first", "saved while running"]


def test_sigterm_is_passed_on_and_the_logs_are_saved_before_exit(tmp_path):
    proc = _keeper(tmp_path, """
        import time
        print("working", flush=True)
        time.sleep(120)
        print("never printed")
    """)
    assert proc.stdout.readline() == b"working\n"
    proc.send_signal(signal.SIGTERM)  # the keeper only, as a kubelet signals a container's main process
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert _saved(tmp_path, "stdout") == ["working"]


def test_a_command_that_cannot_start_is_one_line_and_exit_127(tmp_path):
    cmd = [sys.executable, "-m", TASK_LOGS_MODULE, str(tmp_path / "no-such-program")]
    proc = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 127
    assert len(proc.stderr.strip().splitlines()) == 1 and "no-such-program" in proc.stderr
