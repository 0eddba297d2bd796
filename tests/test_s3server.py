"""The loopback S3 server (SeaweedFS): boto3 and Metaflow's S3 datastore work against
it, several can run at once, and no process or port escapes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from flowtools import clean_env
from mfargo.runner.s3server import S3Server, S3ServerError

BUCKET = "mfargo-test"
linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may never be reaped in a container)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _listen_addrs(pids: list[int]) -> set[str]:
    """Local hex addresses of the TCP sockets these processes listen on (from /proc/net)."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    addrs = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # 0A = LISTEN
                addrs.add(f[1].rsplit(":", 1)[0])
    return addrs


def _client(server: S3Server, secret: str | None = None):
    return boto3.session.Session().client(
        "s3", endpoint_url=server.endpoint_url, region_name="us-east-1",
        aws_access_key_id=server.access_key, aws_secret_access_key=secret or server.secret_key,
        config=Config(proxies={}))  # loopback, whatever HTTP_PROXY says


def test_boto3_put_get_and_credentials_enforced(s3_server):
    key = f"{uuid.uuid4().hex}/hello.txt"
    s3 = _client(s3_server)
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"hello")
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"hello"
    assert s3_server.endpoint_url.startswith("http://127.0.0.1:")
    with pytest.raises(ClientError, match="SignatureDoesNotMatch|AccessDenied|InvalidAccessKeyId"):
        _client(s3_server, secret="wrong").get_object(Bucket=BUCKET, Key=key)


FLOW = """
    import hashlib, os
    from metaflow import FlowSpec, step

    class TinyS3Flow(FlowSpec):
        @step
        def start(self):
            self.x = 41
            # Incompressible and over boto3's 8 MiB threshold: a multipart upload with checksums.
            self.blob = os.urandom(9 * 1024 * 1024)
            self.blob_sha = hashlib.sha256(self.blob).hexdigest()
            self.next(self.end)

        @step
        def end(self):
            self.y = self.x + 1

    if __name__ == "__main__":
        TinyS3Flow()
"""

READ_BACK = """
import hashlib, json
from metaflow import Flow, namespace
namespace(None)
run = Flow("TinyS3Flow").latest_run
blob = run["start"].task.data.blob
print(json.dumps({"ok": run.successful, "y": run.data.y, "sha": hashlib.sha256(blob).hexdigest(),
                  "want_sha": run.data.blob_sha, "id": run.id}))
"""


def test_metaflow_run_on_s3_datastore(s3_server, tmp_path):
    prefix = f"mf-{uuid.uuid4().hex[:12]}"
    root = f"s3://{BUCKET}/{prefix}/metaflow"
    (tmp_path / "flow.py").write_text(textwrap.dedent(FLOW))
    # HOME, METAFLOW_HOME and the local metadata root inside tmp_path: nothing touches ~.
    env = clean_env(home=tmp_path / "mfhome", HOME=str(tmp_path), USER="tester",
                    METAFLOW_DATASTORE_SYSROOT_LOCAL=str(tmp_path / "mflocal"), **s3_server.env())
    run = subprocess.run(
        [sys.executable, "flow.py", "--no-pylint", "--datastore=s3", f"--datastore-root={root}",
         "--metadata=local", "run"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    read_env = dict(env, METAFLOW_DEFAULT_DATASTORE="s3", METAFLOW_DATASTORE_SYSROOT_S3=root,
                    METAFLOW_DEFAULT_METADATA="local")
    back = subprocess.run([sys.executable, "-c", READ_BACK], cwd=tmp_path, env=read_env,
                          capture_output=True, text=True, timeout=120)
    assert back.returncode == 0, back.stderr[-3000:]
    got = json.loads(back.stdout.strip().splitlines()[-1])
    assert got["ok"] is True and got["y"] == 42 and got["sha"] == got["want_sha"]

    # The artifacts really are in the bucket, under this test's prefix.
    keys = [o["Key"] for o in _client(s3_server).list_objects_v2(
        Bucket=BUCKET, Prefix=f"{prefix}/metaflow/TinyS3Flow/")["Contents"]]
    assert any(k.startswith(f"{prefix}/metaflow/TinyS3Flow/data/") for k in keys)
    assert any(f"/{got['id']}/end/" in k for k in keys)


@linux_only
def test_servers_run_side_by_side_on_loopback_only(s3_server):
    started: list[S3Server] = []

    def start(_):
        started.append(S3Server.start())
        return started[-1]
    try:
        with ThreadPoolExecutor(2) as pool:  # two at once, next to the session's: ports must not clash
            a, b = pool.map(start, range(2))
        assert len({s3_server.endpoint_url, a.endpoint_url, b.endpoint_url}) == 3
        assert a.data_dir != b.data_dir
        for srv in (s3_server, a, b):
            assert len(srv.pids) == 4
            assert _listen_addrs(srv.pids) == {"0100007F"}, "listens beyond 127.0.0.1"
        a.create_bucket("side")
        b.create_bucket("side")
        _client(a).put_object(Bucket="side", Key="k", Body=b"from a")
        _client(b).put_object(Bucket="side", Key="k", Body=b"from b")
        a_pids, a_dir = a.pids, a.data_dir
        a.stop()
        assert not any(_running(p) for p in a_pids) and not a_dir.exists()
        assert _client(b).get_object(Bucket="side", Key="k")["Body"].read() == b"from b"
        with pytest.raises(ClientError):  # the session server never saw bucket "side"
            _client(s3_server).get_object(Bucket="side", Key="k")
    finally:
        for srv in started:
            srv.stop()


@linux_only
def test_no_orphans_when_the_owner_is_killed(tmp_path):
    """SIGKILL skips atexit; the watchdog still takes the weed processes down."""
    code = ("import json, os, signal, sys; from mfargo.runner.s3server import S3Server; "
            "s = S3Server.start(data_dir=sys.argv[1]); print(json.dumps(s.pids), flush=True); "
            "os.kill(os.getpid(), signal.SIGKILL)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s3data")],
                         capture_output=True, text=True, timeout=60)
    pids = json.loads(out.stdout)
    assert len(pids) == 4
    end = time.monotonic() + 10
    while any(_running(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(_running(p) for p in pids)


@linux_only
def test_startup_failure_is_clear_and_cleans_up(tmp_path):
    data = tmp_path / "s3data"
    with pytest.raises(S3ServerError, match=r"(?s)not ready at stage master: timed out.*weed\.log"):
        S3Server.start(data_dir=data, timeout=0.01)
    assert not data.exists()
    assert not [pid for pid in _pids() if _running(pid) and str(data).encode() in _cmdline(pid)]


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_port_taken_before_weed_binds_it_is_retried(monkeypatch):
    """The race between picking a free port and weed binding it costs a retry, not a failure."""
    import socket

    from mfargo.runner import s3server

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    pick, calls = s3server._free_ports, []

    def first_pick_has_a_busy_port(n, host):
        ports = pick(n, host)
        calls.append(ports)
        if len(calls) == 1:
            ports[2] = busy.getsockname()[1]  # the volume server's HTTP port
        return ports

    monkeypatch.setattr(s3server, "_free_ports", first_pick_has_a_busy_port)
    try:
        with S3Server.start() as srv:
            srv.create_bucket("retried")
            assert len(calls) == 2
    finally:
        busy.close()
