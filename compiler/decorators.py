"""The only reader of step decorator attributes: @kubernetes merged with @resources,
@retry/@catch, @timeout, @environment, and decorators that have no Argo meaning.
"""

from __future__ import annotations

import json

from . import ir
from .constants import FOREIGN_COMPUTE_DECORATORS, INTERNAL_DECORATOR
from .errors import CompileError

# Decorators whose job mfargo's YAML does itself; never forwarded with --with.
_NOT_FORWARDED = {"kubernetes", "parallel", "jobset", "argo_workflows_internal", INTERNAL_DECORATOR}
_QOS = ("Guaranteed", "Burstable")
_GPU_VENDORS = ("nvidia", "amd")


def reject_foreign(step: str, decorators) -> None:
    for deco in decorators:
        if deco.name in FOREIGN_COMPUTE_DECORATORS:
            raise CompileError(
                "runs on another compute platform; Argo Workflows runs steps on Kubernetes only",
                step=step,
                decorator=deco.name,
            )


def compute(step: str, decorators, default_image: str, namespace: str | None) -> ir.Compute:
    """@kubernetes attributes (with Metaflow's config defaults) merged with @resources."""
    kube = _find(decorators, "kubernetes")
    attrs = dict(kube.attributes) if kube is not None else _kubernetes_defaults()
    for res in _find_all(decorators, "resources"):
        for key in ("cpu", "memory", "disk", "gpu", "shared_memory"):
            attrs[key] = _max(attrs.get(key), res.attributes.get(key))
    qos = (attrs.get("qos") or "Burstable").capitalize()
    if qos not in _QOS:
        raise CompileError("qos must be one of %s, not %r" % (", ".join(_QOS), attrs.get("qos")), step, "kubernetes")
    vendor = (attrs.get("gpu_vendor") or "nvidia").lower()
    if vendor not in _GPU_VENDORS:
        raise CompileError("gpu_vendor must be nvidia or amd, not %r" % vendor, step, "kubernetes")
    deco_ns = attrs.get("namespace")
    if kube is not None and deco_ns and namespace and deco_ns != namespace:
        raise CompileError(
            "namespace %r differs from the workflow's namespace %r; every step of a workflow "
            "runs in the workflow's namespace" % (deco_ns, namespace),
            step,
            "kubernetes",
        )
    use_tmpfs = bool(attrs.get("use_tmpfs")) or bool(attrs.get("tmpfs_size"))
    memory = _number(step, "memory", attrs.get("memory") or 4096)
    return ir.Compute(
        image=attrs.get("image") or default_image,
        image_pull_policy=attrs.get("image_pull_policy") or None,
        cpu=_quantity(_number(step, "cpu", attrs.get("cpu") or 1)),
        memory_mb=int(memory),
        disk_mb=int(_number(step, "disk", attrs["disk"])) if attrs.get("disk") else None,
        gpu=int(_number(step, "gpu", attrs.get("gpu") or 0)),
        gpu_vendor=vendor,
        qos=qos,
        service_account=attrs.get("service_account") or None,
        namespace=deco_ns or None,
        secrets=tuple(_as_list(attrs.get("secrets"))),
        node_selector=tuple(sorted(_as_dict(step, attrs.get("node_selector")).items())),
        tolerations=tuple(_toleration(step, t) for t in attrs.get("tolerations") or ()),
        labels=tuple(sorted((attrs.get("labels") or {}).items())),
        annotations=tuple(sorted((attrs.get("annotations") or {}).items())),
        shared_memory_mb=int(_number(step, "shared_memory", attrs["shared_memory"])) if attrs.get("shared_memory") else None,
        port=int(attrs["port"]) if attrs.get("port") else None,
        persistent_volume_claims=tuple(sorted((attrs.get("persistent_volume_claims") or {}).items())),
        tmpfs_size_mb=int(attrs.get("tmpfs_size") or memory // 2) if use_tmpfs else None,
        tmpfs_path=attrs.get("tmpfs_path") or "/metaflow_temp",
        security_context=tuple(sorted((attrs.get("security_context") or {}).items())),
        image_pull_secrets=tuple(_as_list(attrs.get("image_pull_secrets"))),
    )


def retry(decorators) -> ir.Retry:
    """User-code retries and error retries, as Metaflow's runtime counts them."""
    user = error = 0
    minutes = None
    for deco in decorators:
        u, e = deco.step_task_retry_count()
        user, error = user + int(u or 0), error + int(e or 0)
        if deco.name == "retry":
            minutes = int(deco.attributes.get("minutes_between_retries") or 0)
    return ir.Retry(user_retries=user, error_retries=error, minutes_between=2 if minutes is None else minutes)


def placement(decorators) -> ir.GangPlacement:
    deco = _find(decorators, "jobset")
    if deco is None:
        return ir.GangPlacement()
    return ir.GangPlacement(
        queue=deco.attributes.get("queue") or None,
        exclusive_topology=deco.attributes.get("exclusive_topology") or None,
        max_restarts=int(deco.attributes.get("max_restarts") or 0),
        retry_on=_retry_on(deco),
    )


def _retry_on(deco) -> tuple[str, ...]:
    from metaflow_extensions.mfargo.plugins.jobset_decorator import retry_on

    return retry_on(deco.attributes.get("retry_on"), "")


def timeout_seconds(decorators) -> int:
    from metaflow.plugins.timeout_decorator import get_run_time_limit_for_task

    return int(get_run_time_limit_for_task(decorators))


def environment(step: str, decorators) -> tuple[tuple[str, str], ...]:
    env: dict[str, str] = {}
    for deco in _find_all(decorators, "environment"):
        for key, value in (deco.attributes.get("vars") or {}).items():
            env[str(key)] = value if isinstance(value, str) else json.dumps(value)
    return tuple(sorted(env.items()))


def forwarded_specs(decorators) -> tuple[str, ...]:
    """Decorators added with --with at compile time: pods must add them too."""
    specs = []
    for deco in decorators:
        if deco.statically_defined or deco.name in _NOT_FORWARDED or deco.name.startswith("_"):
            continue
        specs.append(deco.make_decorator_spec())
    return tuple(specs)


def has(decorators, name: str) -> bool:
    return _find(decorators, name) is not None


def _find(decorators, name):
    return next((d for d in decorators if d.name == name), None)


def _find_all(decorators, name):
    return [d for d in decorators if d.name == name]


def _kubernetes_defaults() -> dict:
    """@kubernetes' attributes with Metaflow's config applied, for steps without one."""
    from metaflow.plugins.kubernetes.kubernetes_decorator import KubernetesDecorator

    deco = KubernetesDecorator(attributes={})
    deco.init()
    return dict(deco.attributes)


def _max(a, b):
    if b is None:
        return a
    if a is None:
        return b
    return max(float(a), float(b))


def _number(step: str, key: str, value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CompileError("%s must be a number, not %r" % (key, value), step, "kubernetes") from None
    if number < 0:
        raise CompileError("%s must not be negative" % key, step, "kubernetes")
    return number


def _quantity(number: float) -> str:
    return str(int(number)) if number == int(number) else "%sm" % int(round(number * 1000))


def _as_list(value) -> list[str]:
    if not value:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def _as_dict(step: str, value) -> dict[str, str]:
    if not value:
        return {}
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    out = {}
    for item in str(value).split(","):
        key, sep, val = item.partition("=")
        if not sep:
            raise CompileError("node_selector entry %r is not key=value" % item, step, "kubernetes")
        out[key.strip()] = val.strip()
    return out


_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds", "toleration_seconds"}


def _toleration(step: str, value) -> ir.Toleration:
    if not isinstance(value, dict) or set(value) - _TOLERATION_KEYS:
        raise CompileError("toleration %r has unknown keys" % (value,), step, "kubernetes")
    seconds = value.get("tolerationSeconds", value.get("toleration_seconds"))
    return ir.Toleration(
        key=value.get("key"),
        operator=value.get("operator"),
        value=value.get("value"),
        effect=value.get("effect"),
        toleration_seconds=int(seconds) if seconds is not None else None,
    )
