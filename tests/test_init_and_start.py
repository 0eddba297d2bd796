"""plugins/init_and_start.py: the start pod's `flow.py init` and `flow.py step start` in one
interpreter give what the two processes give (read back with Metaflow's datastore), and a
failing init stops before the step."""
import subprocess
import sys

from flowtools import clean_env, linear_flow, write_flow
from metaflow.datastore import FlowDataStore
from metaflow.plugins import DATASTORES
from mfargo.compiler.constants import INIT_AND_START_MODULE

FLOW = linear_flow("PairFlow", 'self.doubled = self.size * 2\nprint("start sees", self.size)',
                   members='size = Parameter("size", type=int, default=1)', imports='print("module code ran")')
TOP = ("--quiet", "--no-pylint", "--metadata", "local", "--datastore", "local")


def _run(tmp_path, run_id, **env):
    flow = write_flow(tmp_path, FLOW)
    init = [flow.name, *TOP, "init", "--run-id", run_id, "--task-id", "t-params"]
    step = [flow.name, *TOP, "step", "start", "--run-id", run_id, "--task-id", "1",
            "--input-paths", "%s/_parameters/t-params" % run_id]
    cmd = [sys.executable, "-m", INIT_AND_START_MODULE, str(len(init)), *init, *step]
    environment = clean_env(tmp_path, METAFLOW_DATASTORE_SYSROOT_LOCAL=str(tmp_path), **env)
    return subprocess.run(cmd, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120)


def _artifact(tmp_path, run_id, step, task_id, name):
    """An artifact as Metaflow's datastore reads it."""
    storage = [d for d in DATASTORES if d.TYPE == "local"][0]
    store = FlowDataStore("PairFlow", None, storage_impl=storage, ds_root=str(tmp_path / ".metaflow"))
    return store.get_task_datastore(run_id, step, task_id, mode="r")[name]


def test_init_then_start_step_in_one_interpreter(tmp_path):
    done = _run(tmp_path, "argo-r1", METAFLOW_INIT_SIZE="21")
    assert done.returncode == 0, done.stderr
    # The flow file ran once per command, as two `python flow.py` processes would run it.
    assert done.stdout.count("module code ran") == 2
    assert "start sees 21" in done.stdout
    assert _artifact(tmp_path, "argo-r1", "_parameters", "t-params", "size") == 21
    assert _artifact(tmp_path, "argo-r1", "start", "1", "doubled") == 42


def test_a_failing_init_stops_before_the_step(tmp_path):
    done = _run(tmp_path, "argo-r2", METAFLOW_INIT_SIZE="not-a-number")
    # As `python flow.py init` alone exits and says: click's usage error.
    alone = subprocess.run([sys.executable, "flow.py", *TOP, "init", "--run-id", "argo-r3", "--task-id", "t-params"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120,
                           env=clean_env(tmp_path, METAFLOW_DATASTORE_SYSROOT_LOCAL=str(tmp_path),
                                         METAFLOW_INIT_SIZE="not-a-number"))
    assert done.returncode == alone.returncode == 2
    assert done.stderr.splitlines()[-1] == alone.stderr.splitlines()[-1]
    assert "'--size': not-a-number" in done.stderr
    assert "start sees" not in done.stdout and done.stdout.count("module code ran") == 1


def test_a_wrong_count_is_a_usage_error():
    for argv in ([], ["x"], ["0", "a", "b"], ["3", "a", "b"]):
        done = subprocess.run([sys.executable, "-m", INIT_AND_START_MODULE, *argv],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and done.stderr.startswith("usage: "), (argv, done.stderr)
        assert len(done.stderr.splitlines()) == 1
