"""Core Metaflow's `argo-workflows create` options: every one is declared by mfargo's
`create` (compared with core's own click declarations, so a new core option fails this
test), each either works or is refused in one line; pods carry core's runtime name."""
import pytest
import yaml
from metaflow.plugins.argo import argo_workflows_cli as core_cli

from flowtools import compile_file, linear_flow, write_flow
from mfargo.metaflow_cli import argo_cli

FLOW = linear_flow("ParityFlow", members='"""A docstring."""')


def _flags(command) -> set[str]:
    return {flag for p in command.params for flag in (*p.opts, *p.secondary_opts)}


def test_every_core_create_option_is_declared_by_mfargo():
    core = _flags(core_cli.argo_workflows.commands["create"])
    ours = _flags(argo_cli.argo_workflows.commands["create"])
    assert core - ours == set()
    assert _flags(core_cli.argo_workflows) <= _flags(argo_cli.argo_workflows)  # the group's --name


def test_title_description_and_runtime_name(tmp_path):
    proc = compile_file(write_flow(tmp_path, FLOW), "--code-in-image", "/app", "--workflow-title", "Nightly ETL",
                        "--workflow-description", "Loads the warehouse", "--no-auto-emit-argo-events",
                        "--no-enable-heartbeat-daemon", "--no-enable-error-msg-capture", "--no-notify-on-error",
                        "--no-notify-on-success")
    [doc] = yaml.safe_load_all(proc.stdout)
    annotations = doc["metadata"]["annotations"]
    assert annotations["workflows.argoproj.io/title"] == "Nightly ETL"
    assert annotations["workflows.argoproj.io/description"] == "Loads the warehouse"
    env = {e["name"]: e.get("value") for e in doc["spec"]["templateDefaults"]["container"]["env"]}
    assert env["METAFLOW_RUNTIME_NAME"] == "argo-workflows"  # runs are tagged runtime:argo-workflows
    assert "USER" not in env  # the compiling user's login never enters the YAML


@pytest.mark.parametrize("option, reason", [
    (["--auto-emit-argo-events"], "which your Metaflow config does not set"),  # no webhook URL
    (["--enable-heartbeat-daemon"], "a run's heartbeat goes to Metaflow's metadata service"),
    (["--enable-error-msg-capture"], "no error-capture exit hook"),
    (["--notify-incident-io-api-key", "k3y"], "Kubernetes Secret"),
])
def test_refused_options_say_why_in_one_line_and_write_nothing(tmp_path, option, reason):
    out = tmp_path / "wf.yaml"
    proc = compile_file(write_flow(tmp_path, FLOW), "--code-in-image", "/app", "--output-file", str(out), *option,
                        check=False)
    assert proc.returncode == 1
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("mfargo:")]
    assert reason in line and "Traceback" not in proc.stderr
    assert not out.exists()
