"""A step -> an Argo container template (one pod per task)."""

from __future__ import annotations

from . import argo_models as m

from mfargo.compiler import ir
from mfargo.compiler.constants import Env, Path

from . import common, expr, pod_command, wiring


def build(step: ir.Step, wf: ir.Workflow, default_resources: m.ResourceRequirements) -> m.Template:
    """``default_resources`` come from templateDefaults: a step that needs them says nothing."""
    compute = step.compute
    resources = common.resources(compute)
    vols, mounts, extra_env = common.volumes(compute, with_outputs=bool(wiring.outputs(step)))
    env = common.env_vars(step.environment) + extra_env
    if wiring.outputs(step):
        env.append(m.EnvVar(name=Env.OUTPUT_DIR, value=Path.OUTPUTS))
    if isinstance(step.inputs, ir.FromParameters):
        env += [
            m.EnvVar(name=pod_command.parameter_base64_env(p.name), value=expr.parameter_base64(p.name))
            for p in wf.parameters
        ]
    return m.Template(
        name=template_name(step),
        inputs=wiring.template_inputs_model(step, wf),
        outputs=_outputs(step),
        metadata=common.step_metadata(step, step.retry),
        active_deadline_seconds=m.IntOrString(step.timeout_seconds),
        retry_strategy=common.retry_strategy(step.retry),
        service_account_name=compute.service_account,
        node_selector=dict(compute.node_selector) or None,
        tolerations=common.tolerations(compute),
        pod_spec_patch=common.pod_spec_patch(compute),
        volumes=vols or None,
        container=m.Container(
            image=compute.image,
            image_pull_policy=compute.image_pull_policy,
            args=pod_command.step_args(step, wf),  # after templateDefaults' shared command
            env=env or None,
            env_from=common.env_from(compute),
            resources=None if resources == default_resources else resources,
            volume_mounts=mounts or None,
            ports=common.ports(compute),
            security_context=common.security_context(compute),
        ),
    )


def template_name(step: ir.Step) -> str:
    return wiring.task_name(step.name)


def _outputs(step: ir.Step) -> m.Outputs | None:
    names = wiring.outputs(step)
    if not names:
        return None
    return m.Outputs(
        parameters=[m.Parameter(name=n, value_from=m.ValueFrom(path="%s/%s" % (Path.OUTPUTS, n))) for n in names]
    )
