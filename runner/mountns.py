"""Volumes as real mounts: each container in a private mount namespace.

In Kubernetes a ``volumeMounts[].mountPath`` is a mount point: the container sees
``/data`` (and ``/proc/mounts`` lists it) and values naming ``/tmp/x`` mean ``/tmp/x``.
Where the runner may create mount namespaces (root, Linux: ``unshare(CLONE_NEWNS)``),
every container process starts in its own namespace with each host directory
bind-mounted at its container path (``/tmp`` -> the pod's private tmp, emptyDirs, PVCs,
the image's code directory), so nothing is rewritten: command, args, env values and
parameter values reach the process byte for byte.  Mount points missing on this
machine are created as empty directories and removed when no run uses them any more.

Elsewhere the runner falls back to rewriting path prefixes (:func:`pod.make_rewriter`).
"""
from __future__ import annotations

import contextlib
import errno
import ctypes
import os
import signal
import subprocess
from functools import lru_cache
from pathlib import Path

from . import workdir

CLONE_NEWNS = 0x00020000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1

# The C library this process already links (dlopen(NULL)): no `ldconfig -p` run to find it by name.
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def enter(binds: list[tuple[str, str]], keep_visible: list[str]) -> None:
    """In the child, before exec: a private mount namespace with ``binds`` (container
    path, host path; parents first); host directories in ``keep_visible`` that a bind
    covers (the work directory under ``/tmp``, a venv on PATH...) are bound back at their
    own path.  Sources are opened before anything is mounted, so a bind over
    ``/tmp`` cannot hide the next one's source.  Raises OSError."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(_libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    # (opened inside the new namespace: a bind's source must be one of its own mounts)
    sources = [os.open(h, os.O_PATH) for _, h in binds]
    kept = [(k, os.open(k, os.O_PATH)) for k in keep_visible]
    for (container_path, host_path), fd in zip(binds, sources):
        _bind(fd, container_path, f"bind {host_path} at {container_path}")
    for path, fd in kept:
        _bind(fd, path, f"bind {path} back")
    for fd in sources + [fd for _, fd in kept]:
        os.close(fd)


def _bind(fd: int, target: str, what: str) -> None:
    # Another run may remove an empty mount point it created between our mkdir and mount.
    for attempt in range(3):
        os.makedirs(target, exist_ok=True)
        if _libc.mount(f"/proc/self/fd/{fd}".encode(), target.encode(), None, MS_BIND | MS_REC, None) == 0:
            return
        if ctypes.get_errno() != errno.ENOENT or attempt == 2:
            _check(-1, what)


def covered(path: str, binds: list[tuple[str, str]]) -> bool:
    return any(path == c or path.startswith(c.rstrip("/") + "/") for c, _ in binds)


def keep_visible(binds: list[tuple[str, str]], host_paths: list[str]) -> list[str]:
    """Host directories among ``host_paths`` (or their deepest existing ancestor) that a
    bind would hide, minus those inside another kept one.  A path whose only existing
    ancestor is a bind target itself (``/tmp/new``) is created, so the pod and the host
    share it rather than the whole ``/tmp`` becoming visible."""
    targets = {c for c, _ in binds}
    dirs = set()
    for p in host_paths:
        if not p or not os.path.isabs(p) or not covered(p, binds):
            continue
        p = os.path.abspath(p)
        q = p
        while not os.path.exists(q):
            q = os.path.dirname(q)
        if q in targets or q == "/":
            with contextlib.suppress(OSError):
                os.makedirs(p, exist_ok=True)
            q = p
        if os.path.isfile(q):
            q = os.path.dirname(q)
        if os.path.isdir(q) and q not in targets:
            dirs.add(q)
    out: list[str] = []
    for d in sorted(dirs):
        if not any(d == k or d.startswith(k.rstrip("/") + "/") for k in out):
            out.append(d)
    return out


def host_paths(env: dict[str, str]) -> list[str]:
    """Absolute paths named by an environment's values (``PATH``-style lists split)."""
    return [part for value in env.values() for part in value.split(os.pathsep) if part.startswith("/")]


def _probe() -> None:  # pragma: no cover - runs in the child
    _check(_libc.unshare(CLONE_NEWNS), "unshare")


@lru_cache(maxsize=1)
def available() -> bool:
    """Can this process give its children private mount namespaces?"""
    if os.geteuid() != 0 or not hasattr(os, "fork"):
        return False
    try:
        return subprocess.run(["true"], preexec_fn=_probe, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def ordered(mounts: list[tuple[str, Path]]) -> list[tuple[str, str]]:
    """Bind order: parents before children (``/tmp`` before ``/tmp/data``)."""
    return sorted(((c, str(h)) for c, h in mounts), key=lambda m: (m[0].count("/"), m[0]))


# Mount points the runs had to create on this machine, shared by every run: removing
# one while another run's pod has a mount on it would detach that mount (Linux lets
# rmdir succeed on a mount point of another namespace), so each is removed only when
# no live run uses it.  {path: [pid, ...]} under an exclusive lock.
REGISTRY = Path(os.environ.get("MFARGO_MOUNT_REGISTRY", "/run/mfargo-mount-points.json"))


@contextlib.contextmanager
def _registry():
    import fcntl
    import json

    REGISTRY.parent.mkdir(parents=True, exist_ok=True)
    with open(str(REGISTRY) + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = json.loads(REGISTRY.read_text()) if REGISTRY.exists() else {}
        except ValueError:
            data = {}
        yield data
        REGISTRY.write_text(json.dumps(data))


def claim_mount_points(binds: list[tuple[str, str]]) -> list[str]:
    """Create the container paths missing on this machine (outside other binds) and
    register this process as their user; returns the registry keys it uses."""
    used = []
    with _registry() as data:
        for c, _ in binds:
            if any(c != p and c.startswith(p.rstrip("/") + "/") for p, _ in binds):
                continue  # created inside another bind's host directory, in the namespace
            key = next((k for k in data if c == k or c.startswith(k.rstrip("/") + "/")), None)
            if key is None:
                path, first_missing = Path(c), None
                while not path.exists():
                    first_missing, path = path, path.parent
                if first_missing is None:
                    continue  # exists on this machine: nothing to create or remove
                key = str(first_missing)
                data[key] = []
            os.makedirs(c, exist_ok=True)
            if os.getpid() not in data[key]:
                data[key].append(os.getpid())
            used.append(key)
    return used


def release_mount_points(keys: set[str]) -> None:
    """This run is done with ``keys``: remove those no live run uses (empty dirs only)."""
    if not keys:
        return
    with _registry() as data:
        for key in keys:
            users = [p for p in data.get(key, []) if p != os.getpid() and workdir.process_alive(p)]
            if users:
                data[key] = users
                continue
            data.pop(key, None)
            for root, _dirs, _files in os.walk(key, topdown=False):
                with contextlib.suppress(OSError):
                    os.rmdir(root)


def preexec(binds: list[tuple[str, str]] | None, kept: list[str] | None = None):
    """The child's set-up: die with the runner (PDEATHSIG), then the namespace if any."""
    def run() -> None:  # pragma: no cover - runs in the child
        with contextlib.suppress(Exception):
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if binds is not None:
            enter(binds, kept or [])
    return run
