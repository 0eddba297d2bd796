"""Pods' `python` is the interpreter that runs mfargo (or --python), not PATH's first."""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from mfargo.runner.cli import main
from flowtools import linear_flow
from test_e2e_support import compile_flow, mf_env, tail  # noqa: F401 - fixture
from venvtools import console_script, linked_venv, pip_install, source_copy

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


# ---------------------------------------------------------------- any interpreter, anywhere
# Each pod has a private /tmp: an interpreter living under /tmp must still find its whole
# prefix (pyvenv.cfg, site-packages) and its editable sources there.

WHERE = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {name: where-python}
spec:
  entrypoint: main
  templates:
  - name: main
    container:
      image: python
      command: [python, -c, "import sys, metaflow_extensions.mfargo as m; print('EXE=' + sys.executable);
        print('PREFIX=' + sys.prefix); print('EXT=' + list(m.__path__)[0])"]
"""


def _values(out: str) -> dict[str, str]:
    found = {}
    for line in out.splitlines():
        for key in ("EXE", "PREFIX", "EXT"):
            if f"{key}=" in line:
                found[key] = line.split(f"{key}=", 1)[1].strip()
    return found


def _bare_env() -> dict[str, str]:
    """A shell with no venv activated and nothing naming a temporary directory."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TMPDIR")
           and "/tmp" not in v}
    env["PATH"] = "/usr/bin:/bin"
    return env


def _run(cmd: list, cwd: Path) -> dict[str, str]:
    wf = cwd / "wf.yaml"
    wf.write_text(WHERE)
    proc = subprocess.run([*map(str, cmd), "run", str(wf), "--work-dir", str(cwd / "w")], capture_output=True,
                          text=True, env=_bare_env(), timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return _values(proc.stdout)


@pytest.mark.parametrize("layout", ["venv", "pipx"])
def test_a_venv_under_tmp_keeps_its_prefix_in_the_pods(layout):
    # venv: `/tmp/.../venv/bin/mfargo run`, not activated. pipx / uv tool: the venv under a
    # data directory, its `mfargo` linked from another bin directory.
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        root = Path(d)
        venv = root / ("venv" if layout == "venv" else "share/pipx/venvs/mfargo")
        python = linked_venv(venv)
        script = console_script(python, venv / "bin")
        if layout == "pipx":
            (root / "bin").mkdir()
            (root / "bin" / "mfargo").symlink_to(script)
            script = root / "bin" / "mfargo"
        got = _run([script], root)
        assert got["PREFIX"] == str(venv) and got["EXE"] == str(python)


def test_python_option_naming_a_venv_under_tmp():
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        python = linked_venv(Path(d) / "venv")
        wf = Path(d) / "wf.yaml"
        wf.write_text(WHERE)
        proc = subprocess.run([sys.executable, "-m", "mfargo.cli", "run", str(wf), "--python", str(python),
                               "--work-dir", str(Path(d) / "w")], capture_output=True, text=True,
                              env=_bare_env(), timeout=120)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        got = _values(proc.stdout)
        assert got["PREFIX"] == str(Path(d) / "venv") and got["EXE"] == str(python)


def test_python_option_that_cannot_start_is_one_line(tmp_path, capsys):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'no stdlib here' >&2\nexit 3\n")
    broken.chmod(0o755)
    wf = tmp_path / "wf.yaml"
    wf.write_text(WHICH)
    assert main([str(wf), "--python", str(broken), "--work-dir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"mfargo run: --python {broken}: cannot run it (no stdlib here)"]


def test_an_editable_install_whose_source_is_under_tmp():
    # A setuptools editable install maps its packages to the source tree through a finder,
    # not sys.path: the pods must still see that tree.
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        src = source_copy(Path(d) / "src")
        python = linked_venv(Path(d) / "venv", link="path")
        pip_install(python, src, editable=True)
        got = _run([python.parent / "mfargo"], Path(d))
        assert got["EXT"].startswith(str(src / "extension") + "/") and got["PREFIX"] == str(Path(d) / "venv")


# A code directory holding its own `metaflow_extensions` (an organisation's extensions shipped
# with the flow; Metaflow's own test suite does this). The pod runs the flow in the code
# directory's container path (/app); Metaflow refuses the same package seen at two paths,
# so PYTHONPATH names the code directory as /app, also when the caller's PYTHONPATH names it.
EXT_FLOW = linear_flow("ExtFlow", "from metaflow import metaflow_config\n"
                                "self.greeting = metaflow_config.MYORG_GREETING")


def test_a_code_dir_with_its_own_metaflow_extensions(mf_env, tmp_path):
    config = tmp_path / "code" / "metaflow_extensions" / "myorg" / "config"
    config.mkdir(parents=True)
    (config / "mfextinit_myorg.py").write_text('MYORG_GREETING = "from the code directory"\n')
    c = compile_flow(tmp_path, mf_env, EXT_FLOW)
    for caller_pythonpath in (None, str(c.code_dir)):
        env = dict(mf_env, **({"PYTHONPATH": caller_pythonpath} if caller_pythonpath else {}))
        result, rec = c.run(env=env, timeout=150)
        assert result.succeeded, tail(result, rec)
        got = c.client("print(json.dumps(Run(sys.argv[1])['start'].task.data.greeting))", "ExtFlow/" + result.run_id)
        assert got == "from the code directory"
