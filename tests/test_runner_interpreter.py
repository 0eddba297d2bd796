"""Pods' `python` is the interpreter that runs mfargo (or --python), not PATH's first."""
import os
import subprocess
import sys
from pathlib import Path

from mfargo.runner.cli import main

WHICH = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {name: which-python}
spec:
  entrypoint: main
  templates:
  - name: main
    container:
      image: python
      command: [python, -c, "import sys, yaml; print('EXE=' + sys.executable)"]
"""


def _exe_line(out: str) -> str:
    lines = [line for line in out.splitlines() if "EXE=" in line]
    assert len(lines) == 1, out
    return lines[0].split("EXE=", 1)[1].strip()


def test_unactivated_venv_mfargo_runs_pods_with_its_python(tmp_path):
    # `<venv>/bin/mfargo run` from a shell whose PATH lacks the venv: the pod's `python`
    # is still the venv's (yaml importable), not the system's.
    venv_bin = Path(sys.executable).parent
    wf = tmp_path / "wf.yaml"
    wf.write_text(WHICH)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = "/usr/bin:/bin"
    proc = subprocess.run([str(venv_bin / "mfargo"), "run", str(wf), "--work-dir", str(tmp_path / "w")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert Path(_exe_line(proc.stdout)).parent == venv_bin


def test_python_option_picks_the_pods_interpreter(tmp_path, capsys):
    # An interpreter whose directory has no `python` (like /usr/bin/python3): a shim dir
    # provides `python` -> that interpreter.
    elsewhere = tmp_path / "bin"
    elsewhere.mkdir()
    (elsewhere / "py3").symlink_to(os.path.realpath(sys.executable))
    wf = tmp_path / "wf.yaml"
    wf.write_text(WHICH.replace("import sys, yaml", "import sys"))
    assert main([str(wf), "--python", str(elsewhere / "py3"), "--work-dir", str(tmp_path / "w")]) == 0
    exe = _exe_line(capsys.readouterr().out)
    assert os.path.realpath(exe) == os.path.realpath(sys.executable)
    assert Path(exe).parent == tmp_path / "w" / "python-bin"


def test_bad_python_option_is_one_line(tmp_path, capsys):
    wf = tmp_path / "wf.yaml"
    wf.write_text(WHICH)
    assert main([str(wf), "--python", str(tmp_path / "nope"), "--work-dir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"mfargo run: --python {tmp_path / 'nope'}: not an executable file"]
