"""Every process a container starts ends with it: one cgroup per container.

On Kubernetes a container's processes end with it. A process group is not enough here: a
pod's ``setsid sleep &`` or a double fork leaves the group, and one that keeps the log pipe
open would keep the pod's output open after its main process exited. So each container
process joins its own cgroup before it execs (``preexec``), and when the main process has
exited (or the pod is killed) :meth:`Group.kill` stops the group from forking and SIGKILLs
every process in it, whatever session it made for itself.

Groups are ``<hierarchy>/mfargo-pods/<runner pid>-<n>``; the run's watchdog (``reaper.py``)
kills what is in them if the runner dies, and the next run removes those a dead runner left.

Mechanism: cgroup v1's ``pids`` controller (``pids.max`` = 0 stops forks, then every pid in
``cgroup.procs`` is killed until none is left), or cgroup v2's ``cgroup.kill``; both need
root. Where neither is writable (not root, no cgroup file system) the runner falls back to
process groups: a process that leaves its group (``setsid``, daemons) survives its pod, and
a held log pipe is closed by the runner 2 s after the main process exited.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from functools import lru_cache
from pathlib import Path

V1_ROOT = Path("/sys/fs/cgroup/pids")
V2_ROOT = Path("/sys/fs/cgroup/unified")
PARENT = "mfargo-pods"
KILL_ROUNDS = 200  # rounds of "kill every pid listed" before giving up on a group (one is usual)
_counter = itertools.count()


@lru_cache(maxsize=1)
def root() -> Path | None:
    """The writable hierarchy pods' groups are made in (None: the fallback, process groups)."""
    for base, probe in ((V1_ROOT, "pids.max"), (V2_ROOT, "cgroup.kill")):
        parent = base / PARENT
        try:
            parent.mkdir(exist_ok=True)
            test = parent / f"probe-{os.getpid()}"
            test.mkdir()
            ok = (test / probe).exists()
            test.rmdir()
        except OSError:
            continue
        if ok:
            _sweep(parent)
            return parent
    return None


def _sweep(parent: Path) -> None:
    """Remove the groups of runners that are gone (SIGKILLed: their watchdog killed the
    processes; an empty group stays until removed), killing anything still in one."""
    for d in parent.iterdir():
        owner = d.name.split("-")[0]
        if d.is_dir() and owner.isdigit() and not Path(f"/proc/{owner}").exists():
            stale = Group.__new__(Group)
            stale.path = d
            stale.kill()


class Group:
    """One container's cgroup (``path`` None when cgroups are not available)."""

    def __init__(self) -> None:
        base = root()
        self.path: Path | None = None
        if base is not None:
            path = base / f"{os.getpid()}-{next(_counter)}"
            with contextlib.suppress(OSError):
                path.mkdir()
                self.path = path

    def join(self) -> None:  # pragma: no cover - runs in the child, before exec
        """Move the calling process into the group (its children follow)."""
        if self.path is not None:
            fd = os.open(self.path / "cgroup.procs", os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    def pids(self) -> list[int]:
        if self.path is None:
            return []
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self) -> None:
        """SIGKILL every process in the group (no new ones can start), then remove it."""
        if self.path is None:
            return
        kill_file = self.path / "cgroup.kill"
        if kill_file.exists():  # v2: the kernel kills them all, forks included
            with contextlib.suppress(OSError):
                kill_file.write_text("1")
        else:
            with contextlib.suppress(OSError):
                (self.path / "pids.max").write_text("0")  # v1: no fork succeeds from now on
        for _ in range(KILL_ROUNDS):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.002)
        for _ in range(KILL_ROUNDS):  # a killed process leaves the group when it is reaped
            try:
                self.path.rmdir()
                break
            except OSError:
                time.sleep(0.005)
