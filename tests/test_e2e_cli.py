"""E2E: `mfargo run` in a subprocess — -p strings, --run-id-file, --user NAME (the run
lands in namespace user:NAME); with no S3 endpoint configured, the local datastore by
default (read back with Metaflow's client as the printed line says) and --s3 (a SeaweedFS
for the run, its bucket from the YAML, --keep, --serve-s3 to read it back)."""
import json
import os
import select
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from mfargo.runner.slots import machine_cores
from flowtools import linear_flow
from test_e2e_support import compile_flow, mf_env, tail  # noqa: F401 - fixture

FLOW = linear_flow("CliFlow", """
self.got = [self.n, self.on, self.cfg]
self.user = current.username
self.s3_workers = os.environ.get("METAFLOW_S3_WORKER_COUNT")
""", imports="import os", members="""
n = Parameter("n", default=1, type=int)
on = Parameter("on", default=True, type=bool)
cfg = Parameter("cfg", default='{}', type=JSONType)
""")


def _cli(args, env, timeout=180):
    return subprocess.run([sys.executable, "-m", "mfargo.cli", "run", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_cli_user_namespace_params_and_run_id_file(mf_env, tmp_path):
    c = compile_flow(tmp_path, mf_env, FLOW)
    rid = tmp_path / "out" / "run-id"
    proc = _cli([c.yaml_path, "--code-dir", c.code_dir, "--user", "alice", "--run-id-file", rid,
                 "--backoff-scale", "0.01", "--timeout", "150", "-p", "n=5", "-p", "on=False",
                 "-p", 'cfg={"k": [1, 2]}'], mf_env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    run_id = rid.read_text().strip()
    assert run_id.startswith("argo-cliflow-")
    assert f"Metaflow run id: {run_id}" in proc.stdout and "Metaflow namespace: user:alice" in proc.stdout
    # an endpoint is configured: the YAML's S3 datastore there, no embedded server
    assert "local S3 at" not in proc.stdout and "local datastore" not in proc.stdout
    got = c.client("""
        namespace("user:alice")
        run = Run(sys.argv[1])
        data = run["start"].task.data
        out = {"ok": run.successful, "got": data.got, "user": data.user, "tags": sorted(run.system_tags),
               "s3_workers": data.s3_workers}
        namespace("user:argo-workflows")
        try:
            Run(sys.argv[1]); out["other_ns"] = True
        except Exception:
            out["other_ns"] = False
        print(json.dumps(out))
    """, "CliFlow/" + run_id, namespace_user="alice")
    assert got["ok"] is True and got["got"] == [5, False, {"k": [1, 2]}]
    assert got["user"] == "alice" and "user:alice" in got["tags"]
    assert got["other_ns"] is False
    # the test's S3 server is on loopback: one S3 worker process per core in the pods
    assert got["s3_workers"] == str(machine_cores())
    # a failing run still writes the run id file
    rid.unlink()
    proc = _cli([c.yaml_path, "--code-dir", c.code_dir, "--run-id-file", rid, "--quiet",
                 "-p", "n=notanint", "--timeout", "60"], mf_env)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert rid.read_text().strip().startswith("argo-cliflow-")


def _no_endpoint(mf_env):
    env = {k: v for k, v in mf_env.items() if not k.startswith(("METAFLOW_S3_", "AWS_ACCESS", "AWS_SECRET"))}
    env.pop("METAFLOW_DATASTORE_SYSROOT_LOCAL")
    return env


def test_cli_local_datastore_by_default_read_back_as_printed(mf_env, tmp_path):
    env = _no_endpoint(mf_env)
    c = compile_flow(tmp_path, env, FLOW)
    assert "METAFLOW_S3_ENDPOINT_URL" not in c.yaml_path.read_text()
    work = tmp_path / "work"
    proc = _cli([c.yaml_path, "--code-dir", c.code_dir, "--work-dir", work, "--backoff-scale", "0.01",
                 "--timeout", "150", "-p", "n=4"], env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "local S3 at" not in out and not (work / "s3").exists()
    assert f"local datastore in {work / 'metaflow-local'}" in out
    run_id = out.split("Metaflow run id: ", 1)[1].split()[0]
    # the artifacts are in Metaflow's local datastore, next to the local metadata
    assert (work / "metaflow-local" / ".metaflow" / "CliFlow" / "data").is_dir()
    [line] = out.split("Read this run with Metaflow's client:\n", 1)[1].splitlines()[:1]
    words = shlex.split(line)
    assignments = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith(("-", "from ")))
    assert assignments == {"METAFLOW_DEFAULT_DATASTORE": "local", "METAFLOW_DEFAULT_METADATA": "local",
                           "METAFLOW_DATASTORE_SYSROOT_LOCAL": str(work / "metaflow-local")}
    # the printed line works as printed ...
    shell_env = dict(env, PATH=os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")]))
    shown = subprocess.run(["bash", "-c", line.strip()], env=shell_env, capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
    assert shown.returncode == 0 and "MetaflowData" in shown.stdout, shown.stderr[-2000:]
    # ... and with its settings Metaflow's client reads every artifact and the task logs
    code = ("import json, sys\nfrom metaflow import Run, namespace\nnamespace(None)\nrun = Run(sys.argv[1])\n"
            "t = run['start'].task\nprint(json.dumps([run.successful, t.data.got, [s.id for s in run]]))")
    back = subprocess.run([sys.executable, "-c", code, "CliFlow/" + run_id], env=dict(env, **assignments),
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert back.returncode == 0, back.stderr[-2000:]
    assert json.loads(back.stdout.strip().splitlines()[-1]) == [True, [4, True, {}], ["end", "start"]]


def test_cli_s3_option_keep_and_serve(mf_env, tmp_path):
    env = _no_endpoint(mf_env)
    c = compile_flow(tmp_path, env, FLOW)
    assert "METAFLOW_S3_ENDPOINT_URL" not in c.yaml_path.read_text()
    work = tmp_path / "work"
    proc = _cli([c.yaml_path, "--code-dir", c.code_dir, "--work-dir", work, "--backoff-scale", "0.01",
                 "--timeout", "150", "-p", "n=3", "--s3"], env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "local S3 at http://127.0.0.1:" in out and "buckets: mfargo-test" in out
    assert "Read this run with Metaflow's client" in out and "--serve-s3 %s" % (work / "s3") in out
    assert "local datastore" not in out
    assert (work / "s3" / "filer").is_dir() and (work / "metaflow-local").is_dir()
    assert not (work / "metaflow-local" / ".metaflow" / "CliFlow" / "data").exists()  # artifacts: in S3
    # Run the printed hint as a shell would: eval "$(mfargo run --serve-s3 ...)" returns while
    # the server runs in the background; the second line reads the run back; the run's
    # objects are listed in the served S3.
    lines = out.split("Read this run with Metaflow's client:\n", 1)[1].splitlines()
    bucket, prefix = c.root[len("s3://"):].split("/", 1)
    count = ("import boto3, os; c = boto3.client('s3', endpoint_url=os.environ['METAFLOW_S3_ENDPOINT_URL']); "
             "print('KEYS=%%d' %% c.list_objects_v2(Bucket='%s', Prefix='%s/CliFlow/').get('KeyCount', 0))"
             % (bucket, prefix))
    script = "set -e\n%s\necho PID=$MFARGO_S3_SERVER_PID\n%s\npython -c %s\n" % (
        lines[0].strip(), lines[1].strip(), shlex.quote(count))
    shell_env = dict(env, PATH=os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")]))
    proc = subprocess.run(["bash", "-c", script], env=shell_env, capture_output=True, text=True, timeout=120)
    pid = int(proc.stdout.split("PID=", 1)[1].split()[0])
    try:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "MetaflowData" in proc.stdout
        assert int(proc.stdout.split("KEYS=", 1)[1].split()[0]) > 0
    finally:
        # kill $MFARGO_S3_SERVER_PID stops the server and its SeaweedFS processes
        pidfd = os.pidfd_open(pid)
        os.kill(pid, signal.SIGTERM)
        assert select.select([pidfd], [], [], 60)[0], "the S3 server did not stop"
        os.close(pidfd)
    assert _processes_mentioning(str(work / "s3")) == []


def _processes_mentioning(text):
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if text in (p / "cmdline").read_bytes().decode(errors="replace"):
                found.append(p.name)
        except OSError:
            pass  # exited meanwhile
    return found
