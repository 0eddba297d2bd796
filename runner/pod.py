"""Run one Kubernetes pod as local processes.

Each container's ``command + args`` runs as its own process group (so a deadline,
a finished JobSet or Ctrl-C can kill everything it started) with bash/python taken
from the runner's PATH.  What a real kubelet + image would provide is emulated in
one documented way each:

* **Working directory**: ``<work_dir>/pods/<pod name>/`` (fresh per pod; mfargo writes
  no ``workingDir``).
  Output goes to ``<pod dir>/log`` and, line by line, to the ``on_event`` callback.
* **Path mapping**: every ``volumeMounts[].mountPath`` maps to a host directory
  (``emptyDir`` -> ``<pod dir>/mounts/<mountPath with / -> _>``, fresh per pod;
  ``persistentVolumeClaim`` -> ``<work_dir>/volumes/pvc/<claim>``, shared by the run);
  ``/tmp`` maps to ``<pod dir>/tmp`` (a container's /tmp is private in Kubernetes;
  ``private_tmp=False`` shares the machine's /tmp instead);
  the image's code directory (annotation ``mfargo/code-dir``) maps to ``--code-dir``.
  The runner rewrites each such path *prefix* wherever it appears in command/args,
  env values and output ``valueFrom.path``.  Paths elsewhere in the
  image filesystem are not visible.
* **Environment**: the runner's base env, overlaid with ``envFrom`` then ``env``
  (``value`` with Kubernetes ``$(VAR)`` expansion, ``fieldRef`` from the pod's
  metadata, ``resourceFieldRef``; ``secretKeyRef``/``configMapKeyRef`` only if the
  runner was given that secret/config map, else an error naming it).  ``TMPDIR``,
  ``HOSTNAME`` and ``PYTHONPATH`` (= runner/site, code dir, then the rest; with mount
  namespaces a path inside the code dir is given as its container path) are set.
* **DNS**: ``runner/site/sitecustomize.py`` (first on PYTHONPATH) resolves
  ``*.svc.cluster.local`` and the names listed in the run's hosts file
  (``MFARGO_RUNNER_HOSTS_FILE``) to 127.0.0.1 inside every Python process.
* An absolute command missing on this machine (``/usr/local/bin/python``) is looked
  up by its base name on PATH.  A command that cannot be started fails the pod.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import events as ev
from . import contain, limits, mountns, podgroup
from .pod_setup import (LOCAL_IP, SITE_DIR, PodError, PodSetup, k8s_expand, map_path, parse_quantity, resolve_exe,
                        termination_message)
from .reaper import Reaper
from .slots import PodSlots, default_max_workers

__all__ = ["PodError", "PodResult", "PodRunner", "PodSpec", "SITE_DIR", "k8s_expand"]

DEFAULT_DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
RESULT_LIMIT = limits.MAX_VALUE_BYTES  # the stdout kept as outputs.result (its tail)


@dataclass
class PodSpec:
    name: str
    namespace: str
    uid: str
    containers: list[dict]
    hostname: str = ""
    subdomain: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    service_account: str = "default"
    volumes: list[dict] = field(default_factory=list)
    active_deadline: float | None = None
    termination_grace: float | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    display: str = ""
    deadline_message: str = DEFAULT_DEADLINE_MESSAGE
    gang_admitted: bool = False  # its JobSet holds the slots of all its pods (runner.slots)
    daemon: bool = False  # sleeps beside the run until its DAG stops it: takes no machine slot


@dataclass
class PodResult:
    name: str
    phase: str  # Succeeded | Failed
    reason: str  # Completed | Error | StartError | DeadlineExceeded | Killed
    message: str
    exit_code: int | None
    stdout: str
    pod_dir: Path
    started_at: float
    finished_at: float
    mounts: list[tuple[str, Path]] = field(default_factory=list)  # of the main container

    def host_path(self, container_path: str) -> Path | None:
        """Where a path of the main container lives on this machine (None = unmapped)."""
        return map_path(container_path, self.mounts)


# ------------------------------------------------------------------ process helpers

class PodLog:
    """A pod's ``log`` file. A failed write (a full disk) is never raised into the walk and
    never silently dropped: the first one is kept on the runner (``write_error``), the pod
    and the run fail with it, and the rest of the pod's output is drained unwritten."""

    def __init__(self, path: Path, runner: "PodRunner"):
        self.path, self.runner = path, runner
        self.failed = False
        try:
            self._f = open(path, "ab", buffering=0)
        except OSError as e:
            self._f = None
            self._fail(e)

    def _fail(self, e: OSError) -> None:
        self.failed = True
        if not self.runner.write_error:
            self.runner.write_error = f"writing {self.path}: {e.strerror or e}"

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view and not self.failed:
            try:
                n = self._f.write(view)
            except OSError as e:
                self._fail(e)
                return
            if not n:  # a short write that wrote nothing: the disk is full
                self._fail(OSError(28, "No space left on device"))
                return
            view = view[n:]

    def close(self) -> None:
        if self._f is not None:
            with contextlib.suppress(OSError):
                self._f.close()


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _main_exit(proc) -> int:
    """The main process's exit code as soon as it exits. asyncio's ``Process.wait()`` (3.11)
    also waits for its pipes to close, which a process it started may hold for ever; a pidfd
    (Linux 5.3+) says when the process itself ended, else its return code is polled."""
    loop = asyncio.get_running_loop()
    exited = loop.create_future()
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd, or already reaped: returncode is (nearly) set
        fd = None
    if fd is not None:
        loop.add_reader(fd, lambda: exited.done() or exited.set_result(None))
    waiter = asyncio.ensure_future(proc.wait())
    try:
        while proc.returncode is None and not waiter.done():
            await asyncio.wait({waiter, exited}, timeout=0.1 if fd is None else None,
                               return_when=asyncio.FIRST_COMPLETED)
            if exited.done():  # it ended: asyncio's watcher reaps it and sets returncode next
                for _ in range(5000):
                    if proc.returncode is not None:
                        break
                    await asyncio.sleep(0.001)
                break
        return proc.returncode if proc.returncode is not None else -signal.SIGKILL
    finally:
        if fd is not None:
            loop.remove_reader(fd)
            os.close(fd)
        waiter.cancel()


class PodRunner(PodSetup):
    """Runs pods for one workflow run; knows the run's shared settings."""

    def __init__(self, work_dir: Path, base_env: dict[str, str], *, code_dir: Path | None = None,
                 image_code_dir: str | None = None, on_event: ev.EventCallback = ev.null_callback,
                 kill_grace: float = 2.0, secrets: dict[str, dict[str, str]] | None = None,
                 config_maps: dict[str, dict[str, str]] | None = None, stream_logs: bool = True,
                 private_tmp: bool = True, force_env: dict[str, str | None] | None = None,
                 node_capacity: dict[str, str] | None = None, mount_namespaces: bool | None = None,
                 interpreter_paths: list[str] | None = None, max_workers: int | None = None):
        self.work_dir = Path(work_dir)
        # At most this many pods run at once (runner.slots); JobSets take their gang's slots.
        self.slots = PodSlots(max_workers or default_max_workers())
        self.base_env = dict(base_env)
        self.code_dir = Path(code_dir).resolve() if code_dir else None
        self.image_code_dir = image_code_dir.rstrip("/") if image_code_dir else None
        self.on_event = on_event
        self.kill_grace = kill_grace
        self.secrets = secrets or {}
        self.config_maps = config_maps or {}
        self.stream_logs = stream_logs
        self.private_tmp = private_tmp
        # Volumes as real mounts in a private mount namespace per container (runner.mountns)
        # where this machine allows it (default: if it does), else path prefixes rewritten.
        self.mount_namespaces = mountns.available() if mount_namespaces is None else mount_namespaces
        self.created_mount_points: set[str] = set()
        # Host paths the pods' interpreter reads (runner.interpreter.needed_paths): never hidden.
        self.interpreter_paths = list(interpreter_paths or [])
        # Applied after the container's own env (None = remove), e.g. ``mfargo run --user``.
        self.force_env = dict(force_env or {})
        # The one node's allocatable resources (None = unlimited): a pod requesting more
        # stays Pending ("Unschedulable") until a Job/Argo deadline or the run ends.
        self.node_capacity = {k: parse_quantity(str(v)) for k, v in (node_capacity or {}).items()}
        self.pending: dict[str, str] = {}  # pod name -> why it cannot be scheduled
        self._warned_tmp: set[str] = set()
        self.hosts_file = self.work_dir / "hosts"
        self.hosts_file.touch()
        self._hosts: set[str] = set()
        self._live: dict[int, str] = {}  # pgid -> pod name
        self.write_error = ""  # the first failed write of a pod's log: the run fails with it
        self._reaper: Reaper | None = None  # started with the first container
        (self.work_dir / "pods").mkdir(parents=True, exist_ok=True)

    # -- DNS -------------------------------------------------------------------
    def add_hosts(self, names: list[str]) -> None:
        new = [n.lower().rstrip(".") for n in names if n and n.lower().rstrip(".") not in self._hosts]
        if not new:
            return
        self._hosts.update(new)
        with open(self.hosts_file, "a") as f:
            for n in new:
                f.write(f"{LOCAL_IP} {n}\n")

    # -- emergency stop --------------------------------------------------------
    def kill_all(self) -> None:
        for pgid in list(self._live):
            _signal_group(pgid, signal.SIGKILL)

    def close(self) -> None:
        """After kill_all: stop the watchdog (it kills nothing on a clean stop) and remove
        the mount points the run had to create."""
        if self._reaper is not None:
            self._reaper.close()
            self._reaper = None
        mountns.release_mount_points(self.created_mount_points)
        self.created_mount_points.clear()

    # -- main entry ------------------------------------------------------------
    async def run(self, pod: PodSpec) -> PodResult:
        problem = contain.pod_problem(pod.name, pod.volumes or [], pod.containers)
        if problem:  # before anything is created: a name from the YAML would leave the work directory
            raise PodError(problem)
        pod_dir = self.work_dir / "pods" / pod.name
        try:
            pod_dir.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise PodError(f"pod directory {pod_dir} already exists: another run with the same workflow "
                           "name used this work directory (Kubernetes would say AlreadyExists)") from None
        (pod_dir / "tmp").mkdir()
        started = time.time()
        if pod.hostname:
            names = [pod.hostname]
            if pod.subdomain:
                base = f"{pod.hostname}.{pod.subdomain}"
                names += [base, f"{base}.{pod.namespace}", f"{base}.{pod.namespace}.svc",
                          pod.subdomain, f"{pod.subdomain}.{pod.namespace}",
                          f"{pod.subdomain}.{pod.namespace}.svc"]
            self.add_hosts(names)
        result = PodResult(pod.name, "Failed", "Error", "", None, "", pod_dir, started, started)
        log = PodLog(pod_dir / "log", self)
        try:
            try:
                volume_dirs = self._volume_dirs(pod, pod_dir)
                mounts = {id(c): self._mounts(c, volume_dirs, pod_dir) for c in pod.containers}
                result.mounts = mounts[id(pod.containers[0])] if pod.containers else []
                prepared = {id(c): self._prepare(pod, c, mounts[id(c)], pod_dir)
                            for c in pod.containers}
            except PodError as e:
                result.reason, result.message = "Error", str(e)
                result.exit_code = None
                log.write(f"runner: {e}\n".encode())
                return result
            self._write_pod_json(pod, pod_dir, prepared)
            unfit = self.unschedulable(pod)
            if unfit:
                # Kubernetes: the pod never starts, and its own activeDeadlineSeconds (counted
                # from its start) never fires; a Job's deadline, Argo's or the run's does.
                msg = f"0/1 nodes are available: {unfit}"
                log.write(f"runner: Pending (Unschedulable): {msg}\n".encode())
                self.on_event(ev.Event(ev.WARNING, node=pod.display or pod.name, pod=pod.name,
                                       message=f"pod {pod.name} Pending (Unschedulable): {msg}"))
                result.reason, result.message = "Unschedulable", msg
                self.pending[pod.name] = msg
                try:
                    await asyncio.Event().wait()  # until cancelled
                finally:
                    self.pending.pop(pod.name, None)
            multi = len(pod.containers) > 1
            # Waiting for a slot, the pod is Pending: its deadline starts when it runs.
            async with contextlib.nullcontext() if pod.gang_admitted or pod.daemon else self.slots.admit(1):
                result.started_at = time.time()
                body = self._body(pod, prepared, log, multi)
                try:
                    if pod.active_deadline is not None and pod.active_deadline >= 0:
                        code, reason, message, stdout = await asyncio.wait_for(body, timeout=pod.active_deadline)
                    else:
                        code, reason, message, stdout = await body
                except asyncio.TimeoutError:
                    result.reason, result.message, result.exit_code = "DeadlineExceeded", pod.deadline_message, None
                    log.write(f"runner: {pod.deadline_message}\n".encode())
                    return result
            result.exit_code, result.reason, result.message, result.stdout = code, reason, message, stdout
            if log.failed:  # its log is incomplete: the pod fails, and the run with it
                result.reason, result.message = "Error", self.write_error
            elif reason == "Completed":
                result.phase = "Succeeded"
            return result
        finally:
            result.finished_at = time.time()
            log.close()

    def unschedulable(self, pod: PodSpec) -> str:
        """'Insufficient <resource>, ...' if the pod's requests exceed the node capacity."""
        if not self.node_capacity:
            return ""
        need: dict[str, float] = {}
        for c in pod.containers:
            res = c.get("resources") or {}
            for name in set(res.get("requests") or {}) | set(res.get("limits") or {}):
                value = (res.get("requests") or {}).get(name, (res.get("limits") or {}).get(name))
                need[name] = need.get(name, 0.0) + parse_quantity(str(value))
        short = sorted(n for n, q in need.items() if n in self.node_capacity and q > self.node_capacity[n])
        return ", ".join(f"Insufficient {n}" for n in short)

    # -- pieces ----------------------------------------------------------------
    def _write_pod_json(self, pod: PodSpec, pod_dir: Path, prepared: dict) -> None:
        info = {
            "name": pod.name, "namespace": pod.namespace, "uid": pod.uid, "hostname": pod.hostname,
            "subdomain": pod.subdomain, "labels": pod.labels, "annotations": pod.annotations,
            "containers": [{"name": p["name"], "argv": p["argv"], "cwd": str(p["cwd"])}
                           for p in prepared.values()],
        }
        with contextlib.suppress(OSError, TypeError):
            (pod_dir / "pod.json").write_text(json.dumps(info, indent=2, default=str))

    async def _body(self, pod: PodSpec, prepared: dict, log, multi: bool):
        mains = [self._run_container(pod, prepared[id(c)], log, multi, i == 0) for i, c in enumerate(pod.containers)]
        results = await asyncio.gather(*mains)
        stdout = results[0][3] if results else ""
        for code, reason, message, _ in results:
            if reason != "Completed":
                return code, reason, message, stdout
        return (results[0][0] if results else 0), "Completed", "", stdout

    async def _pump(self, stream, log, prefix: bytes, pod: PodSpec, sink: list | None) -> None:
        buf = b""
        total = 0
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                break
            if sink is not None:
                sink.append(chunk)
                total += len(chunk)
                while total > 4 * RESULT_LIMIT and len(sink) > 1:
                    total -= len(sink.pop(0))
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                self._emit_line(line, log, prefix, pod)
        if buf:
            self._emit_line(buf, log, prefix, pod)

    def _emit_line(self, line: bytes, log, prefix: bytes, pod: PodSpec) -> None:
        log.write(prefix + line + b"\n")
        if self.stream_logs:
            self.on_event(ev.Event(ev.LOG, node=pod.display, pod=pod.name,
                                   message=(prefix + line).decode("utf-8", "replace")))

    async def _run_container(self, pod: PodSpec, p: dict, log, multi: bool, capture: bool):
        argv, env = list(p["argv"]), p["env"]
        exe = resolve_exe(argv[0], env)
        if exe is None:
            msg = (f"failed to start container {p['name']!r}: exec: {argv[0]!r}: "
                   "executable file not found in $PATH")
            log.write(f"runner: {msg}\n".encode())
            return 127, "StartError", msg, ""
        argv[0] = exe
        prefix = f"[{p['name']}] ".encode() if multi else b""
        group = podgroup.Group()  # everything the container starts ends with it
        if self._reaper is None:
            self._reaper = Reaper()
        if group.path is not None:
            self._reaper.add(str(group.path))
        setup = mountns.preexec(p["binds"], p["kept"]) if sys.platform.startswith("linux") else None

        def preexec() -> None:  # pragma: no cover - runs in the child
            group.join()
            if setup is not None:
                setup()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=str(p["cwd"]), env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True, preexec_fn=preexec)
        except (OSError, subprocess.SubprocessError) as e:
            self._end_group(group)
            msg = f"failed to start container {p['name']!r}: {e}"
            log.write(f"runner: {msg}\n".encode())
            return 128, "StartError", msg, ""
        pgid = proc.pid
        self._live[pgid] = pod.name
        self._reaper.add(pgid)
        sink: list[bytes] | None = [] if capture else None
        pumps = [asyncio.ensure_future(self._pump(proc.stdout, log, prefix, pod, sink)),
                 asyncio.ensure_future(self._pump(proc.stderr, log, prefix, pod, None))]
        killed = False
        try:
            code = await _main_exit(proc)
        except asyncio.CancelledError:
            killed = True
            await self._terminate(proc, pgid, pod)
            raise
        finally:
            # The container is gone: kill what it left behind, like the kubelet would (its
            # cgroup: also what left the process group; then no one holds its log pipes).
            _signal_group(pgid, signal.SIGKILL)
            self._end_group(group)
            self._live.pop(pgid, None)
            if self._reaper is not None:
                self._reaper.remove(pgid)
            done, pending = await asyncio.wait(pumps, timeout=2.0) if not killed else (set(), set(pumps))
            for t in pending:
                t.cancel()
            # Without cgroups a process that left the group may still hold the pipes: close
            # them now, not when the event loop is gone ("Event loop is closed").
            with contextlib.suppress(Exception):
                proc._transport.close()  # noqa: SLF001 - asyncio.subprocess.Process has no close()
        stdout = b"".join(sink or []).decode("utf-8", "replace")
        if stdout.endswith("\n"):
            stdout = stdout[:-1]
        if len(stdout) > RESULT_LIMIT:
            stdout = stdout[-RESULT_LIMIT:]
        if code == 0:
            return 0, "Completed", "", stdout
        # Argo's node message: "<reason> (exit code N)", then ": <termination message>".
        said = termination_message(p.get("message_file"))
        said = f": {said}" if said else ""
        if code < 0:
            return 128 - code, "Error", f"Error (exit code {128 - code}: killed by signal {-code}){said}", stdout
        return code, "Error", f"Error (exit code {code}){said}", stdout

    def _end_group(self, group: podgroup.Group) -> None:
        group.kill()
        if group.path is not None and self._reaper is not None:
            self._reaper.remove(str(group.path))

    async def _terminate(self, proc, pgid: int, pod: PodSpec) -> None:
        """SIGTERM the group, give it the grace period, then SIGKILL."""
        _signal_group(pgid, signal.SIGTERM)
        grace = self.kill_grace
        if pod.termination_grace is not None:
            grace = min(grace, float(pod.termination_grace))
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), timeout=max(grace, 0.01))
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass
        _signal_group(pgid, signal.SIGKILL)
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, ProcessLookupError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), timeout=5.0)
