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
    # The command itself waits (bounded) until its first line is in the datastore: a task
    # running past SAVE_WHILE_RUNNING_AFTER seconds has its logs saved while it runs.
    from metaflow_extensions.mfargo.plugins.task_logs import SAVE_WHILE_RUNNING_AFTER

    saved = tmp_path / "ds" / PATHSPEC / "0.task_stdout.log"
    proc = _keeper(tmp_path, """
        import os, sys, time
        print("first")
        deadline = time.monotonic() + %f
        while not os.path.exists(%r) and time.monotonic() < deadline:
            time.sleep(0.05)
        print("saved while running" if os.path.exists(%r) else "never saved")
    """ % (SAVE_WHILE_RUNNING_AFTER + 30, str(saved), str(saved)))
    proc.communicate(timeout=SAVE_WHILE_RUNNING_AFTER + 90)
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


def test_mflog_lines_parse_as_metaflows_own():
    from metaflow.mflog.mflog import decorate
    from metaflow_extensions.mfargo.plugins.task_logs import mflog_line

    ours, theirs = parse(mflog_line(b"some text\n")), parse(decorate(b"task", b"some text\n"))
    assert (ours.version, ours.logsource, ours.msg) == (theirs.version, theirs.logsource, theirs.msg) == (
        b"0", b"task", b"some text")
    assert abs((ours.utc_tstamp - theirs.utc_tstamp).total_seconds()) < 5
    assert ours.id != parse(mflog_line(b"some text\n")).id  # every line its own id, as decorate does


def test_mflog_line_stamp_and_id_as_metaflows():
    import uuid
    from datetime import datetime, timezone

    from metaflow.mflog.mflog import decorate
    from metaflow_extensions.mfargo.plugins.task_logs import mflog_line

    at = datetime(2023, 11, 14, 22, 13, 20, 250000, tzinfo=timezone.utc)
    ours = parse(mflog_line(b"x\n", now=at.timestamp()))
    theirs = parse(decorate(b"task", b"x\n", now=at))
    assert ours.utc_tstamp_str == theirs.utc_tstamp_str == b"2023-11-14T22:13:20.250000"
    ids = [uuid.UUID(parse(mflog_line(b"x\n")).id.decode()) for _ in range(50)]
    assert {i.version for i in ids} == {4} and {i.variant for i in ids} == {uuid.RFC_4122} and len(set(ids)) == 50


def test_the_keeper_imports_neither_socket_nor_uuid_nor_datetime(tmp_path):
    """Each pod's keeper starts with the runner's sitecustomize (cluster DNS): their ~10 ms of
    imports would be paid by every task, for nothing the keeper uses."""
    from mfargo.runner.pod import SITE_DIR

    code = "import sys; print(' '.join(sorted(sys.modules)))"
    env = dict(_env(tmp_path), PYTHONPATH=str(SITE_DIR))
    probe = subprocess.run([sys.executable, "-c", "import importlib, sys; importlib.import_module(%r); "
                            % TASK_LOGS_MODULE + code],
                           env=env, capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    loaded = set(probe.stdout.split())
    assert TASK_LOGS_MODULE in loaded and "sitecustomize" in loaded
    assert not loaded & {"socket", "uuid", "datetime"}


STEP_SIDE = """
    import sys
    from metaflow_extensions.mfargo.plugins.task_logs import StepSide
    side = StepSide.claim()
    print("from the step")
    print("step warns", file=sys.stderr)
    print("saved by the step" if side is not None and side.save() else "not saved by the step")
"""


def _keeper_importtime(tmp_path, code: str, timeout: float = 60):
    """The keeper with -X importtime (its own imports only: children do not inherit it)."""
    cmd = [sys.executable, "-X", "importtime", "-m", TASK_LOGS_MODULE, sys.executable, "-c", textwrap.dedent(code)]
    return subprocess.run(cmd, env=_env(tmp_path), capture_output=True, timeout=timeout)


def _not_importtime(stderr: bytes) -> str:
    return "\n".join(line for line in stderr.decode().splitlines() if not line.startswith("import time:"))


def _imported(importtime_stderr: bytes) -> set[str]:
    return {line.split("|")[-1].strip() for line in importtime_stderr.decode().splitlines()
            if line.startswith("import time:")}


def test_a_step_that_saves_its_own_logs_spares_the_keeper_importing_metaflow(tmp_path):
    proc = _keeper_importtime(tmp_path, STEP_SIDE)
    assert proc.returncode == 0, _not_importtime(proc.stderr)
    # the last line came after the step's save: the keeper saved it (and so imported Metaflow)
    assert proc.stdout == b"from the step\nsaved by the step\n"  # no control line shows
    assert _saved(tmp_path, "stdout") == ["from the step", "saved by the step"]
    assert _saved(tmp_path, "stderr") == ["step warns"]
    assert "metaflow.datastore" in _imported(proc.stderr)

    (tmp_path / "quiet").mkdir()
    quiet = _keeper_importtime(tmp_path / "quiet", STEP_SIDE.replace(
        'print("saved by the step" if side is not None and side.save() else "not saved by the step")',
        'assert side is not None and side.save()'))
    assert quiet.returncode == 0, _not_importtime(quiet.stderr)
    assert quiet.stdout == b"from the step\n"
    assert _saved(tmp_path / "quiet", "stdout") == ["from the step"]
    assert _saved(tmp_path / "quiet", "stderr") == ["step warns"]
    imported = _imported(quiet.stderr)
    assert "subprocess" in imported and not {m for m in imported if m.split(".")[0] == "metaflow"}, sorted(imported)


def test_a_process_whose_output_does_not_reach_the_keeper_is_not_invited(tmp_path):
    proc = _keeper(tmp_path, """
        import os, subprocess, sys
        # a grandchild with its own pipes: it must not take the invitation (it would wait for nothing)
        code = "from metaflow_extensions.mfargo.plugins.task_logs import StepSide; print(StepSide.claim())"
        env = dict(os.environ)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout
        print("grandchild claims", out.strip())
    """)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == b"grandchild claims None\n"
    assert _saved(tmp_path, "stdout") == ["grandchild claims None"]


def test_a_partial_line_before_the_steps_save_is_kept_and_the_save_still_happens(tmp_path):
    proc = _keeper(tmp_path, """
        import sys
        from metaflow_extensions.mfargo.plugins.task_logs import StepSide
        side = StepSide.claim()
        sys.stdout.write("no newline yet")
        print("step saved" if side.save() else "step did not save", file=sys.stderr)
    """)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == b"no newline yet" and err == b"step saved\n"
    assert _saved(tmp_path, "stdout") == ["no newline yet"]
    assert _saved(tmp_path, "stderr") == ["step saved"]


def test_a_step_that_redirected_its_output_leaves_the_save_to_the_keeper(tmp_path):
    proc = _keeper(tmp_path, """
        import os, sys
        from metaflow_extensions.mfargo.plugins.task_logs import StepSide
        side = StepSide.claim()
        print("before", flush=True)
        saved = os.dup(1)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        result = side.save()
        os.dup2(saved, 1)
        print("step saved" if result else "step did not save")
    """)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == b"before\nstep did not save\n"
    assert _saved(tmp_path, "stdout") == ["before", "step did not save"]


def test_a_step_stopped_by_sigterm_saves_its_logs_before_it_dies_of_it(tmp_path):
    cmd = [sys.executable, "-X", "importtime", "-m", TASK_LOGS_MODULE, sys.executable, "-c", textwrap.dedent("""
        import time
        from metaflow_extensions.mfargo.plugins.task_logs import StepSide
        side = StepSide.claim()
        side.save_on_sigterm()
        print("working", flush=True)
        time.sleep(120)
        print("never printed")
    """)]
    proc = subprocess.Popen(cmd, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b"working\n"
    proc.send_signal(signal.SIGTERM)  # the keeper only, as a kubelet signals a container's main process
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, _not_importtime(err)
    assert out == b""
    assert _saved(tmp_path, "stdout") == ["working"]
    assert not {m for m in _imported(err) if m.split(".")[0] == "metaflow"}  # saved by the step itself


def test_a_silent_command_running_past_the_first_save_never_makes_the_keeper_import_metaflow(tmp_path):
    from metaflow_extensions.mfargo.plugins.task_logs import SAVE_WHILE_RUNNING_AFTER

    proc = _keeper_importtime(tmp_path, "import time; time.sleep(%f)" % (SAVE_WHILE_RUNNING_AFTER + 1.5),
                              timeout=SAVE_WHILE_RUNNING_AFTER + 60)
    assert proc.returncode == 0, _not_importtime(proc.stderr)
    assert not {m for m in _imported(proc.stderr) if m.split(".")[0] == "metaflow"}


def test_an_invitation_whose_pipe_was_closed_on_the_way_is_refused(tmp_path):
    # A launcher between the keeper and the step (an environment's) may close the pipe;
    # its fd number may then name another file, which the step must leave alone.
    proc = _keeper(tmp_path, """
        import os
        from metaflow_extensions.mfargo.plugins.task_logs import STEP_SIDE_ENV, StepSide
        fd = int(os.environ[STEP_SIDE_ENV].split(":")[0])
        os.close(fd)
        other = os.open(os.devnull, os.O_RDONLY)
        assert other == fd, (other, fd)
        print("claimed" if StepSide.claim() is not None else "refused")
        os.fstat(other)  # still open
    """)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == b"refused\n"
