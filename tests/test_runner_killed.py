"""Runner killed by SIGKILL: its pods die too; its work directory is cleaned next run."""
import os
import select
import subprocess
import sys

from runner_tools import pod_env

SLEEPER = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {name: sleeper}
spec:
  entrypoint: main
  templates:
  - name: main
    container:
      image: bash
      command: [bash, -c, "sleep 300 & echo CHILD=$!; wait"]
"""

QUICK = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {name: quick}
spec:
  entrypoint: main
  templates:
  - name: main
    container: {image: bash, command: [bash, -c, "true"]}
"""


def test_sigkilled_runner_takes_its_pods_along_and_leaves_no_work_dir(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = pod_env({"TMPDIR": str(tmp)})
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    (tmp_path / "sleeper.yaml").write_text(SLEEPER)
    (tmp_path / "quick.yaml").write_text(QUICK)
    runner = subprocess.Popen([sys.executable, "-m", "mfargo.runner.cli", str(tmp_path / "sleeper.yaml")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        for line in runner.stdout:
            if "CHILD=" in line:
                child = int(line.split("CHILD=", 1)[1])
                break
        else:
            raise AssertionError("the pod never started")
        # A grandchild of the runner (bash's background sleep), in the pod's process group.
        pidfd = os.pidfd_open(child)
        runner.kill()
        runner.wait()
        readable, _, _ = select.select([pidfd], [], [], 30)
        assert readable, f"pod process {child} outlived the SIGKILLed runner"
        os.close(pidfd)
    finally:
        if runner.poll() is None:
            runner.kill()
    (stale,) = list(tmp.glob("mfargo-run-*"))
    second = subprocess.run([sys.executable, "-m", "mfargo.runner.cli", str(tmp_path / "quick.yaml")],
                            capture_output=True, text=True, env=env, timeout=120)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"mfargo run: removed stale work directory {stale} (its runner, pid {runner.pid}, was killed)" \
        in second.stderr.splitlines()
    assert not stale.exists()
    assert list(tmp.glob("mfargo-run-*")) == []  # the second run cleaned up after itself too
