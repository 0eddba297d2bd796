"""Metaflow's environment plugins (--environment=pypi|conda|uv, @pypi, @conda): each pod runs
the bootstrap commands and the interpreter the plugin gives core's Argo compiler
(metaflow/plugins/pypi/conda_environment.py `bootstrap_commands`/`executable`,
metaflow/plugins/uv/uv_environment.py), in that order, before `init` and the step. Compiled
offline (no conda channel is reachable here, so the pods' bootstrap cannot run)."""
import re
import shlex
import subprocess

import yaml

from flowtools import clean_env, compile_file, linear_flow, script, templates, write_flow
from mfargo.compiler.constants import INIT_AND_START_MODULE, TASK_LOGS_MODULE

PYPI_FLOW = linear_flow("EnvFlow", start_decorators='@pypi(packages={"six": "1.16.0"}, python="3.11.7")')

PLAIN_FLOW = linear_flow("EnvFlow")

# conda_environment.py:492-511, after Metaflow's `bash -c "..."` quoting is undone, as pods run them.
PYPI_BOOTSTRAP = [
    "echo 'Bootstrapping virtual environment...'",
    "flush_mflogs",
    "DISABLE_TRACING=True python -m metaflow.plugins.pypi.bootstrap EnvFlow {id} s3",
    "echo 'Environment bootstrapped.'",
    "flush_mflogs",
    "export PATH=$PATH:$(pwd)/micromamba/bin",
    "export MF_ARCH=$(case $(uname)/$(uname -m) in Darwin/arm64)echo osx-arm64;;Darwin/*)echo osx-64;;"
    "Linux/aarch64)echo linux-aarch64;;*)echo linux-64;;esac)",
]
UV_BOOTSTRAP = [  # uv_environment.py bootstrap_commands
    "echo 'Bootstrapping uv project...'",
    "flush_mflogs",
    "DISABLE_TRACING=True python -m metaflow.plugins.uv.bootstrap s3",
    "echo 'uv project bootstrapped.'",
    "flush_mflogs",
    "export PATH=$PATH:$(pwd)/uv_install",
]


def _scripts(tmp_path, source: str, environment: str) -> dict[str, list[str]]:
    """Each step's pod script as the pod sees it (Kubernetes turns `$$` into `$`), line by line."""
    env = clean_env(METAFLOW_DATASTORE_SYSROOT_S3="s3://bucket/metaflow")  # conda's package root needs it
    out_file = tmp_path / "wf.yaml"  # not stdout: Metaflow's @pypi may print "Creating local datastore" there
    compile_file(write_flow(tmp_path, source), "--code-in-image", "/app", "--output-file", str(out_file),
                 top_args=("--environment=%s" % environment, "--datastore=s3"), env=env)
    [doc] = yaml.safe_load_all(out_file.read_text())
    out = {}
    for name in ("start", "end"):
        text = script(templates(doc)[name]).replace("$$", "$")
        subprocess.run(["bash", "-n", "-c", text], check=True)  # valid bash
        out[name] = text.splitlines()
    return out


def _block(lines: list[str]) -> list[str]:
    """The lines between `{` and `} > >(tee ...)`: the bootstrap, its output in the task's logs."""
    start = lines.index("{")
    end = next(i for i, line in enumerate(lines) if line.startswith("} > >(python -m metaflow.mflog.tee task"))
    assert lines[start - 1] == "flush_mflogs(){ python -m metaflow.mflog.save_logs; }"
    return lines[start + 1:end]


def _runner(line: str) -> str:
    """What runs the Metaflow command on a task_logs line: the words before the flow file
    (without init_and_start's module and count, when init and the step share it)."""
    words = line.split(" flow.py ")[0].split()
    prefix = ["exec"] if words[0] == "exec" else []
    assert words[len(prefix):len(prefix) + 3] == ["python", "-m", TASK_LOGS_MODULE]
    words = words[len(prefix) + 3:]
    if words[-3:-1] == ["-m", INIT_AND_START_MODULE]:
        words = words[:-3]
    return " ".join(words)


def test_pypi_steps_bootstrap_their_environment_and_run_its_python(tmp_path):
    scripts = _scripts(tmp_path, PYPI_FLOW, "pypi")
    start = scripts["start"]
    [env_id] = set(re.findall(r"metaflow\.plugins\.pypi\.bootstrap EnvFlow (\w+) s3", "\n".join(start)))
    assert _block(start) == [c.format(id=env_id) for c in PYPI_BOOTSTRAP]
    init = next(line for line in start if " init " in line)
    step = start[-1]
    assert _runner(init) == "python"  # core: environment.executable("_parameters")
    assert _runner(step) == "$MF_ARCH/%s/bin/python -s" % env_id
    assert start.index("{") < start.index(init)  # bootstrap first, as core orders it
    # `end` has no @pypi but the pypi environment still builds it one (Metaflow's own pinned libs).
    [end_id] = set(re.findall(r"pypi\.bootstrap EnvFlow (\w+) s3", "\n".join(scripts["end"])))
    assert end_id != env_id and _runner(scripts["end"][-1]) == "$MF_ARCH/%s/bin/python -s" % end_id


def test_uv_environment_bootstraps_uv_and_runs_through_it(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "0"\n')
    (tmp_path / "uv.lock").write_text("version = 1\n")
    scripts = _scripts(tmp_path, PLAIN_FLOW,
                       "uv")
    for lines in scripts.values():
        assert _block(lines) == UV_BOOTSTRAP
        assert _runner(lines[-1]) == "uv run --no-sync python"
    assert _runner(next(line for line in scripts["start"] if " init " in line)) == "uv run --no-sync python"


def test_local_environment_has_no_bootstrap(tmp_path):
    scripts = _scripts(tmp_path, PLAIN_FLOW,
                       "local")
    for lines in scripts.values():
        assert "{" not in lines and not any("flush_mflogs" in line for line in lines)
        assert _runner(lines[-1]) == "python"
    # One interpreter runs init, then the start step: the count ends init's words.
    words = shlex.split(scripts["start"][-1])
    at = words.index(INIT_AND_START_MODULE)
    count = int(words[at + 1])
    init, step = words[at + 2:at + 2 + count], words[at + 2 + count:]
    assert init[0] == step[0] == "flow.py" and init[init.index("--task-id") + 1] == "t-params" and "init" in init
    assert step[step.index("step") + 1] == "start"


UV_FLOW = linear_flow("UvFlow", """
import sys, six
print("six %s from %s" % (six.__version__, sys.prefix))
self.version = six.__version__
""")

PYPROJECT = """[project]
name = "uvflow"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = ["six==1.16.0"]
"""


def test_uv_environment_runs_end_to_end(s3_server, tmp_path):
    """--environment=uv, code package mode: each pod syncs the project's uv.lock from the
    package index (uv from PyPI, on the pods' PATH) and runs the step in that venv."""
    import shutil
    import sys
    from pathlib import Path

    from test_e2e_support import compile_flow, mf_env_for, tail

    assert shutil.which("uv", path=str(Path(sys.executable).parent)), "the test extra installs uv"
    code = tmp_path / "code"
    code.mkdir()
    (code / "pyproject.toml").write_text(PYPROJECT)
    subprocess.run([str(Path(sys.executable).parent / "uv"), "lock", "--quiet"], cwd=code, check=True, timeout=300)
    env = dict(mf_env_for(s3_server, tmp_path), METAFLOW_DEFAULT_ENVIRONMENT="uv")  # --environment=uv
    env.pop("VIRTUAL_ENV", None)  # a pod has none: uv must find the project's own .venv
    c = compile_flow(tmp_path, env, UV_FLOW, code_in_image=False)
    result, rec = c.run(timeout=600)
    assert result.status == "Succeeded", tail(result, rec)
    got = c.client("""
        run = Run(sys.argv[1])
        start = run["start"].task
        print(json.dumps({"version": start.data.version, "stdout": start.stdout}))
    """, "UvFlow/" + result.run_id)
    assert got["version"] == "1.16.0"
    [line] = [ln for ln in got["stdout"].splitlines() if ln.startswith("six ")]
    assert line.startswith("six 1.16.0 from ") and line.endswith("/.venv")  # the uv project's venv
    assert "Bootstrapping uv project..." in got["stdout"]  # the bootstrap's output is in the task's logs
