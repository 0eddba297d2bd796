"""Shared helpers of the test_e2e_* files (no tests here): write a flow, compile it the
way a user would (``python flow.py --datastore=s3 ... argo-workflows create``), run
the YAML with the local runner against the session's loopback S3 server, and read
the run back with Metaflow's client in a clean subprocess."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from flowtools import clean_env
from mfargo.runner.api import RunResult, run_workflow
from runner_tools import Recorder

BUCKET = "mfargo-test"


@dataclass
class Compiled:
    yaml_path: Path
    code_dir: Path
    root: str  # s3://mfargo-test/<unique>
    env: dict
    tmp: Path

    @property
    def doc(self) -> dict:
        return yaml.safe_load(self.yaml_path.read_text())

    def run(self, params: dict | None = None, timeout: float = 120, **kw) -> tuple[RunResult, Recorder]:
        rec = Recorder()
        work = self.tmp / ("work-%s" % uuid.uuid4().hex[:6])
        result = run_workflow(self.yaml_path, params or {}, kw.pop("code_dir", self.code_dir), work,
                              kw.pop("env", self.env), kw.pop("backoff_scale", 0.01), rec, timeout=timeout,
                              kill_grace=kw.pop("kill_grace", 1.0), **kw)
        return result, rec

    def client(self, script: str, *args: str, namespace_user: str | None = None) -> dict:
        """Run ``script`` (which prints one JSON line last) with Metaflow's client pointed
        at this flow's datastore root and the pods' local metadata."""
        read_env = dict(self.env, METAFLOW_DEFAULT_DATASTORE="s3", METAFLOW_DEFAULT_METADATA="local",
                        METAFLOW_DATASTORE_SYSROOT_S3=self.root)
        pre = "import json, sys\nfrom metaflow import *\n"
        pre += "namespace(None)\n" if namespace_user is None else ""
        back = subprocess.run([sys.executable, "-c", pre + textwrap.dedent(script), *args], cwd=self.tmp,
                              env=read_env, capture_output=True, text=True, timeout=120)
        assert back.returncode == 0, back.stderr[-3000:]
        return json.loads(back.stdout.strip().splitlines()[-1])


def tail(result: RunResult, rec: Recorder, n: int = 40) -> str:
    return "%s: %s\n%s" % (result.status, result.message, "\n".join(rec.lines()[-n:]))


def mf_env_for(s3_server, tmp_path: Path) -> dict:
    env = clean_env(home=tmp_path / "mfhome", HOME=str(tmp_path), USER="tester",
                    METAFLOW_DATASTORE_SYSROOT_LOCAL=str(tmp_path / "mflocal"), **s3_server.env())
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", os.defpath)
    env.pop("PYTHONPATH", None)
    return env


def compile_flow(tmp_path: Path, env: dict, source: str, *create_args: str, code_in_image: bool = True,
                 name: str = "flow.py", root: str | None = None) -> Compiled:
    """Write ``source`` to tmp_path/code/<name> and compile it; returns where things are.
    ``root`` shares a datastore root (and so local metadata) with another compile."""
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / name).write_text(textwrap.dedent(source))
    root = root or "s3://%s/%s" % (BUCKET, uuid.uuid4().hex[:12])
    out = tmp_path / (Path(name).stem + ".yaml")
    cmd = [sys.executable, name, "--datastore=s3", "--datastore-root=" + root, "argo-workflows", "create",
           *create_args]
    if code_in_image:
        cmd += ["--only-yaml", "--code-in-image", "/app"]
    else:
        cmd += ["--output-file", str(out)]
    proc = subprocess.run(cmd, cwd=code, env=env, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError("compile failed (%d):\n%s" % (proc.returncode, proc.stderr[-3000:]))
    if code_in_image:
        out.write_text(proc.stdout)
    return Compiled(out, code, root, env, tmp_path)


@pytest.fixture()
def mf_env(s3_server, tmp_path):
    return mf_env_for(s3_server, tmp_path)


def control_task_id(jobset: dict) -> str:
    """The control's task id a JobSet's pods are given (MF_PARALLEL_CONTROL_TASK_ID)."""
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}["MF_PARALLEL_CONTROL_TASK_ID"]
