"""Helpers for tests: compile a flow file in a clean environment, parse the result."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import yaml

import yamlreview

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
# What the checked-in examples are compiled with (also used to regenerate them).
EXAMPLE_ARGS = ("--datastore=s3", "--datastore-root=s3://mfargo-examples/metaflow")
EXAMPLE_CREATE_ARGS = ("--code-in-image", "/app")


def example_args(flow: Path) -> tuple[str, ...]:
    """Create options for an example: the common ones, plus any in <example>.args."""
    extra = flow.with_suffix(".args")
    return EXAMPLE_CREATE_ARGS + (tuple(extra.read_text().split()) if extra.exists() else ())


def clean_env(home: Path | None = None, **extra: str) -> dict[str, str]:
    """The caller's env without Metaflow/AWS settings, so output depends on the flow alone."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("METAFLOW_", "AWS_", "MFARGO_"))}
    env["USER"] = "tester"
    # boto3 would otherwise ask the EC2 metadata address for a region (off-machine traffic).
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    env["METAFLOW_HOME"] = str(home or (REPO / "tests" / ".no-metaflow-home"))
    # mfargo's compile cache (safe: keyed by content) in a test directory, not the user's.
    env["MFARGO_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), "mfargo-test-cache")
    env.update(extra)
    return env


def compile_file(flow: Path, *create_args: str, top_args=EXAMPLE_ARGS, env=None, check=True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, flow.name, *top_args, "argo-workflows", "create", *create_args]
    if not any(a in ("--only-yaml", "--only-json", "--output-file") for a in create_args):
        cmd.append("--only-yaml")
    proc = subprocess.run(cmd, cwd=flow.parent, env=env or clean_env(), capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError("compile failed (%d):\n%s" % (proc.returncode, proc.stderr[-3000:]))
    if check and "--only-yaml" in cmd and "--graph" not in cmd:
        # Every flow a test compiles: YAML a reviewer can read (no anchors, no long lines).
        found = yamlreview.problems(proc.stdout)
        assert not found, "hard to review YAML from %s: %s" % (flow.name, "; ".join(found[:3]))
    if proc.returncode == 0 and not {"--check", "--graph"} & set(create_args):
        _record(cmd, flow.parent, proc.stdout)
    return proc


def _record(cmd: list[str], cwd: Path, stdout: str) -> None:
    """Hand what was compiled to Argo's and JobSet's own validation (engine_tools)."""
    from engine_tools import RECORDER
    from mfargo.base import versions

    test = os.environ.get("PYTEST_CURRENT_TEST", "?")
    targets = (_option(cmd, "--argo-version", versions.DEFAULT_ARGO_VERSION),
               versions.jobset_version(_option(cmd, "--jobset-version", versions.DEFAULT_JOBSET_VERSION)))
    if "--output-file" in cmd:
        out = cwd / cmd[cmd.index("--output-file") + 1]
        if out.is_file():
            RECORDER.record(out.read_text(), test, *targets)
    else:
        RECORDER.record(stdout, test, *targets)


def _option(cmd: list[str], name: str, default: str) -> str:
    return cmd[cmd.index(name) + 1] if name in cmd else default


def write_flow(tmp_path: Path, source: str, name: str = "flow.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def compile_source(tmp_path: Path, source: str, *create_args: str, **kw) -> list[dict]:
    proc = compile_file(write_flow(tmp_path, source), *create_args, **kw)
    return list(yaml.safe_load_all(proc.stdout))


def templates(doc: dict) -> dict[str, dict]:
    return {t["name"]: t for t in doc["spec"]["templates"]}


def dag_tasks(doc: dict, template: str) -> dict[str, dict]:
    return {t["name"]: t for t in templates(doc)[template]["dag"]["tasks"]}


def args(task: dict) -> dict[str, str]:
    return {p["name"]: p["value"] for p in task.get("arguments", {}).get("parameters", [])}


def script(template: dict) -> str:
    """A template's own script: a step's one arg (after templateDefaults' shared command),
    else the script of its own `bash -c` command."""
    container = template["container"]
    return container["args"][0] if container.get("args") else container["command"][2]


def pod_command(doc: dict, template: dict) -> list[str]:
    """What the pod runs: its own command, else templateDefaults' (as Argo merges it), + args."""
    container = template["container"]
    command = container.get("command") or doc["spec"]["templateDefaults"]["container"]["command"]
    return command + container.get("args", [])


def load_flow(path: Path, module_name: str | None = None):
    """Import a flow file in this process and make its FlowSpec as Metaflow's CLI would
    (decorators' external_init run), for tests that call the compiler directly."""
    import importlib.util

    from metaflow import FlowSpec

    name = module_name or "mfargo_test_flow_%s" % path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # Compiled from the source every time, never from __pycache__: CPython checks a .pyc by the
    # source's mtime in whole seconds and its size, so a test that rewrites a file within the same
    # second (same size) would get the first version again.
    exec(compile(path.read_bytes(), str(path), "exec"), module.__dict__)
    classes = list({id(v): v for v in vars(module).values()
                    if isinstance(v, type) and issubclass(v, FlowSpec) and v is not FlowSpec
                    and v.__module__ == name}.values())
    assert len(classes) == 1, "%s defines %d flows" % (path, len(classes))
    flow = classes[0](use_cli=False)
    _init_flow_decorators(flow)
    for step_function in flow:
        for deco in step_function.decorators:
            deco.external_init()
    return flow


def _init_flow_decorators(flow) -> None:
    """What Metaflow's CLI does for @schedule, @trigger, @project...: their options at defaults."""
    from metaflow.decorators import _init_flow_decorators as init

    decos = [d for ds in flow._flow_decorators.values() for d in ds]
    options = {name: spec.get("default") for d in decos for name, spec in d.options.items()}
    options = {name.replace("-", "_"): value for name, value in options.items()}
    init(flow, flow._graph, None, None, None, print, print, options)


def _indent(text: str, n: int) -> str:
    return textwrap.indent(textwrap.dedent(text).strip("\n"), " " * n)


def _above(text: str, n: int) -> str:
    """``text`` indented, as the lines above what follows it (nothing when empty)."""
    return _indent(text, n) + "\n" if text else ""


GANG_FLOW = '''
from metaflow import *
%(imports)s

%(flow_decorators)sclass %(name)s(FlowSpec):
%(members)s%(start_decorators)s    @step
    def start(self):
        self.next(self.train, num_parallel=%(num_parallel)s)

%(decorators)s
    @parallel
    @step
    def train(self):
%(body)s
        self.next(self.join)

    @step
    def join(self, inputs):
%(join_body)s        self.next(self.end)

    @step
    def end(self):
        pass

if __name__ == "__main__":
    %(name)s()
'''


def gang_flow(name: str, decorators: str = "", body: str = "pass", num_parallel: int | str = 2, imports: str = "",
              start_decorators: str = "", flow_decorators: str = "", members: str = "", join_body: str = "") -> str:
    """A flow's source: start (under ``start_decorators``) -> train (@parallel, ``num_parallel``
    pods: a count or an expression such as ``self.n``, with ``decorators`` above it and ``body``
    in it) -> join (``join_body`` in it) -> end, the class under ``flow_decorators``, with
    ``members`` (Parameters) at its top and ``imports`` after ``from metaflow import *``."""
    return GANG_FLOW % {"name": name, "imports": imports, "num_parallel": num_parallel,
                        "decorators": _indent(decorators, 4) if decorators else "", "body": _indent(body, 8),
                        "join_body": _above(join_body, 8), "members": _indent(members, 4) + "\n\n" if members else "",
                        "flow_decorators": _above(flow_decorators, 0), "start_decorators": _above(start_decorators, 4)}


LINEAR_FLOW = '''
from metaflow import *
%(imports)s

%(flow_decorators)sclass %(name)s(FlowSpec):
%(members)s%(start_decorators)s    @step
    def start(self):
%(body)s
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    %(name)s()
'''


def linear_flow(name: str, body: str = "pass", flow_decorators: str = "", members: str = "", imports: str = "",
                start_decorators: str = "") -> str:
    """A flow's source: start (under ``start_decorators``, ``body`` in it) -> end, the class under
    ``flow_decorators``, with ``members`` (a docstring, Parameters) at its top and ``imports``
    (module code: imports, helpers) after ``from metaflow import *``."""
    return LINEAR_FLOW % {"name": name, "body": _indent(body, 8), "imports": imports,
                          "flow_decorators": _above(flow_decorators, 0), "start_decorators": _above(start_decorators, 4),
                          "members": _indent(members, 4) + "\n\n" if members else ""}
