"""Metaflow's Deployer API over mfargo: `Deployer("flow.py").argo_workflows().create(...)`.

Registered as the `argo-workflows` deployer provider (mfextinit_mfargo), replacing core's.
Here in the extension, not with the front end in mfargo/metaflow_cli/, because Metaflow
imports every deployer provider whenever it starts, in pods too, and a pod's image needs
only Metaflow and this extension. The objects it returns live in the front end
(`mfargo.metaflow_cli.deployer_objects`), imported when the Deployer is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Dict, Optional, Type

from metaflow.runner.deployer_impl import DeployerImpl

if TYPE_CHECKING:
    from mfargo.metaflow_cli.deployer_objects import MfargoDeployedFlow


class MfargoArgoWorkflowsDeployer(DeployerImpl):
    """Deployer for Argo Workflows through mfargo.

    Parameters
    ----------
    name : str, optional, default None
        WorkflowTemplate name. The flow name is used instead if this option is not specified.
    """

    TYPE: ClassVar[Optional[str]] = "argo-workflows"

    def __init__(self, deployer_kwargs: Dict[str, str], **kwargs):
        self._deployer_kwargs = deployer_kwargs
        super().__init__(**kwargs)

    @property
    def deployer_kwargs(self) -> Dict[str, Any]:
        return self._deployer_kwargs

    @staticmethod
    def deployed_flow_type() -> Type["MfargoDeployedFlow"]:
        from mfargo.metaflow_cli.deployer_objects import MfargoDeployedFlow

        return MfargoDeployedFlow

    def create(self, **kwargs) -> "MfargoDeployedFlow":
        """Compile and deploy (or, with only_yaml/only_json/output_file, only compile).

        Takes `argo-workflows create`'s options as keyword arguments: authorize,
        generate_new_token, given_token, code_in_image, tags, user_namespace, max_workers,
        replace_other (replace what another flow, @project or branch deployed under this name), ...
        """
        from mfargo.metaflow_cli.deployer_objects import MfargoDeployedFlow

        return self._create(MfargoDeployedFlow, **kwargs)
