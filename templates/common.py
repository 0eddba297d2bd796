"""Pieces the templates of steps share: env from the IR, pod identity, retries and
metadata, and the run's daemons (the pods themselves are ``pod``'s).
"""

from __future__ import annotations

from . import argo_models as m

from mfargo.compiler import command as sh
from mfargo.compiler import ir
from mfargo.compiler.constants import Env, Label
from mfargo.compiler.usertext import kubernetes_literal

from . import expr, pod

# Pod identity through the downward API, as Metaflow's Kubernetes integration names it.
FIELD_REFS = (
    (Env.POD_NAME, "metadata.name"),
    (Env.POD_NAMESPACE, "metadata.namespace"),
    (Env.POD_ID, "metadata.uid"),
    (Env.SERVICE_ACCOUNT_NAME, "spec.serviceAccountName"),
    (Env.NODE_IP, "status.hostIP"),
)


def env_vars(pairs) -> list[m.EnvVar]:
    """Env from the IR: literal text as written (Kubernetes' `$(VAR)` expansion leaves it
    alone), run-time values as the Argo tag that fills them in."""
    return [m.EnvVar(name=k, value=env_value(v)) for k, v in pairs]


def env_value(value: ir.EnvValue) -> str:
    if isinstance(value, ir.WorkflowField):
        return expr.workflow_field(value)
    if isinstance(value, ir.ParameterBase64):
        return expr.parameter_base64(value.parameter)
    return kubernetes_literal(value)


def field_ref(name: str, path: str) -> m.EnvVar:
    return m.EnvVar(name=name, value_from=m.EnvVarSource(field_ref=m.ObjectFieldSelector(field_path=path)))


def identity_env() -> list[m.EnvVar]:
    return [field_ref(name, path) for name, path in FIELD_REFS]


def retry_strategy(retry: ir.Retry) -> m.RetryStrategy | None:
    """Argo retries every end of a pod within ``argo_limit``; with an infrastructure budget,
    all but the keeper's final failure (the step's own, with no @retry attempt left), so an
    evicted or lost pod runs again and a user failure is not retried on that budget
    (plugins/attempt_guard.py). @retry's back-off only where @retry or @catch retry."""
    if retry.argo_limit == 0:
        return None
    backoff = m.Backoff(duration="%dm" % retry.minutes_between) if retry.total and retry.minutes_between else None
    budgeted = bool(retry.infra_retries)  # with an expression Argo's default policy is Always (Argo >= 3.5)
    return m.RetryStrategy(limit=m.IntOrString(retry.argo_limit), retry_policy=None if budgeted else "Always",
                           backoff=backoff, expression=expr.not_final_failure() if budgeted else None)


def attempt_tag(retry: ir.Retry) -> str | None:
    """The attempt number as an Argo tag: `{{retries}}` exists only when a retryStrategy does."""
    return expr.RETRIES if retry.argo_limit else None


def step_annotations(step: ir.Step) -> dict[str, str]:
    """What mfargo adds to a step's pod annotations: the step's name (as core's templates
    carry it: tools that read core's pods find the step by it), and the attempt when there
    can be several."""
    annotations = {Label.STEP_NAME: step.name}
    if attempt_tag(step.retry):
        annotations[Label.ATTEMPT] = attempt_tag(step.retry)
    return annotations


def launcher_metadata(step: ir.Step, start: ir.Compute) -> m.Metadata:
    """The metadata of the pod Argo runs a gang's resource template in (``pod.Kind.LAUNCHER``)."""
    return pod.launcher_metadata(pod.lower(pod.Kind.LAUNCHER, step.compute, start), step_annotations(step))


def daemon_template(name: str, kind: pod.Kind, wf: ir.Workflow, call) -> m.Template:
    """A daemon of the top DAG (the run's heartbeat, its queue watch): a pod of ``kind``
    (``pod.INHERITS``) running ``call`` (command parts) until Argo stops it when the DAG
    ends, with no deadline."""
    start = wf.steps[wf.start].compute
    daemon = pod.lower(kind, start, start, args=sh.step_args([call]))  # after templateDefaults' shared command (the code first)
    return pod.argo_template(daemon, name=name, daemon=True)
