"""Running commands and long-lived parts: each with its own log, each stopped by its own pid.

A part that fails raises PartFailed, whose one-line message names the part and its log; the
caller then stops everything it started. Daemons are recorded as `<pid> <start time>` in
state/pids/<part>.pid, so `down` (another process, later) stops exactly them and never a
process that reused the pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import layout


class PartFailed(RuntimeError):
    """One cluster part could not be built or started."""

    def __init__(self, part: str, why: str, log: Path | None = None):
        self.part = part
        where = f"; log: {log}" if log else ""
        super().__init__(f"cluster: {part} failed: {why}{where}")


def say(msg: str) -> None:
    """Progress goes to stderr: stdout carries only `export` lines."""
    print(f"[cluster] {msg}", file=sys.stderr, flush=True)


def run(part: str, argv: list[str], *, input: bytes | None = None, env: dict | None = None,
        timeout: float = 600, cwd: Path | None = None, hide: str = "") -> str:
    """Run argv to completion, appending its output to the part's log; stdout text on success.
    `hide`: a secret in argv, written to the log as ***."""
    log = layout.log(part)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        shown = " ".join(map(str, argv))
        f.write(("$ " + (shown.replace(hide, "***") if hide else shown) + "\n").encode())
        f.flush()
        try:
            p = subprocess.run([str(a) for a in argv], input=input, stdout=subprocess.PIPE, stderr=f,
                               env=env, timeout=timeout, cwd=cwd)
        except subprocess.TimeoutExpired:
            raise PartFailed(part, f"{argv[0]} did not finish in {timeout:.0f} s", log) from None
        except FileNotFoundError:
            raise PartFailed(part, f"{argv[0]} not found", log) from None
        f.write(p.stdout[-4000:])
    if p.returncode != 0:
        raise PartFailed(part, f"{Path(str(argv[0])).name} exited with {p.returncode}", log)
    return p.stdout.decode(errors="replace")


def _pidfile(part: str) -> Path:
    return layout.state("pids", f"{part}.pid")


def _start_time(pid: int) -> str | None:
    """The kernel's start time of pid (field 22 of /proc/pid/stat), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def start(part: str, argv: list[str], *, env: dict | None = None, netns: str | None = None,
          cwd: Path | None = None) -> int:
    """Start a daemon in a session of its own (it outlives `up`), logging to the part's log."""
    log = layout.log(part)
    log.parent.mkdir(parents=True, exist_ok=True)
    if netns:  # `ip netns exec` execs the command: the pid stays the daemon's
        argv = ["ip", "netns", "exec", netns, *argv]
    with open(log, "ab") as f:
        f.write(("$ " + " ".join(map(str, argv)) + "\n").encode())
        f.flush()
        try:
            p = subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=f, stderr=f,
                                 env=env, cwd=cwd, start_new_session=True)
        except OSError as e:
            raise PartFailed(part, f"cannot start {argv[0]}: {e}", log) from None
    pf = _pidfile(part)
    pf.parent.mkdir(parents=True, exist_ok=True)
    pf.write_text(f"{p.pid} {_start_time(p.pid)}\n")
    with open(layout.state("pids", "order"), "a") as f:
        f.write(part + "\n")
    return p.pid


def alive(part: str) -> bool:
    """Whether the daemon recorded for part is still the same running process."""
    try:
        pid, started = _pidfile(part).read_text().split()
    except (OSError, ValueError):
        return False
    state = _stat_state(int(pid))
    return _start_time(int(pid)) == started and state not in (None, "Z")


def _stat_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def wait_ready(part: str, ready, timeout: float, what: str) -> None:
    """Poll ready() until true; fail naming the part and its log if it dies or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        if not alive(part):
            raise PartFailed(part, f"exited before {what}", layout.log(part))
        try:
            if ready():
                return
        except Exception:  # noqa: BLE001 - not ready yet, whatever the reason
            pass
        if time.monotonic() > deadline:
            raise PartFailed(part, f"not ready within {timeout:.0f} s ({what})", layout.log(part))
        time.sleep(0.2)


def started_parts() -> list[str]:
    try:
        return [p for p in layout.state("pids", "order").read_text().split() if p]
    except OSError:
        return []


def stop(part: str, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after grace seconds (the workflow-controller ignores SIGTERM)."""
    pf = _pidfile(part)
    try:
        pid_s, started = pf.read_text().split()
    except (OSError, ValueError):
        return
    pid = int(pid_s)
    if _start_time(pid) == started:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
            end = time.monotonic() + wait
            while _start_time(pid) == started and _stat_state(pid) != "Z" and time.monotonic() < end:
                time.sleep(0.05)
            if _start_time(pid) != started or _stat_state(pid) == "Z":
                break
    pf.unlink(missing_ok=True)


def unmount_under(*roots: Path) -> None:
    """Lazily unmount every mount point below roots, deepest first (pod volumes, rootfs, /proc)."""
    prefixes = tuple(str(r).rstrip("/") + "/" for r in roots)
    with open("/proc/self/mounts") as f:
        points = [line.split()[1].encode().decode("unicode_escape") for line in f]
    for point in sorted((p for p in points if p.startswith(prefixes)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)
