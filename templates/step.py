"""A step -> an Argo container template (one pod per task)."""

from __future__ import annotations

from . import argo_models as m

from mfargo.compiler import ir, rules
from mfargo.compiler.constants import Env, Path

from metaflow_extensions.mfargo.plugins import pod_contract as contract

from . import common, expr, pod, pod_command, wiring

# With an infrastructure budget, a pod Kubernetes ends at its deadline counts as infrastructure
# (attempt_guard.py): the pod's deadline is the step's @timeout plus this, so Metaflow's own
# @timeout, counted from the step's start, ends the attempt first, as the step's own failure.
TIMEOUT_GRACE_SECONDS = 120


def build(step: ir.Step, wf: ir.Workflow) -> m.Template:
    env = []
    outputs = wiring.outputs(step, wf)
    if outputs:
        env.append(m.EnvVar(name=Env.OUTPUT_DIR, value=Path.OUTPUTS))
    chain = wiring.clone_chain(step, wf)
    if chain:
        env.append(m.EnvVar(name=Env.CLONE_CHAIN, value=" ".join(chain)))
    deadline = step.timeout_seconds
    if step.retry.error_retries:  # templateDefaults says 0 (budget_env_default)
        env.append(m.EnvVar(name=contract.ERROR_RETRIES_ENV, value=str(step.retry.error_retries)))
    if step.retry.infra_retries:
        deadline = min(deadline + TIMEOUT_GRACE_SECONDS, rules.INT32_MAX)
    if isinstance(step.inputs, ir.FromParameters):
        env += [
            m.EnvVar(name=pod_command.parameter_base64_env(p.name), value=expr.parameter_base64(p.name))
            for p in wf.parameters
        ]
    step_pod = pod.lower(
        pod.Kind.STEP, step.compute, wf.steps[wf.start].compute,
        args=pod_command.step_args(step, wf),  # after templateDefaults' shared command
        env_head=tuple(common.env_vars(step.environment)), env=tuple(env),
        deadline_seconds=deadline, with_outputs=bool(outputs),
    )
    return pod.argo_template(
        step_pod,
        name=template_name(step),
        inputs=wiring.template_inputs_model(step, wf),
        outputs=_outputs(outputs),
        annotations=common.step_annotations(step),
        retry_strategy=common.retry_strategy(step.retry),
    )


def budget_env_default() -> list[m.EnvVar]:
    """For templateDefaults: every Argo pod is one whose infrastructure failures do not spend
    @retry (attempt_guard.budgeted; only a step's process reads it), with no @catch attempts;
    a step with @catch states its own count, which Argo's merge by name keeps. A gang's pods
    are the JobSet's, which templateDefaults never reach."""
    return [m.EnvVar(name=contract.ERROR_RETRIES_ENV, value="0")]


def template_name(step: ir.Step) -> str:
    return wiring.task_name(step.name)


def _outputs(names: list[str]) -> m.Outputs | None:
    if not names:
        return None
    return m.Outputs(
        parameters=[m.Parameter(name=n, value_from=m.ValueFrom(path="%s/%s" % (Path.OUTPUTS, n))) for n in names]
    )
