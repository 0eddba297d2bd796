"""The objects mfargo's Deployer returns (`deployer.py` imports this lazily: Metaflow
builds its Deployer class from the provider list, so the provider module must not import
`metaflow.runner.deployer` itself).

Like core, every action that changes something drives the `argo-workflows` CLI commands in a subprocess
(`create`, `trigger`, `terminate`, `suspend`, `unsuspend`, `delete`), reading back the
attribute file those commands write; so does `list_runs` (`list-runs`: one way to find and
order runs, whoever asks); the other read-only queries (status, production token,
from_deployment, list_deployed_flows) use mfargo's cluster client directly.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from typing import Any, ClassVar, Dict, List, Optional

from metaflow.runner.deployer import DeployedFlow, TriggeredRun, generate_fake_flow_file_contents
from metaflow.runner.utils import get_lower_level_group, handle_timeout, temporary_fifo

from mfargo.compiler.constants import Label


def _cluster():
    from metaflow.metaflow_config import KUBERNETES_NAMESPACE

    from mfargo.cluster import connect

    return connect(KUBERNETES_NAMESPACE or "default")


def _run_cli(deployer, command_name: str, attribute_file: bool = False, **kwargs):
    """Run `python flow.py ... argo-workflows <command_name> ...`; returns (returncode, attribute file text)."""
    group = get_lower_level_group(deployer.api, deployer.top_level_kwargs, deployer.TYPE, deployer.deployer_kwargs)
    if not attribute_file:
        command = getattr(group, command_name)(**kwargs)
        pid = deployer.spm.run_command([sys.executable, *command], env=deployer.env_vars, cwd=deployer.cwd,
                                       show_output=deployer.show_output)
        command_obj = deployer.spm.get(pid)
        command_obj.sync_wait()
        return command_obj.process.returncode, None
    with temporary_fifo() as (path, fd):
        command = getattr(group, command_name)(deployer_attribute_file=path, **kwargs)
        pid = deployer.spm.run_command([sys.executable, *command], env=deployer.env_vars, cwd=deployer.cwd,
                                       show_output=deployer.show_output)
        command_obj = deployer.spm.get(pid)
        content = handle_timeout(fd, command_obj, deployer.file_read_timeout)
        command_obj.sync_wait()
        return command_obj.process.returncode, content


class MfargoTriggeredRun(TriggeredRun):
    """A run started on Argo Workflows (run id `argo-<Workflow name>`)."""

    def _run(self, verb: str, **kwargs) -> bool:
        _, run_id = self.pathspec.split("/")
        code, _ = _run_cli(self.deployer, verb, run_id=run_id, **kwargs)
        return code == 0

    def suspend(self, **kwargs) -> bool:
        """Suspend the run (`authorize=` a production token if needed); True on success."""
        return self._run("suspend", **kwargs)

    def unsuspend(self, **kwargs) -> bool:
        """Resume the suspended run; True on success."""
        return self._run("unsuspend", **kwargs)

    def terminate(self, **kwargs) -> bool:
        """Terminate the run; True on success."""
        return self._run("terminate", **kwargs)

    @property
    def status(self) -> Optional[str]:
        """Argo's phase as Metaflow reports it (Pending, Running, Succeeded, Failed), None if unknown."""
        from mfargo.cluster import ClusterError

        from mfargo.deploy import run_status

        _, run_id = self.pathspec.split("/")
        try:
            wf = _cluster().get_workflow(run_id[len("argo-"):])
        except ClusterError:
            return None
        if wf is None:
            return None
        phase = (wf.get("status") or {}).get("phase")
        return run_status(phase, phase == "Running" and self.run is not None)

    @property
    def is_running(self) -> bool:
        return self.status in ("Pending", "Running")

    def wait_for_completion(self, check_interval: int = 5, timeout: Optional[int] = None):
        """Wait until the run is neither Pending nor Running; TimeoutError after ``timeout`` seconds."""
        start = time.time()
        while self.is_running:
            if timeout is not None and time.time() - start > timeout:
                raise TimeoutError("Workflow did not complete within specified timeout.")
            time.sleep(check_interval)


class MfargoDeployedFlow(DeployedFlow):
    """A WorkflowTemplate deployed by mfargo."""

    TYPE: ClassVar[Optional[str]] = "argo-workflows"

    @property
    def workflow_template(self) -> Optional[dict]:
        """The compiled WorkflowTemplate of a ``create(only_json=True)``; None otherwise."""
        return getattr(self.deployer, "additional_info", {}).get("workflow_template")

    @property
    def production_token(self) -> Optional[str]:
        from mfargo.cluster import WORKFLOW_TEMPLATES, ClusterError

        try:
            live = _cluster().get(WORKFLOW_TEMPLATES, self.deployer.name)
        except ClusterError:
            return None
        return ((live or {}).get("metadata", {}).get("annotations") or {}).get(Label.PRODUCTION_TOKEN)

    def trigger(self, **kwargs) -> MfargoTriggeredRun:
        """Start a run; flow Parameters as keyword arguments."""
        code, content = _run_cli(self.deployer, "trigger", attribute_file=True, **kwargs)
        if code == 0:
            return MfargoTriggeredRun(deployer=self.deployer, content=content)
        raise Exception("Error triggering %s on %s for %s" % (self.deployer.name, self.deployer.TYPE,
                                                               self.deployer.flow_file))

    def resume(self, origin_run_id: str, step_to_rerun: Optional[str] = None) -> MfargoTriggeredRun:
        """Start a run that resumes ``origin_run_id`` (ended): the tasks that succeeded before
        ``step_to_rerun`` (all that succeeded, if None) are cloned, the rest run."""
        kwargs = {"origin_run_id": origin_run_id}
        if step_to_rerun is not None:
            kwargs["step_to_rerun"] = step_to_rerun
        code, content = _run_cli(self.deployer, "resume", attribute_file=True, **kwargs)
        if code == 0:
            return MfargoTriggeredRun(deployer=self.deployer, content=content)
        raise Exception("Error resuming %s of %s on %s" % (origin_run_id, self.deployer.name, self.deployer.TYPE))

    def list_runs(self, status=None, limit: int = 100) -> List[MfargoTriggeredRun]:
        """The deployment's runs still in the cluster, newest first (`argo-workflows list-runs`):
        at most ``limit``, only those whose Argo phase is ``status`` (a phase, or a list of
        them: Pending, Running, Succeeded, Failed, Error) if given."""
        phases = [status] if isinstance(status, str) else list(status or [])
        kwargs: Dict[str, Any] = {"limit": limit}
        if phases:
            kwargs["status"] = phases
        code, content = _run_cli(self.deployer, "list-runs", attribute_file=True, **kwargs)
        if code != 0:
            raise Exception("Error listing the runs of %s on %s" % (self.deployer.name, self.deployer.TYPE))
        listed = json.loads(content)
        return [self._listed_run(listed["flow"], listed["metadata"], run["run_id"]) for run in listed["runs"]]

    def _listed_run(self, flow_name: str, metadata: str, run_id: str) -> MfargoTriggeredRun:
        """A run `list-runs` found, as ``get_triggered_run`` makes one (its name is its run id)."""
        content = {"metadata": metadata, "pathspec": "%s/%s" % (flow_name, run_id), "name": run_id}
        return MfargoTriggeredRun(deployer=self.deployer, content=json.dumps(content))

    def delete(self, **kwargs) -> bool:
        """Delete the deployment (`authorize=` a production token if needed); True on success."""
        code, _ = _run_cli(self.deployer, "delete", **kwargs)
        return code == 0

    @classmethod
    def from_deployment(cls, identifier: str, metadata: Optional[str] = None) -> "MfargoDeployedFlow":
        """The deployed flow named ``identifier`` (a WorkflowTemplate name), rebuilt from its annotations."""
        from metaflow import Deployer
        from metaflow.client.core import get_metadata
        from metaflow.exception import MetaflowException

        from mfargo.cluster import WORKFLOW_TEMPLATES

        live = _cluster().get(WORKFLOW_TEMPLATES, identifier)
        if live is None:
            raise MetaflowException("No deployed flow found for: %s" % identifier)
        ann = live.get("metadata", {}).get("annotations") or {}
        flow_name = ann.get(Label.FLOW_NAME, "")
        branch = ann.get(Label.BRANCH_NAME)
        project = ann.get(Label.PROJECT_NAME)
        source = generate_fake_flow_file_contents(flow_name=flow_name,
                                                  param_info=json.loads(ann.get(Label.PARAMETERS) or "{}"),
                                                  project_name=project)
        fd, path = tempfile.mkstemp(suffix=".py")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        env = {"METAFLOW_USER": ann.get(Label.OWNER, "")}
        if branch is not None:
            kwargs: Dict[str, Any] = {}
            if branch == "prod" or branch.startswith("prod."):
                kwargs["production"] = True
            if "." in branch and not branch.startswith("user."):
                kwargs["branch"] = branch.split(".", 1)[1]
            d = Deployer(path, env=env, **kwargs).argo_workflows()
        else:
            d = Deployer(path, env=env).argo_workflows(name=identifier)
        d.name = identifier
        d.flow_name = flow_name
        d.metadata = get_metadata() if metadata is None else metadata
        return cls(deployer=d)

    @classmethod
    def get_triggered_run(cls, identifier: str, run_id: str, metadata: Optional[str] = None) -> MfargoTriggeredRun:
        deployed = cls.from_deployment(identifier, metadata)
        content = json.dumps({"metadata": deployed.deployer.metadata,
                              "pathspec": "%s/%s" % (deployed.deployer.flow_name, run_id), "name": run_id})
        return MfargoTriggeredRun(deployer=deployed.deployer, content=content)

    @classmethod
    def list_deployed_flows(cls, flow_name: Optional[str] = None):
        """Every deployed flow (or only ``flow_name``'s) in the Kubernetes namespace."""
        from mfargo.cluster import WORKFLOW_TEMPLATES

        for template in _cluster().list(WORKFLOW_TEMPLATES):
            ann = template.get("metadata", {}).get("annotations") or {}
            if Label.FLOW_NAME not in ann or (flow_name is not None and ann[Label.FLOW_NAME] != flow_name):
                continue
            try:
                yield cls.from_deployment(template["metadata"]["name"])
            except Exception:  # noqa: BLE001 - skip what cannot be rebuilt, as core does
                continue


