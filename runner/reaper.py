"""Pods die with the runner, even when the runner is SIGKILLed.

Each container runs in its own process group (so a deadline can kill all it
started), which also means a SIGKILL of the runner would leave those groups
running, adopted by init.  ``PR_SET_PDEATHSIG`` only reaches the direct child.  So
one small watchdog process per run, in its own session, reads the live process
groups from a pipe (``+pgid`` / ``-pgid`` lines); when the pipe closes without a
clean stop - the runner died, however - it SIGKILLs every group still listed.
"""
from __future__ import annotations

import contextlib
import subprocess
import sys

_WATCHDOG = (
    "import os, signal, sys\n"
    "live = set()\n"
    "for line in sys.stdin:\n"
    "    op, pgid = line[0], int(line[1:])\n"
    "    if op == '=':\n"
    "        sys.exit(0)\n"
    "    (live.add if op == '+' else live.discard)(pgid)\n"
    "for pgid in live:\n"
    "    try:\n"
    "        os.killpg(pgid, signal.SIGKILL)\n"
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

    def add(self, pgid: int) -> None:
        self._send(f"+{pgid}")

    def remove(self, pgid: int) -> None:
        self._send(f"-{pgid}")

    def close(self) -> None:
        """Clean stop: the runner has killed its pods itself."""
        self._send("=0")
        with contextlib.suppress(OSError, ValueError):
            self._proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)
