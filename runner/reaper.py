"""Pods die with the runner, even when the runner is SIGKILLed.

Each container runs in its own process group (so a deadline can kill all it
started), which also means a SIGKILL of the runner would leave those groups
running, adopted by init.  ``PR_SET_PDEATHSIG`` only reaches the direct child.  So
one small watchdog process per run, in its own session, reads the live process
groups and container cgroups (``runner.podgroup``) from a pipe (``+pgid`` / ``-pgid``,
``+/cgroup/dir`` lines); when the pipe closes without a clean stop - the runner died,
however - it SIGKILLs every group still listed and every process in every cgroup.
"""
from __future__ import annotations

import contextlib
import subprocess
import sys

_WATCHDOG = (
    "import os, signal, sys\n"
    "live = set()\n"
    "for line in sys.stdin:\n"
    "    op, what = line[0], line[1:].strip()\n"
    "    if op == '=':\n"
    "        sys.exit(0)\n"
    "    (live.add if op == '+' else live.discard)(what)\n"
    "for what in live:\n"
    "    try:\n"
    "        if not what.startswith('/'):\n"
    "            os.killpg(int(what), signal.SIGKILL)\n"
    "            continue\n"
    "        for f, v in (('pids.max', '0'), ('cgroup.kill', '1')):\n"
    "            if os.path.exists(os.path.join(what, f)):\n"
    "                open(os.path.join(what, f), 'w').write(v)\n"
    "        for _ in range(100):\n"
    "            pids = open(os.path.join(what, 'cgroup.procs')).read().split()\n"
    "            for pid in pids:\n"
    "                try:\n"
    "                    os.kill(int(pid), signal.SIGKILL)\n"
    "                except OSError:\n"
    "                    pass\n"
    "            if not pids:\n"
    "                break\n"
    "    except OSError:\n"
    "        pass\n"
)


class Reaper:
    """The run's watchdog: told about every container process group."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHDOG], stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, start_new_session=True, text=True)

    def _send(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()

    def add(self, pgid: int | str) -> None:
        """A process group (int) or a container's cgroup directory (its path)."""
        self._send(f"+{pgid}")

    def remove(self, pgid: int | str) -> None:
        self._send(f"-{pgid}")

    def close(self) -> None:
        """Clean stop: the runner has killed its pods itself."""
        self._send("=0")
        with contextlib.suppress(OSError, ValueError):
            self._proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)
