"""Run one Kubernetes pod (mfargo writes one container per pod) as local processes.

The container's ``command + args`` runs as its own process group in its own cgroup
(:mod:`runner.podgroup`: a deadline, a finished JobSet or Ctrl-C kills everything it
started) with bash/python taken from the pods' PATH.  What a kubelet + image would
provide is emulated in one way each, for the fields mfargo writes (the preflight and the
JobSet checks refuse the rest):

* **Working directory**: ``<work_dir>/pods/<pod name>/`` (fresh per pod); output goes to
  ``<pod dir>/log`` and, line by line, to the ``on_event`` callback.
* **Paths**: every ``volumeMounts[].mountPath`` maps to a host directory (``emptyDir`` ->
  ``<pod dir>/mounts/<mountPath with / -> _>``; ``persistentVolumeClaim`` ->
  ``<work_dir>/volumes/pvc/<claim>``, shared by the run); ``/tmp`` to ``<pod dir>/tmp``
  (private, as a container's; ``private_tmp=False`` shares the machine's); the image's
  code directory (annotation ``mfargo/code-dir``) to ``--code-dir``.  With mount
  namespaces (:mod:`runner.mountns`) they are bind mounts; elsewhere each path *prefix* is
  rewritten in command/args and env values.
* **Environment**: the runner's base env, overlaid with ``envFrom`` secrets then ``env``
  (``value`` with Kubernetes ``$(VAR)`` expansion, ``fieldRef`` from the pod's metadata,
  ``secretKeyRef`` only if the runner was given that secret, else an error naming it).
  ``TMPDIR``, ``HOSTNAME`` and ``PYTHONPATH`` (runner/site, code dir, then the rest) are set.
* **DNS**: ``runner/site/sitecustomize.py`` (first on PYTHONPATH) resolves
  ``*.svc.cluster.local`` and the run's pod host names (``MFARGO_RUNNER_HOSTS_FILE``) to
  127.0.0.1 inside every Python process.
* An absolute command missing here (``/usr/local/bin/python``) is looked up by its base
  name on PATH.  A command that cannot be started fails the pod.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import events as ev
from . import contain, limits, mountns, podgroup
from .reaper import Reaper
from .slots import PodSlots, default_max_workers

SITE_DIR = Path(__file__).resolve().parent / "site"
LOCAL_IP = "127.0.0.1"
DEFAULT_DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
RESULT_LIMIT = limits.MAX_VALUE_BYTES  # the stdout kept as outputs.result (its tail)
TERMINATION_MESSAGE_PATH = "/dev/termination-log"  # Kubernetes' default
TERMINATION_MESSAGE_LIMIT = 4096  # bytes the kubelet keeps


class PodError(Exception):
    """The pod spec cannot be turned into local processes (bad volume, secret...)."""


@dataclass
class PodSpec:
    name: str
    namespace: str
    uid: str
    container: dict  # the pod's one container
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
    mounts: list[tuple[str, Path]] = field(default_factory=list)

    def host_path(self, container_path: str) -> Path | None:
        """Where a path of the main container lives on this machine (None = unmapped)."""
        return map_path(container_path, self.mounts)


def mangle(mount_path: str) -> str:
    return mount_path.rstrip("/").replace("/", "_") or "_"


def termination_message(path: Path | None) -> str:
    """The container's termination message ('' without one), as the kubelet reads it."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as f:
            return f.read(TERMINATION_MESSAGE_LIMIT).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def map_path(path: str, mounts: list[tuple[str, Path]]) -> Path | None:
    for cpath, hpath in mounts:
        cp = cpath.rstrip("/")
        if path == cp or path.startswith(cp + "/"):
            rest = path[len(cp):].lstrip("/")
            return hpath / rest if rest else hpath
    return None


def container_path(path: str, mounts: list[tuple[str, Path]]) -> str:
    """``path`` as the container sees it: a host path inside a mount's host directory
    becomes that mount's path (the innermost mount wins); anything else is unchanged."""
    if not os.path.isabs(path):
        return path
    real = os.path.realpath(path)
    best = None
    for cpath, hpath in mounts:
        host = os.path.realpath(hpath)
        if real == host or real.startswith(host.rstrip("/") + "/"):
            if best is None or len(host) > len(best[1]):
                best = (cpath, host)
    if best is None:
        return path
    rest = real[len(best[1]):].lstrip("/")
    return best[0].rstrip("/") + ("/" + rest if rest else "") or "/"


def make_rewriter(mounts: list[tuple[str, Path]]) -> Callable[[str], str]:
    """Rewrite container path prefixes (as whole path components) into host paths."""
    pairs = sorted(((c.rstrip("/"), str(h)) for c, h in mounts if c.rstrip("/")),
                   key=lambda p: -len(p[0]))
    if not pairs:
        return lambda s: s
    table = dict(pairs)
    pattern = re.compile(r"(?<![\w.\-/])(" + "|".join(re.escape(c) for c, _ in pairs) + r")(?![\w.\-])")

    def rewrite(s: str) -> str:
        if not isinstance(s, str) or "/" not in s:
            return s
        return pattern.sub(lambda m: table[m.group(1)], s)

    return rewrite


_K8S_VAR_RE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def k8s_expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: known names only; ``$$`` escapes a ``$``."""
    if "$" not in text:
        return text

    def repl(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _K8S_VAR_RE.sub(repl, text)


_QTY_RE = re.compile(r"^([+-]?\d+(?:\.\d+)?)([a-zA-Z]*)$")
_SUFFIX = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def parse_quantity(q: Any) -> float:
    m = _QTY_RE.match(str(q).strip())
    if not m or m.group(2) not in _SUFFIX:
        raise PodError(f"invalid quantity {q!r}")
    return float(m.group(1)) * _SUFFIX[m.group(2)]


def resolve_exe(argv0: str, env: dict[str, str]) -> str | None:
    """A container's command as this machine runs it: an absolute path missing here (an
    image's /usr/local/bin/python) is looked up by its base name on the pod's PATH."""
    path = env.get("PATH", os.defpath)
    if "/" in argv0:
        if os.path.isfile(argv0) and os.access(argv0, os.X_OK):
            return argv0
        if os.path.isabs(argv0):
            return shutil.which(os.path.basename(argv0), path=path)
        return argv0
    return shutil.which(argv0, path=path)


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


class PodRunner:
    """Runs pods for one workflow run; knows the run's shared settings."""

    def __init__(self, work_dir: Path, base_env: dict[str, str], *, code_dir: Path | None = None,
                 image_code_dir: str | None = None, on_event: ev.EventCallback = ev.null_callback,
                 kill_grace: float = 2.0, secrets: dict[str, dict[str, str]] | None = None,
                 stream_logs: bool = True, private_tmp: bool = True,
                 force_env: dict[str, str | None] | None = None, node_capacity: dict[str, str] | None = None,
                 mount_namespaces: bool | None = None, interpreter_paths: list[str] | None = None,
                 max_workers: int | None = None):
        self.work_dir = Path(work_dir)
        # At most this many pods run at once (runner.slots); JobSets take their gang's slots.
        self.slots = PodSlots(max_workers or default_max_workers())
        self.base_env = dict(base_env)
        self.code_dir = Path(code_dir).resolve() if code_dir else None
        self.image_code_dir = image_code_dir.rstrip("/") if image_code_dir else None
        self.on_event = on_event
        self.kill_grace = kill_grace
        self.secrets = secrets or {}
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
        problem = contain.pod_problem(pod.name, pod.volumes or [], [pod.container])
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
                result.mounts = self._mounts(pod, pod_dir)
                prepared = self._prepare(pod, result.mounts, pod_dir)
            except PodError as e:
                result.reason, result.message = "Error", str(e)
                log.write(f"runner: {e}\n".encode())
                return result
            with contextlib.suppress(OSError, TypeError):
                (pod_dir / "pod.json").write_text(json.dumps({
                    "name": pod.name, "namespace": pod.namespace, "uid": pod.uid, "hostname": pod.hostname,
                    "subdomain": pod.subdomain, "labels": pod.labels, "annotations": pod.annotations,
                    "containers": [{"name": prepared["name"], "argv": prepared["argv"], "cwd": str(pod_dir)}],
                }, indent=2, default=str))
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
            # Waiting for a slot, the pod is Pending: its deadline starts when it runs.
            async with contextlib.nullcontext() if pod.gang_admitted or pod.daemon else self.slots.admit(1):
                result.started_at = time.time()
                body = self._run_container(pod, prepared, log)
                try:
                    if pod.active_deadline is not None and pod.active_deadline >= 0:
                        code, reason, message, stdout = await asyncio.wait_for(body, timeout=pod.active_deadline)
                    else:
                        code, reason, message, stdout = await body
                except asyncio.TimeoutError:
                    result.reason, result.message = "DeadlineExceeded", pod.deadline_message
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
        res = pod.container.get("resources") or {}
        need = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        short = sorted(n for n, q in need.items()
                       if n in self.node_capacity and parse_quantity(str(q)) > self.node_capacity[n])
        return ", ".join(f"Insufficient {n}" for n in short)

    # -- the container's volumes, env and argv -------------------------------------
    def _mounts(self, pod: PodSpec, pod_dir: Path) -> list[tuple[str, Path]]:
        """(container path, host directory) of each volumeMount, /tmp and the code directory."""
        vols = {v.get("name"): v for v in pod.volumes or []}
        mounts: list[tuple[str, Path]] = []
        for m in pod.container.get("volumeMounts") or []:
            name, path = m.get("name"), m.get("mountPath")
            v = vols.get(name)
            if v is None:
                raise PodError(f"volumeMount {name!r} has no matching volume")
            if "emptyDir" in v:
                d = pod_dir / "mounts" / mangle(path or name)
            elif v.get("persistentVolumeClaim"):
                try:
                    d = contain.join_inside(self.work_dir / "volumes" / "pvc",
                                            v["persistentVolumeClaim"].get("claimName") or name, "claimName")
                except ValueError as e:
                    raise PodError(str(e)) from None
            else:
                raise PodError(f"volume {name!r} of type {next((k for k in v if k != 'name'), '?')!r} is not "
                               "supported by the local runner (emptyDir and persistentVolumeClaim are)")
            d.mkdir(parents=True, exist_ok=True)
            if path and path != "/":
                mounts.append((path.rstrip("/"), d))
        taken = {p for p, _ in mounts}
        if self.private_tmp and "/tmp" not in taken:
            mounts.append(("/tmp", pod_dir / "tmp"))
        if self.image_code_dir and self.code_dir and self.image_code_dir not in taken:
            mounts.append((self.image_code_dir, self.code_dir))
        return mounts

    def _field_ref(self, pod: PodSpec, path: str) -> str:
        """The fieldPaths mfargo writes: the pod's identity and its labels/annotations by key."""
        simple = {"metadata.name": pod.name, "metadata.namespace": pod.namespace, "metadata.uid": pod.uid,
                  "spec.serviceAccountName": pod.service_account or "default", "status.hostIP": LOCAL_IP}
        path = path.strip()
        if path in simple:
            return simple[path]
        m = re.fullmatch(r"metadata\.(labels|annotations)\[['\"](.+)['\"]\]", path)
        if m:
            return str((pod.labels if m.group(1) == "labels" else pod.annotations).get(m.group(2), ""))
        raise PodError(f"fieldRef fieldPath {path!r} is not supported by the local runner")

    def _secret(self, ref: dict, key: str | None = None) -> dict[str, str]:
        """A secret passed to the runner (``secrets=``): the local runner has no Kubernetes secrets."""
        name = ref.get("name")
        if name not in self.secrets or (key is not None and key not in self.secrets[name]):
            which = f"secret {name!r}" + (f" (key {key!r})" if key is not None else "")
            raise PodError(f"{which} is not available: the local runner has no Kubernetes secrets; "
                           "pass it to the runner (secrets=)")
        return self.secrets[name]

    def _prepare(self, pod: PodSpec, mounts: list[tuple[str, Path]], pod_dir: Path) -> dict:
        c = pod.container
        # With mount namespaces the container sees its paths as they are: nothing to rewrite.
        rewrite = (lambda text: text) if self.mount_namespaces else make_rewriter(mounts)
        cenv: dict[str, str] = {}
        for src in c.get("envFrom") or []:  # mfargo writes secretRef only
            if "secretRef" not in src:
                raise PodError(f"envFrom {sorted(src)} is not supported by the local runner (secretRef is)")
            cenv.update({(src.get("prefix") or "") + k: v for k, v in self._secret(src["secretRef"]).items()})
        for item in c.get("env") or []:
            name, vf = item.get("name"), item.get("valueFrom")
            if vf is None:
                value = item.get("value")
                cenv[name] = k8s_expand(rewrite("" if value is None else str(value)), cenv)
            elif vf.get("fieldRef"):
                cenv[name] = self._field_ref(pod, vf["fieldRef"].get("fieldPath", ""))
            elif vf.get("secretKeyRef"):
                ref = vf["secretKeyRef"]
                cenv[name] = self._secret(ref, ref.get("key"))[ref.get("key")]
            else:
                raise PodError(f"env {name!r}: valueFrom {sorted(vf)} is not supported by the local runner "
                               "(fieldRef and secretKeyRef are)")
        env = {**self.base_env, **pod.extra_env, **cenv}
        for k, v in self.force_env.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        env["HOSTNAME"] = env["MFARGO_POD_HOSTNAME"] = pod.hostname or pod.name
        env.setdefault("TMPDIR", str(pod_dir / "tmp"))
        env["PYTHONPATH"] = self._pythonpath(env.get("PYTHONPATH", ""), mounts)
        env["MFARGO_RUNNER_HOSTS_FILE"] = str(self.hosts_file)
        if not c.get("command"):
            raise PodError(f"container {c.get('name') or 'main'!r} has no command: the image entrypoint is "
                           "unknown locally")
        argv = [k8s_expand(rewrite(str(x)), cenv) for x in list(c["command"]) + list(c.get("args") or [])]
        # The kubelet keeps the file at terminationMessagePath as the container's message.
        message_file = map_path(str(c.get("terminationMessagePath") or TERMINATION_MESSAGE_PATH), mounts)
        out = {"name": c.get("name") or "main", "argv": argv, "env": env, "cwd": pod_dir, "binds": None,
               "kept": None, "message_file": message_file}
        if self.mount_namespaces:
            out["binds"] = binds = mountns.ordered(mounts)
            self.created_mount_points.update(mountns.claim_mount_points(binds))
            # The caller's env names host paths (METAFLOW_DATASTORE_SYSROOT_LOCAL, a venv on PATH...),
            # and the interpreter reads its prefix and sys.path: they stay host paths inside the pod.
            needed = [str(self.work_dir), str(self.code_dir or ""), str(SITE_DIR),
                      *mountns.host_paths(self.base_env), *self.interpreter_paths]
            out["kept"] = mountns.keep_visible(binds, needed)
        return out

    def _pythonpath(self, given: str, mounts: list[tuple[str, Path]]) -> str:
        """runner/site, the code directory, then ``given``.  In a mount namespace a path
        inside a mounted host directory is written as its container path (the code
        directory as ``/app``, where the pod runs): the pod's Python then sees one copy of
        each package, and Metaflow refuses two copies of a ``metaflow_extensions``."""
        entries = [str(SITE_DIR)] + ([str(self.code_dir)] if self.code_dir else []) + given.split(os.pathsep)
        if self.mount_namespaces:
            entries = [container_path(e, mounts) for e in entries]
        return os.pathsep.join(dict.fromkeys(e for e in entries if e))

    async def _pump(self, stream, log, pod: PodSpec, sink: list | None) -> None:
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
                self._emit_line(line, log, pod)
        if buf:
            self._emit_line(buf, log, pod)

    def _emit_line(self, line: bytes, log, pod: PodSpec) -> None:
        log.write(line + b"\n")
        if self.stream_logs:
            self.on_event(ev.Event(ev.LOG, node=pod.display, pod=pod.name, message=line.decode("utf-8", "replace")))

    async def _run_container(self, pod: PodSpec, p: dict, log):
        argv, env = list(p["argv"]), p["env"]
        exe = resolve_exe(argv[0], env)
        if exe is None:
            msg = (f"failed to start container {p['name']!r}: exec: {argv[0]!r}: "
                   "executable file not found in $PATH")
            log.write(f"runner: {msg}\n".encode())
            return 127, "StartError", msg, ""
        argv[0] = exe
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
        sink: list[bytes] = []
        pumps = [asyncio.ensure_future(self._pump(proc.stdout, log, pod, sink)),
                 asyncio.ensure_future(self._pump(proc.stderr, log, pod, None))]
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
        stdout = b"".join(sink).decode("utf-8", "replace")
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
