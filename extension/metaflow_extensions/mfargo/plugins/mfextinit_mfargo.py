"""Registers mfargo with Metaflow: its `argo-workflows` command group replaces core's
(an extension plugin with the same name wins) and its in-pod decorator is available
to the commands the generated YAML runs.
"""

CLIS_DESC = [("argo-workflows", "mfargo.metaflow_cli.argo_cli.cli")]
STEP_DECORATORS_DESC = [
    ("mfargo_internal", ".pod_hooks.MfargoInternalDecorator"),
    ("jobset", ".jobset_decorator.JobSetDecorator"),
    ("pod_spec", ".pod_spec_decorator.PodSpecDecorator"),
    ("gang_catch", ".gang_catch.GangCatchDecorator"),
]
# Metaflow's Deployer API (`Deployer(...).argo_workflows()`) drives mfargo's commands.
DEPLOYER_IMPL_PROVIDERS_DESC = [("argo-workflows", ".deployer.MfargoArgoWorkflowsDeployer")]

# A flow file whose import raises: one line for `argo-workflows` commands (cli_errors.py).
from .cli_errors import install  # noqa: E402

install()
