"""Run one command of a pod with its output kept as Metaflow task logs.

``python -m metaflow_extensions.mfargo.plugins.task_logs CMD ARG...`` runs CMD and, for
each line it prints, writes the line unchanged to the pod's own stdout/stderr (what
``kubectl logs`` shows) and Metaflow's structured form (``mflog``) to the files named by
``MFLOG_STDOUT``/``MFLOG_STDERR``. Those files are saved to the task's place in the
datastore, where ``flow.py logs``, ``Task.stdout/stderr/loglines`` and the UI read them:
while CMD runs (on Metaflow's own schedule, ``mflog.update_delay``, when they changed),
and once more after CMD ends, however it ends (exit, failure, or SIGTERM/SIGINT, which
are passed on to CMD first). The exit status is CMD's (128 + N when signal N ended it).

Which task the logs belong to comes from the environment, as in Metaflow's own pods
(``mflog.export_mflog_env_vars``): ``MF_PATHSPEC`` (flow/run/step/task), ``MF_ATTEMPT``,
``MF_DATASTORE`` and optionally ``MF_DATASTORE_ROOT`` (else the datastore's configured
root). Several commands of one pod (``init`` then ``step``) append to the same files,
so the task's logs hold them all.

Kept to Metaflow and the standard library: it runs inside pods, like ``pod_hooks``.
"""

import os
import signal
import subprocess
import sys
import threading
import time

LOG_SOURCE = b"task"  # metaflow.mflog.TASK_LOG_SOURCE: who minted the timestamps
STREAMS = ("stdout", "stderr")
DRAIN_SECONDS = 10.0  # after CMD ends, how long a leftover child may keep its output pipe
DRAIN_SECONDS_TERMINATING = 0.5  # ... when the pod is being stopped (its grace period is short)
FIRST_OUTPUT_POLL_SECONDS = 0.25  # mflog.update_delay's shortest interval


def main(argv):
    if not argv:
        print("usage: python -m %s CMD [ARG...]" % __spec__.name, file=sys.stderr)
        return 2
    files = {"stdout": os.environ["MFLOG_STDOUT"], "stderr": os.environ["MFLOG_STDERR"]}
    uploader = Uploader(files)
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as error:
        print("cannot run %s: %s" % (argv[0], error), file=sys.stderr)
        return 127
    stopping = []

    def pass_on(signum, _frame):
        stopping.append(signum)
        if proc.poll() is None:
            proc.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, pass_on)

    pumps = [
        threading.Thread(target=pump, args=(proc.stdout, sys.stdout.buffer, files["stdout"]), daemon=True),
        threading.Thread(target=pump, args=(proc.stderr, sys.stderr.buffer, files["stderr"]), daemon=True),
    ]
    for thread in pumps:
        thread.start()
    done = threading.Event()
    periodic = threading.Thread(target=uploader.every_update_delay, args=(done,), daemon=True)
    periodic.start()

    code = proc.wait()
    drain_until = time.monotonic() + (DRAIN_SECONDS_TERMINATING if stopping else DRAIN_SECONDS)
    for thread in pumps:
        thread.join(max(drain_until - time.monotonic(), 0))
    done.set()
    uploader.save(final=True)
    return code if code >= 0 else 128 - code


def pump(source, echo, path):
    """Copy lines from ``source`` to ``echo`` as they are, and to ``path`` as mflog lines."""
    decorate = None  # Metaflow is imported at the first line: a silent command never pays for it
    with open(path, "ab", buffering=0) as log:
        for line in iter(source.readline, b""):
            if decorate is None:
                decorate = metaflow_parts().decorate
            log.write(decorate(LOG_SOURCE, line))
            echo.write(line)
            echo.flush()


class Uploader:
    """Saves the two mflog files to the task's datastore; one save at a time, in order."""

    def __init__(self, files):
        self._files = files
        self._lock = threading.Lock()
        self._saved_sizes = None
        self._store = None
        self._warned = False

    def every_update_delay(self, done):
        """While the command runs: save on Metaflow's schedule when the files changed."""
        start = time.monotonic()
        while not any(_size(p) for p in self._files.values()):  # nothing to save yet: no Metaflow import
            if done.wait(FIRST_OUTPUT_POLL_SECONDS):
                return
        update_delay = metaflow_parts().update_delay
        with self._lock:
            try:
                self._task_store()  # ready now, so a save after SIGTERM fits in a short grace period
            except Exception:
                pass  # save() reports it
        while not done.wait(update_delay(time.monotonic() - start)):
            self.save(final=False)

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
                self._task_store().save_logs(LOG_SOURCE.decode(), data)
                self._saved_sizes = sizes
            except Exception as error:  # logs are best effort: never fail the task over them
                if final or not self._warned:
                    self._warned = True
                    print("[mfargo] task logs not saved to the datastore: %r" % (error,), file=sys.stderr)

    def _task_store(self):
        if self._store is None:
            parts = metaflow_parts()
            FlowDataStore, DATASTORES = parts.FlowDataStore, parts.DATASTORES
            flow_name, run_id, step_name, task_id = os.environ["MF_PATHSPEC"].split("/")
            ds_type = os.environ["MF_DATASTORE"]
            storage = [d for d in DATASTORES if d.TYPE == ds_type][0]
            root = os.environ.get("MF_DATASTORE_ROOT") or storage.get_datastore_root_from_config(
                lambda *a, **k: None
            )
            flow_store = FlowDataStore(flow_name, None, storage_impl=storage, ds_root=root)
            self._store = flow_store.get_task_datastore(
                run_id, step_name, task_id, int(os.environ["MF_ATTEMPT"]), mode="w"
            )
        return self._store


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
            from metaflow.mflog.mflog import decorate
            from metaflow.plugins import DATASTORES

            _PARTS.append(SimpleNamespace(FlowDataStore=FlowDataStore, DATASTORES=DATASTORES,
                                          update_delay=update_delay, decorate=decorate))
        return _PARTS[0]


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
