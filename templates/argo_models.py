"""Argo and Kubernetes objects as the plain dicts Argo reads, built under hera's model names.

Why: templates are written as hera's models are (``m.Template(name=..., container=
m.Container(...))``, the same kinds, the same snake_case field names), but importing hera's
generated models and letting pydantic build and validate them cost more than the rest of
a compile (0.45 CPU-s of import, 0.2 of model building on a small flow; README, "Speed").
Here each kind is a dict: every field under its wire name (the camelCase of hera's name,
except the few hera spells otherwise: ``WIRE_NAMES``), None fields left out, exactly what
hera's ``model_dump(exclude_none=True, by_alias=True)`` gives. Nothing is validated here:
every document is checked against Argo's schema, strictly (unknown keys refused), before
anything is written (mfargo.base.validation). tests/test_argo_models.py holds these names to
hera's: every field of every kind listed here has hera's wire name.
"""

from __future__ import annotations

from typing import Any

# hera's fields whose wire name is not their plain camelCase.
WIRE_NAMES = {
    "pod_gc": "podGC",
    "artifact_gc": "artifactGC",
    "volume_claim_gc": "volumeClaimGC",
    "downward_api": "downwardAPI",
    "scale_io": "scaleIO",
    "host_ip": "hostIP",
}


def wire_name(field: str) -> str:
    if field in WIRE_NAMES:
        return WIRE_NAMES[field]
    first, *rest = field.split("_")
    return first + "".join(word[:1].upper() + word[1:] for word in rest)


def _object(**fields: Any) -> dict:
    return {wire_name(k): v for k, v in fields.items() if v is not None}


# The kinds mfargo emits, by hera's model names (each a dict of its non-None fields).
KINDS = (
    "Arguments", "Backoff", "Container", "ContainerPort", "CronWorkflow", "CronWorkflowSpec", "DAGTask",
    "DAGTemplate", "EmptyDirVolumeSource", "EnvFromSource", "EnvVar", "EnvVarSource", "Inputs", "LifecycleHook",
    "Metadata", "ObjectFieldSelector", "ObjectMeta", "Outputs", "Parameter", "PersistentVolumeClaimVolumeSource",
    "PodGC", "ResourceRequirements", "ResourceTemplate", "RetryStrategy", "SecretEnvSource", "SecretKeySelector",
    "Template", "Toleration", "TTLStrategy", "ValueFrom", "Volume", "VolumeMount", "WorkflowMetadata",
    "WorkflowSpec", "WorkflowStep", "WorkflowTemplate", "WorkflowTemplateRef",
)
Arguments = Backoff = Container = ContainerPort = CronWorkflow = CronWorkflowSpec = DAGTask = _object
DAGTemplate = EmptyDirVolumeSource = EnvFromSource = EnvVar = EnvVarSource = Inputs = LifecycleHook = _object
Metadata = ObjectFieldSelector = ObjectMeta = Outputs = Parameter = PersistentVolumeClaimVolumeSource = _object
PodGC = ResourceRequirements = ResourceTemplate = RetryStrategy = SecretEnvSource = SecretKeySelector = _object
Template = Toleration = TTLStrategy = ValueFrom = Volume = VolumeMount = WorkflowMetadata = _object
WorkflowSpec = WorkflowStep = WorkflowTemplate = WorkflowTemplateRef = _object


# hera's root models (one value, no fields) are that value on the wire.
def Quantity(value: str | int | float):  # noqa: N802 - hera's name
    return value


def IntOrString(value: int | str):  # noqa: N802
    return value


def ParallelSteps(steps: list[dict]) -> list[dict]:  # noqa: N802
    return steps


def SecurityContext(context: dict) -> dict:  # noqa: N802
    """A step's security_context: compiler/decorators.py checked it against Kubernetes'
    schema and wrote its keys as the API's, so it is written as it is."""
    return context
