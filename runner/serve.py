"""``mfargo run --serve-s3 DIR``: serve a kept run's S3 data in the background.

Made for ``eval "$(mfargo run --serve-s3 DIR)"``: the command starts a server process
in its own session, prints ``export`` lines (endpoint, credentials and
``MFARGO_S3_SERVER_PID``) and returns, so ``$(...)`` ends while the server keeps
running.  ``kill $MFARGO_S3_SERVER_PID`` stops it and its SeaweedFS processes (they
are in one process group, killed also if the server process itself is SIGKILLed:
see :mod:`runner.s3server`).  The server's own output goes to ``DIR/serve.log``.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

PID_VAR = "MFARGO_S3_SERVER_PID"


def start_background(data_dir: Path) -> int:
    """Start the server process, print its env as ``export`` lines; 0 if it is serving."""
    if not (data_dir / "filer").is_dir():
        print(f"mfargo run: {data_dir} is not a kept S3 data directory (WORK/s3)", file=sys.stderr)
        return 2
    log_path = data_dir / "serve.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "mfargo.runner.serve", str(data_dir)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                start_new_session=True)
    line = proc.stdout.readline()
    proc.stdout.close()
    if not line:
        proc.wait()
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        print(f"mfargo run: the S3 server did not start ({tail[0]}; see {log_path})", file=sys.stderr)
        return 1
    info = json.loads(line)
    for k, v in info["env"].items():
        print(f"export {k}={shlex.quote(v)}")
    print(f"export {PID_VAR}={proc.pid}")
    print(f"# local S3 serving {data_dir} at {info['endpoint']} in the background; "
          f"stop it with: kill ${PID_VAR}", flush=True)
    return 0


def serve(data_dir: Path) -> None:
    """The background process: serve until SIGTERM/SIGINT/SIGHUP, then stop the servers."""
    from .s3server import S3Server

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    s3 = S3Server.start(data_dir=data_dir, keep=True)
    try:
        env = {k: v for k, v in s3.env().items() if k.startswith(("METAFLOW_", "AWS_")) and v}
        sys.stdout.write(json.dumps({"env": env, "endpoint": s3.endpoint_url}) + "\n")
        sys.stdout.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # the caller's $(...) ends when this pipe closes
        while not stop.wait(3600):
            pass
    finally:
        s3.stop()


if __name__ == "__main__":  # pragma: no cover - run by start_background
    serve(Path(sys.argv[1]))
