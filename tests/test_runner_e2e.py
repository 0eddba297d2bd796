"""Runner end to end: the checked-in example YAML runs with Metaflow on the loopback S3
server, and the Metaflow client finds the run under ``argo-<workflow name>``."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flowtools import EXAMPLES, clean_env, linear_flow
from test_e2e_support import compile_flow, tail
from mfargo.runner import events as ev
from mfargo.runner.api import run_workflow

READ_BACK = """
import json, sys
from metaflow import Run, namespace
namespace(None)
run = Run(sys.argv[1])
out = {"ok": run.successful, "steps": sorted(s.id for s in run)}
if "hello" in out["steps"]:
    out["message"] = run["hello"].task.data.message
if "join" in out["steps"]:
    out["ranks"] = run["join"].task.data.ranks
    out["train_tasks"] = len(list(run["train"]))
print(json.dumps(out))
"""


@pytest.fixture()
def mf_env(s3_server, tmp_path):
    s3_server.create_bucket("mfargo-examples")
    env = clean_env(home=tmp_path / "mfhome", HOME=str(tmp_path), USER="tester",
                    METAFLOW_DATASTORE_SYSROOT_LOCAL=str(tmp_path / "mflocal"), **s3_server.env())
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", os.defpath)
    env.pop("PYTHONPATH", None)
    return env


def _code_dir(tmp_path):
    code = tmp_path / "code"  # a copy: pods write .metaflow etc. into their working dir
    code.mkdir()
    for f in EXAMPLES.glob("*.py"):
        shutil.copy(f, code / f.name)
    return code


def _read_back(env, tmp_path, pathspec):
    read_env = dict(env, METAFLOW_DEFAULT_DATASTORE="s3", METAFLOW_DEFAULT_METADATA="local",
                    METAFLOW_DATASTORE_SYSROOT_S3="s3://mfargo-examples/metaflow")
    back = subprocess.run([sys.executable, "-c", READ_BACK, pathspec], cwd=tmp_path, env=read_env,
                          capture_output=True, text=True, timeout=120)
    assert back.returncode == 0, back.stderr[-3000:]
    return json.loads(back.stdout.strip().splitlines()[-1])


def test_hello_example_runs_with_metaflow(mf_env, tmp_path):
    events = []
    result = run_workflow(EXAMPLES / "hello.yaml", {"greeting": "bonjour"}, _code_dir(tmp_path), tmp_path / "work",
                          mf_env, 0.01, events.append, timeout=300)
    assert result.status == "Succeeded", result.message + "\n" + "\n".join(map(str, events[-30:]))
    assert any(e.kind == ev.LOG and e.message == "bonjour, world" for e in events)
    got = _read_back(mf_env, tmp_path, f"HelloFlow/{result.run_id}")
    assert got["ok"] is True and got["steps"] == ["end", "hello", "start"]
    assert got["message"] == "bonjour, world"


def test_distributed_training_example_runs_as_a_jobset(mf_env, tmp_path):
    events = []
    result = run_workflow(EXAMPLES / "distributed_training.yaml", {}, _code_dir(tmp_path), tmp_path / "work",
                          mf_env, 0.01, events.append, timeout=300)
    assert result.status == "Succeeded", result.message + "\n" + "\n".join(map(str, events[-30:]))
    [js] = result.jobsets.values()
    assert js["status"]["terminalState"] == "Completed"
    got = _read_back(mf_env, tmp_path, f"DistributedTrainingFlow/{result.run_id}")
    assert got["ok"] is True
    assert got["ranks"] == [0, 1, 2] and got["train_tasks"] == 3


@pytest.mark.parametrize("nodes", [1, 4])  # 3, the default, in the test above
def test_gang_size_decided_at_run_time(mf_env, tmp_path, nodes):
    """num_parallel comes from a Parameter: N=1 (no workers) and 4 complete."""
    result = run_workflow(EXAMPLES / "distributed_training.yaml", {"nodes": str(nodes)}, _code_dir(tmp_path),
                          tmp_path / "work", mf_env, 0.01, lambda e: None, timeout=300)
    assert result.status == "Succeeded", result.message
    got = _read_back(mf_env, tmp_path, f"DistributedTrainingFlow/{result.run_id}")
    assert got["ranks"] == list(range(nodes)) and got["train_tasks"] == nodes


READ_STEPS = """
import json, sys
from metaflow import Run, namespace
namespace(None)
run = Run(sys.argv[1])
print(json.dumps({s.id: sorted(t.id for t in s) for s in run} | {"_ok": run.successful,
      "_end": {k: repr(v.data) for k, v in run["end"].task.artifacts._asdict().items() if not k.startswith("_") and k != "name"}}))
"""


@pytest.mark.parametrize("example, steps", [
    ("branches", {"start": ["start"], "left": ["left"], "right": ["right"], "join": ["join"], "end": ["end"]}),
    ("switch", {"start": ["start"], "small": ["small"], "merge": ["merge"], "end": ["end"]}),
    ("nested_foreach", {"start": ["start"], "per_letter": ["per_letter-0", "per_letter-1"],
                        "per_number": ["per_number-0-0", "per_number-0-1", "per_number-0-2",
                                       "per_number-1-0", "per_number-1-1", "per_number-1-2"],
                        "join_numbers": ["join_numbers-0", "join_numbers-1"], "join_letters": ["join_letters"],
                        "end": ["end"]}),
])
def test_graph_shape_examples_run(mf_env, tmp_path, example, steps):
    result = run_workflow(EXAMPLES / ("%s.yaml" % example), {}, _code_dir(tmp_path), tmp_path / "work",
                          mf_env, 0.01, lambda e: None, timeout=300)
    assert result.status == "Succeeded", result.message
    read_env = dict(mf_env, METAFLOW_DEFAULT_DATASTORE="s3", METAFLOW_DEFAULT_METADATA="local",
                    METAFLOW_DATASTORE_SYSROOT_S3="s3://mfargo-examples/metaflow")
    flow = {"branches": "BranchesFlow", "switch": "SwitchFlow", "nested_foreach": "NestedForeachFlow"}[example]
    back = subprocess.run([sys.executable, "-c", READ_STEPS, "%s/%s" % (flow, result.run_id)], cwd=tmp_path,
                          env=read_env, capture_output=True, text=True, timeout=120)
    assert back.returncode == 0, back.stderr[-3000:]
    got = json.loads(back.stdout.strip().splitlines()[-1])
    assert got.pop("_ok") is True
    end = got.pop("_end")
    assert got == steps
    if example == "branches":
        assert end["total"] == "112"
    if example == "switch":
        assert end["result"] == "'small batch'"
    if example == "nested_foreach":
        assert end["pairs"] == repr(["a1", "a2", "a3", "b1", "b2", "b3"])


PULL_SECRET_FLOW = linear_flow("PullSecretFlow", 'self.greeting = "hi"', start_decorators=(
    '@kubernetes(image="registry.example/team/py:1", image_pull_secrets=["regcred"])'))


def test_pod_spec_patch_mfargo_writes_runs(mf_env, tmp_path):
    """@kubernetes(image_pull_secrets=...) is a podSpecPatch (Argo has no template field for
    it): the runner accepts it (a no-op: no image is pulled here) and the run succeeds."""
    compiled = compile_flow(tmp_path, mf_env, PULL_SECRET_FLOW)
    [start] = [t for t in compiled.doc["spec"]["templates"] if t["name"] == "start"]
    assert json.loads(start["podSpecPatch"]) == {"imagePullSecrets": [{"name": "regcred"}]}
    result, rec = compiled.run()
    assert result.status == "Succeeded", tail(result, rec)
    assert result.node("start").phase == "Succeeded"
