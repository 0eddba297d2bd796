"""Run one command of a pod with its output kept as Metaflow task logs.

``python -m metaflow_extensions.mfargo.plugins.task_logs CMD ARG...`` runs CMD and, for
each line it prints, writes the line unchanged to the pod's own stdout/stderr (what
``kubectl logs`` shows) and Metaflow's structured form (``mflog``) to the files named by
``MFLOG_STDOUT``/``MFLOG_STDERR``. Those files are saved to the task's place in the
datastore, where ``flow.py logs``, ``Task.stdout/stderr/loglines`` and the UI read them.
The exit status is CMD's (128 + N when signal N ended it).

Saving needs Metaflow and its datastore client, about 0.5 CPU-s to import: a task
pays that once, in its step process, not twice. When CMD is a Metaflow step with
mfargo's decorator (``pod_hooks``), the step process saves the files itself at its end
(``StepSide``; Metaflow's local runtime too saves a task's logs once, at its end); this
keeper, stdlib only until then, checks that nothing was printed after that save. It
imports Metaflow and saves only when needed: output after the step's save (a failure's
traceback), a command that is not a step (``init``, exit hooks), a step that died
without saving (SIGKILL, a crash), and, for a task still running after
``SAVE_WHILE_RUNNING_AFTER`` seconds, on Metaflow's own schedule (``mflog.update_delay``)
while it runs. SIGTERM/SIGINT (a deadline, a stopped run, a JobSet restart) are passed on
to CMD; a step saves its logs on SIGTERM before it dies of it, so a short grace period is
enough.

The step's save is exact: it prints a token line on both streams (never echoed nor
logged); once both are written to the files, the keeper sends the files' sizes through a
pipe only the step process holds; the step saves that many bytes and prints the token
again to say it did. The token, the pipe and the identity of both output pipes reach the
step process in ``STEP_SIDE_ENV``, so a process whose output goes elsewhere never waits.

Which task the logs belong to comes from the environment, as in Metaflow's own pods
(``mflog.export_mflog_env_vars``): ``MF_PATHSPEC`` (flow/run/step/task), ``MF_ATTEMPT``,
``MF_DATASTORE`` and optionally ``MF_DATASTORE_ROOT`` (else the datastore's configured
root). Several commands of one pod (``init`` then ``step``) append to the same files,
so the task's logs hold them all.

Kept to Metaflow and the standard library: it runs inside pods, like ``pod_hooks``.
"""

import os
import select
import signal
import subprocess
import sys
import threading
import time

from . import attempt_guard, resume
from . import pod_contract as contract

LOG_SOURCE = b"task"  # metaflow.mflog.TASK_LOG_SOURCE: who minted the timestamps
DRAIN_SECONDS = 10.0  # after CMD ends, how long a leftover child may keep its output pipe
DRAIN_SECONDS_TERMINATING = 0.5  # ... when the pod is being stopped (its grace period is short)
# A task running longer has its logs saved while it runs too: at most Metaflow's longest interval
# between saves (mflog.MAX_UPDATE_DELAY) behind; a shorter one only at its end, as Metaflow's local
# runtime does, so the keeper never imports Metaflow for it (0.5 CPU-s, a short task's third).
SAVE_WHILE_RUNNING_AFTER = 30.0
FIRST_OUTPUT_POLL_SECONDS = 0.25  # ... checked this often for a first line (mflog.update_delay's shortest)
STEP_SIDE_ENV = "MFARGO_TASK_LOGS"  # "<ack fd>:<token>:<inodes of the ack, stdout and stderr pipes>"
ACK_SECONDS = 10.0  # how long the step process waits for the keeper's sizes (it is alive: it is reading)
BARRIER, SAVED = b" barrier\n", b" saved\n"  # after the token: a control line of the step side


def main(argv):
    if not argv:
        print("usage: python -m %s CMD [ARG...]" % __spec__.name, file=sys.stderr)
        return 2
    argv = resume.plan(argv)  # a pod of a resumed run may clone its task instead
    if isinstance(argv, int):
        return argv
    files = {"stdout": os.environ["MFLOG_STDOUT"], "stderr": os.environ["MFLOG_STDERR"]}
    uploader = Uploader(files)
    renumber_file = os.path.join(os.path.dirname(os.path.abspath(files["stdout"])), "mfargo-next-attempt")
    code, stopped = run(argv, files, uploader, {attempt_guard.NEXT_ATTEMPT_FILE_ENV: renumber_file})
    again = attempt_guard.renumbered(argv, code, renumber_file)
    if again is not None:  # the step asked to run as another attempt (attempt_guard)
        argv, attempt, given, outside = again
        os.environ["MF_ATTEMPT"] = str(attempt)
        env = {}
        if outside:
            env[contract.INFRA_ATTEMPTS_ENV] = ",".join(map(str, outside))
            note = "[mfargo] attempt %s of this task ended without finishing: its pod was stopped from " \
                   "outside (evicted, preempted, deleted) or lost with its node; an infrastructure failure " \
                   "does not spend @retry. This is attempt %d" % (env[contract.INFRA_ATTEMPTS_ENV], attempt)
        elif attempt > given:
            note = "[mfargo] attempt %d of this task already ran in this run (a retried Argo node); " \
                   "this is attempt %d" % (given, attempt)
        else:
            note = "[mfargo] Argo's attempt %d of this task ended before the step started; " \
                   "this is attempt %d" % (given, attempt)
        say(files, note)
        code, stopped = run(argv, files, uploader, env)
    status = code if code >= 0 else 128 - code
    final = attempt_guard.final(argv, status, stopped)
    if final != status:
        say(files, "[mfargo] the step failed (exit %d) and @retry has no attempt left: the task ends here" % status)
    uploader.save(final=True)
    return final


def say(files, note):
    """One line of the keeper's own, on the pod's stderr and in the task's log."""
    line = note.encode() + b"\n"
    sys.stderr.buffer.write(line)
    sys.stderr.flush()
    with open(files["stderr"], "ab") as log:
        log.write(mflog_line(line))


def run(argv, files, uploader, env):
    """Run ``argv`` with ``env`` added, its output echoed and kept in ``files``; (its exit
    status (negative: the signal that ended it), whether the pod was being stopped)."""
    ack_read, ack_write = os.pipe()
    (out_read, out_write), (err_read, err_write) = os.pipe(), os.pipe()
    token = os.urandom(16).hex().encode()
    invitation = "%d:%s:%d:%d:%d" % (ack_read, token.decode(),
                                     *(os.fstat(fd).st_ino for fd in (ack_read, out_write, err_write)))
    try:
        proc = subprocess.Popen(argv, stdout=out_write, stderr=err_write, pass_fds=(ack_read,),
                                env=dict(os.environ, **env, **{STEP_SIDE_ENV: invitation}))
    except OSError as error:
        print("cannot run %s: %s" % (argv[0], error), file=sys.stderr)
        return 127, False
    finally:
        for fd in (ack_read, out_write, err_write):
            os.close(fd)
    outputs = {"stdout": os.fdopen(out_read, "rb"), "stderr": os.fdopen(err_read, "rb")}
    stopping = []

    def pass_on(signum, _frame):
        stopping.append(signum)
        if proc.poll() is None:
            proc.send_signal(signum)  # a step saves its logs before it goes (StepSide.save_on_sigterm)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, pass_on)

    barrier = Barrier(token, files, ack_write, uploader)
    echoes = {"stdout": sys.stdout.buffer, "stderr": sys.stderr.buffer}
    pumps = [threading.Thread(target=pump, args=(outputs[s], echoes[s], files[s], barrier), daemon=True)
             for s in ("stdout", "stderr")]
    for thread in pumps:
        thread.start()
    done = threading.Event()
    periodic = threading.Thread(target=uploader.while_running, args=(done,), daemon=True)
    periodic.start()

    code = proc.wait()
    drain_until = time.monotonic() + (DRAIN_SECONDS_TERMINATING if stopping else DRAIN_SECONDS)
    for thread in pumps:
        thread.join(max(drain_until - time.monotonic(), 0))
    done.set()
    return code, bool(stopping)


def mflog_line(line, now=None):
    """``line`` in Metaflow's structured log format (``mflog.decorate``): a UTC timestamp,
    the log source and a unique id (a random UUID, as Metaflow's) before the text, which
    keeps its newline.  ``now``: seconds since the epoch.  Built from ``time`` and
    ``os.urandom``: importing ``datetime`` and ``uuid`` would cost every pod ~5 ms of CPU."""
    now = time.time() if now is None else now
    seconds = int(now)
    stamp = "%s.%06d" % (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)), int((now - seconds) * 1e6))
    return b"[MFLOG|0|%sZ|%s|%s]%s" % (stamp.encode(), LOG_SOURCE, _random_uuid(), line)


def _random_uuid():
    """A version-4 UUID's text, as ``str(uuid.uuid4())`` gives it."""
    b = bytearray(os.urandom(16))
    b[6], b[8] = (b[6] & 0x0F) | 0x40, (b[8] & 0x3F) | 0x80
    h = b.hex()
    return ("%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])).encode()


def pump(source, echo, path, barrier):
    """Copy lines from ``source`` to ``echo`` as they are, and to ``path`` as mflog lines;
    the step side's control lines go to ``barrier`` only."""
    with open(path, "ab", buffering=0) as log:
        for line in iter(source.readline, b""):
            line = barrier.control(line, source)
            if not line:
                continue
            log.write(mflog_line(line))
            echo.write(line)
            echo.flush()


class Barrier:
    """The keeper's half of the step process's own final save (module docstring)."""

    def __init__(self, token, files, ack_fd, uploader):
        self._barrier, self._saved = token + BARRIER, token + SAVED
        self._files = files
        self._ack_fd = ack_fd
        self._uploader = uploader
        self._lock = threading.Lock()
        self._reached = set()
        self._sizes = None

    def control(self, line, source):
        """``line`` without the control line it ends with, which is handled here (what the
        command printed before it without a newline is kept: b"" when nothing was)."""
        if line.endswith(self._barrier):
            with self._lock:
                self._reached.add(source)
                if len(self._reached) == 2:
                    self._sizes = {s: _size(p) for s, p in self._files.items()}
                    try:
                        os.write(self._ack_fd, b"%d %d\n" % (self._sizes["stdout"], self._sizes["stderr"]))
                    except OSError:
                        pass  # the step process is gone: the keeper saves
            return line[:-len(self._barrier)]
        if line.endswith(self._saved):
            with self._lock:
                if self._sizes is not None:
                    self._uploader.saved_by_step(self._sizes)
            return line[:-len(self._saved)]
        return line


class Uploader:
    """Saves the two mflog files to the task's datastore; one save at a time, in order."""

    def __init__(self, files):
        self._files = files
        self._lock = threading.Lock()
        self._saved_sizes = None
        self._store = None
        self._saved_here = False
        self._warned = False

    def while_running(self, done):
        """Once CMD has run SAVE_WHILE_RUNNING_AFTER seconds: save when the files changed, on
        Metaflow's schedule once saving (Metaflow is imported at the first save: a silent
        task never imports it)."""
        start, delay = time.monotonic(), SAVE_WHILE_RUNNING_AFTER
        while not done.wait(delay):
            self.save(final=False)
            delay = (metaflow_parts().update_delay(time.monotonic() - start) if self._saved_here
                     else FIRST_OUTPUT_POLL_SECONDS)

    def saved_by_step(self, sizes):
        """The step process saved the files up to ``sizes``: the final save may be skipped.
        Believed only while this keeper has saved nothing itself (its save of a shorter
        prefix could land after the step's)."""
        with self._lock:
            if not self._saved_here:
                self._saved_sizes = dict(sizes)

    def save(self, final):
        with self._lock:
            sizes = {s: _size(p) for s, p in self._files.items()}
            if sizes == self._saved_sizes or not any(sizes.values()):
                return
            try:
                data = {}
                for stream, path in self._files.items():
                    if sizes[stream]:
                        with open(path, "rb") as f:
                            data[stream] = f.read()
                self._saved_here = True
                self._task_store().save_logs(LOG_SOURCE.decode(), data)
                self._saved_sizes = sizes
            except Exception as error:  # logs are best effort: never fail the task over them
                if final or not self._warned:
                    self._warned = True
                    print("[mfargo] task logs not saved to the datastore: %r" % (error,), file=sys.stderr)

    def _task_store(self):
        if self._store is None:
            self._store = task_store()
        return self._store


def task_store(flow_datastore=None):
    """The task datastore the pod's env names (mode "w", for save_logs); ``flow_datastore``
    (the step's own) is used when it is that datastore, else one is made from the env."""
    parts = metaflow_parts()
    flow_name, run_id, step_name, task_id = os.environ["MF_PATHSPEC"].split("/")
    ds_type = os.environ["MF_DATASTORE"]
    root = os.environ.get("MF_DATASTORE_ROOT")
    if flow_datastore is None or root or flow_datastore.TYPE != ds_type or flow_datastore.flow_name != flow_name:
        storage = [d for d in parts.DATASTORES if d.TYPE == ds_type][0]
        root = root or storage.get_datastore_root_from_config(lambda *a, **k: None)
        flow_datastore = parts.FlowDataStore(flow_name, None, storage_impl=storage, ds_root=root)
    return flow_datastore.get_task_datastore(run_id, step_name, task_id, int(os.environ["MF_ATTEMPT"]), mode="w")


class StepSide:
    """The step process's half of its own final save (``pod_hooks`` calls it)."""

    def __init__(self, ack_fd, token, pipes):
        self._ack_fd = ack_fd
        self._token = token
        self._pipes = pipes
        self._started = False

    @classmethod
    def claim(cls):
        """The keeper's invitation, taken out of the environment (the step's own
        subprocesses must not find it); None when there is none or this process's output
        does not go to the keeper's pipes."""
        spec = os.environ.pop(STEP_SIDE_ENV, "")
        try:
            fd, token, ack_inode, out_inode, err_inode = spec.split(":")
            pipes = (int(out_inode), int(err_inode))
            # fd is the keeper's pipe only if nothing between (an environment's launcher) closed it
            if os.fstat(int(fd)).st_ino != int(ack_inode) or (os.fstat(1).st_ino, os.fstat(2).st_ino) != pipes:
                return None
            os.set_inheritable(int(fd), False)
        except (ValueError, OSError):
            return None
        return cls(int(fd), token.encode(), pipes)

    def save_on_sigterm(self, flow_datastore=None):
        """On SIGTERM (a deadline, a stopped run: the keeper passes it on), save, then die
        of it as before. Only where nothing else handles SIGTERM; a second one kills at once."""
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def save_then_die(signum, _frame):
            signal.signal(signum, signal.SIG_DFL)
            try:
                self.save(flow_datastore)
            finally:
                os.kill(os.getpid(), signum)

        signal.signal(signal.SIGTERM, save_then_die)

    def save(self, flow_datastore=None):
        """Save everything printed so far as the task's logs, once; True if saved. Any
        failure leaves it to the keeper."""
        if self._started:
            return False
        self._started = True
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            if (os.fstat(1).st_ino, os.fstat(2).st_ino) != self._pipes:  # the step redirected its output
                return False
            os.write(1, self._token + BARRIER)
            os.write(2, self._token + BARRIER)
            ready, _, _ = select.select([self._ack_fd], [], [], ACK_SECONDS)
            if not ready:
                return False
            sizes = dict(zip(("stdout", "stderr"), map(int, os.read(self._ack_fd, 64).split())))
            data = {}
            for stream, env in (("stdout", "MFLOG_STDOUT"), ("stderr", "MFLOG_STDERR")):
                if sizes[stream]:
                    with open(os.environ[env], "rb") as f:
                        data[stream] = f.read(sizes[stream])
            if data:
                task_store(flow_datastore).save_logs(LOG_SOURCE.decode(), data)
            os.write(1, self._token + SAVED)
            return True
        except Exception:
            return False
        finally:
            try:
                os.close(self._ack_fd)
            except OSError:
                pass


_IMPORT_LOCK = threading.Lock()
_PARTS = []


def metaflow_parts():
    """Metaflow's pieces, imported once, by whichever thread needs them first: importing
    metaflow from two threads at once can deadlock on its circular imports."""
    with _IMPORT_LOCK:
        if not _PARTS:
            from types import SimpleNamespace

            from metaflow.datastore import FlowDataStore
            from metaflow.mflog import update_delay
            from metaflow.plugins import DATASTORES

            _PARTS.append(SimpleNamespace(FlowDataStore=FlowDataStore, DATASTORES=DATASTORES,
                                          update_delay=update_delay))
        return _PARTS[0]


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
