"""The only reader of step decorator attributes: @kubernetes merged with @resources,
@retry/@catch, @timeout, @environment, and decorators that have no Argo meaning.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

from . import ir
from .constants import FOREIGN_COMPUTE_DECORATORS, INTERNAL_DECORATOR, JobSetKey, Path, contract, reserved_keys
from . import rules
from .errors import CompileError

# Decorators whose job mfargo's YAML does itself; never forwarded with --with.
_NOT_FORWARDED = {"kubernetes", "parallel", "jobset", "argo_workflows_internal", INTERNAL_DECORATOR}
_QOS = ("Guaranteed", "Burstable")
_GPU_VENDORS = ("nvidia", "amd")

# Every attribute of Metaflow's @kubernetes and @resources (2.19.39's ``defaults`` of each) and
# where mfargo puts it: the IR field it sets. tests/test_kubernetes_attributes.py sets each one
# and finds the change there, and fails on an attribute Metaflow has that this table lacks, so a
# Metaflow upgrade cannot add one that is silently ignored.
KUBERNETES_ATTRIBUTES: dict[str, str] = {
    "cpu": "compute.cpu",
    "memory": "compute.memory_mb",
    "disk": "compute.disk_mb",
    "gpu": "compute.gpu",
    "gpu_vendor": "compute.gpu_vendor",
    "qos": "compute.qos",
    "extended_resources": "compute.extended_resources",
    "image": "compute.image",
    "image_pull_policy": "compute.image_pull_policy",
    "image_pull_secrets": "compute.image_pull_secrets",
    "service_account": "compute.service_account",
    "secrets": "compute.secrets",
    "node_selector": "compute.node_selector",
    "compute_pool": "compute.node_selector",  # Metaflow's init makes it a node selector label
    "tolerations": "compute.tolerations",
    "labels": "compute.labels",
    "annotations": "compute.annotations",
    "namespace": "compute.namespace",  # the workflow's namespace or refused
    "use_tmpfs": "compute.tmpfs_size_mb",
    "tmpfs_size": "compute.tmpfs_size_mb",
    "tmpfs_path": "compute.tmpfs_path",
    "tmpfs_tempdir": "compute.tmpfs_tempdir",
    "persistent_volume_claims": "compute.persistent_volume_claims",
    "shared_memory": "compute.shared_memory_mb",
    "port": "compute.port",
    "security_context": "compute.security_context",
    "hostname_resolution_timeout": "gang.placement.control_wait_seconds",  # a gang's workers only
    "executable": "executable",
}
# mfargo's @pod_spec (plugins/pod_spec_decorator.py): the pod fields @kubernetes lacks.
POD_SPEC_ATTRIBUTES: dict[str, str] = {
    "priority_class_name": "compute.priority_class_name",
    "affinity": "compute.affinity",
    "topology_spread_constraints": "compute.topology_spread_constraints",
    "patch": "compute.pod_patch",
}
# Pod fields @pod_spec(patch=...) may not set: mfargo's contract (its containers, volumes,
# restart policy, the gang's host names) or an attribute of their own that says it once.
POD_PATCH_OWNED = {
    "containers": "mfargo's container", "initContainers": "mfargo's container",
    "ephemeralContainers": "mfargo's container", "volumes": "the volumes @kubernetes and mfargo mount",
    "restartPolicy": "mfargo's retries", "activeDeadlineSeconds": "@timeout",
    "serviceAccountName": "@kubernetes(service_account=...)", "serviceAccount": "@kubernetes(service_account=...)",
    "automountServiceAccountToken": "mfargo's pods (a gang's ranks read their control's pod)",
    "nodeSelector": "@kubernetes(node_selector=...)", "tolerations": "@kubernetes(tolerations=...)",
    "imagePullSecrets": "@kubernetes(image_pull_secrets=...)", "affinity": "@pod_spec(affinity=...)",
    "topologySpreadConstraints": "@pod_spec(topology_spread_constraints=...)",
    "priorityClassName": "@pod_spec(priority_class_name=...)", "priority": "@pod_spec(priority_class_name=...)",
    "subdomain": "a gang's host names", "hostname": "a gang's host names", "hostnameOverride": "a gang's host names",
    "setHostnameAsFQDN": "a gang's host names",
}
RESOURCES_ATTRIBUTES: dict[str, str] = {
    "cpu": "compute.cpu",
    "memory": "compute.memory_mb",
    "disk": "compute.disk_mb",
    "gpu": "compute.gpu",
    "shared_memory": "compute.shared_memory_mb",
}


def reject_foreign(step: str, decorators) -> None:
    for deco in decorators:
        if deco.name in FOREIGN_COMPUTE_DECORATORS:
            raise CompileError(
                "runs on another compute platform; Argo Workflows runs steps on Kubernetes only",
                step=step,
                decorator=deco.name,
            )


def compute(step: str, decorators, default_image: str, namespace: str | None,
            pod_secrets: tuple[str, ...] = ()) -> ir.Compute:
    """@kubernetes attributes (with Metaflow's config defaults) merged with @resources;
    `pod_secrets` (Metaflow's config) follow the step's own secrets, as in core."""
    kube = _find(decorators, "kubernetes")
    attrs = dict(kube.attributes) if kube is not None else _kubernetes_defaults()
    for res in _find_all(decorators, "resources"):
        for key in RESOURCES_ATTRIBUTES:
            value = res.attributes.get(key)
            if value is not None:
                rules.positive_number(step, "resources", key, value, allow_zero=key == "gpu")
            attrs[key] = _max(attrs.get(key), value)
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
    memory = rules.megabytes(step, "kubernetes", "memory", attrs.get("memory") or 4096)
    image = attrs.get("image") or default_image
    rules.image(step, "kubernetes", image)
    if attrs.get("image_pull_policy"):
        rules.pull_policy(step, "kubernetes", attrs["image_pull_policy"])
    secrets = rules.string_list(step, "kubernetes", "secrets", attrs.get("secrets"))
    pull_secrets = rules.string_list(step, "kubernetes", "image_pull_secrets", attrs.get("image_pull_secrets"))
    rules.object_names(step, "kubernetes", "secret", secrets + pull_secrets)
    if attrs.get("service_account"):
        rules.object_names(step, "kubernetes", "service_account", [attrs["service_account"]])
    labels = rules.mapping(step, "kubernetes", "labels", attrs.get("labels"))
    rules.labels(step, "kubernetes", "labels", labels, reserved=reserved_keys())
    annotations = rules.mapping(step, "kubernetes", "annotations", attrs.get("annotations"))
    rules.labels(step, "kubernetes", "annotations", annotations, values_are_labels=False, reserved=reserved_keys())
    node_selector = _as_dict(step, attrs.get("node_selector"))
    rules.labels(step, "kubernetes", "node_selector", node_selector)
    claims = rules.mapping(step, "kubernetes", "persistent_volume_claims", attrs.get("persistent_volume_claims"))
    rules.object_names(step, "kubernetes", "persistent volume claim", list(claims))
    for path in claims.values():
        rules.absolute_path(step, "kubernetes", "persistent volume claim mount path", path)
    tmpfs_path = attrs.get("tmpfs_path") or "/metaflow_temp"
    rules.absolute_path(step, "kubernetes", "tmpfs_path", tmpfs_path)
    shared_memory = attrs.get("shared_memory")
    mounts = [("the outputs directory", Path.OUTPUTS)] + [("persistent volume claim %r" % c, p) for c, p in claims.items()]
    mounts += [("tmpfs_path", tmpfs_path)] if use_tmpfs else []
    mounts += [("shared_memory", "/dev/shm")] if shared_memory else []
    rules.mount_paths(step, "kubernetes", mounts)
    gpu = rules.count(step, "kubernetes", "gpu", attrs.get("gpu") or 0)
    extended = rules.extended_resources(step, "kubernetes", attrs.get("extended_resources"),
                                        "%s.com/gpu" % vendor if gpu else None)
    return ir.Compute(
        image=image,
        image_pull_policy=attrs.get("image_pull_policy") or None,
        cpu=rules.cpu(step, "kubernetes", "cpu", attrs.get("cpu") or 1),
        memory_mb=memory,
        disk_mb=rules.megabytes(step, "kubernetes", "disk", attrs["disk"]) if attrs.get("disk") else None,
        gpu=gpu,
        gpu_vendor=vendor,
        extended_resources=extended,
        qos=qos,
        service_account=attrs.get("service_account") or None,
        namespace=deco_ns or None,
        secrets=tuple(dict.fromkeys(list(secrets) + list(pod_secrets))),
        node_selector=tuple(sorted(node_selector.items())),
        tolerations=_tolerations(step, "kubernetes", attrs.get("tolerations")),
        labels=tuple(sorted(labels.items())),
        annotations=tuple(sorted(annotations.items())),
        shared_memory_mb=rules.megabytes(step, "kubernetes", "shared_memory", shared_memory) if shared_memory else None,
        port=_port(step, attrs.get("port")),
        persistent_volume_claims=tuple(sorted(claims.items())),
        tmpfs_size_mb=rules.megabytes(step, "kubernetes", "tmpfs_size", attrs.get("tmpfs_size") or memory // 2)
        if use_tmpfs else None,
        tmpfs_path=tmpfs_path,
        tmpfs_tempdir=bool(attrs.get("tmpfs_tempdir", True)),  # truthy, as core reads it
        security_context=_security_context(step, attrs.get("security_context")),
        image_pull_secrets=tuple(pull_secrets),
        **pod_spec(step, decorators),
    )


def pod_spec(step: str, decorators) -> dict:
    """@pod_spec's fields of ``ir.Compute``, as Kubernetes spells them (camelCase: label keys in
    selectors are the user's), each checked against Kubernetes' PodSpec schema."""
    deco = _find(decorators, "pod_spec")
    if deco is None:
        return {}
    attrs = deco.attributes
    out: dict = {}
    name = attrs.get("priority_class_name")
    if name:
        if not isinstance(name, str):
            raise CompileError("priority_class_name must be a PriorityClass's name, not %r" % (name,), step, "pod_spec")
        rules.object_names(step, "pod_spec", "priority_class_name", [name])
        out["priority_class_name"] = name
    fields = {}
    if attrs.get("affinity"):
        fields["affinity"] = _api_keys(step, rules.mapping(step, "pod_spec", "affinity", attrs["affinity"]),
                                       "pod_spec", "affinity", camel=False)
    spread = attrs.get("topology_spread_constraints")
    if spread:
        if not isinstance(spread, (list, tuple)):
            raise CompileError("topology_spread_constraints must be a list, not %r" % (spread,), step, "pod_spec")
        fields["topologySpreadConstraints"] = _api_keys(step, list(spread), "pod_spec", "topology_spread_constraints",
                                                        camel=False)
    patch = _api_keys(step, rules.mapping(step, "pod_spec", "patch", attrs.get("patch")), "pod_spec", "patch",
                      camel=False)
    for key in sorted(patch):
        if key in POD_PATCH_OWNED:
            raise CompileError("patch: %s is %s's, not the patch's" % (key, POD_PATCH_OWNED[key]), step, "pod_spec")
    _schema_check(step, "pod_spec", {**patch, **fields})
    if "affinity" in fields:
        out["affinity"] = json.dumps(fields["affinity"], sort_keys=True)
    if "topologySpreadConstraints" in fields:
        out["topology_spread_constraints"] = json.dumps(fields["topologySpreadConstraints"], sort_keys=True)
    if patch:
        out["pod_patch"] = json.dumps(patch, sort_keys=True)
    return out


def _schema_check(step: str, decorator: str, fields: dict) -> None:
    """Some fields of a pod's spec against Kubernetes' PodSpec schema: the first problem, in one line."""
    if not fields:
        return
    from mfargo.base.validation.schema import pod_spec_errors

    problems = pod_spec_errors(fields)
    if problems:
        path, message = min(problems, key=lambda p: (len(p[0]), p[1]))
        where = "".join(".%s" % p if isinstance(p, str) else "[%d]" % p for p in path)
        raise CompileError("%s: %s" % (where.lstrip(".") or "the pod's spec", " ".join(message.split())[:200]),
                           step, decorator)


def executable(step: str, decorators) -> str | None:
    """@kubernetes(executable=...): the interpreter the step runs with, where no environment
    (@pypi, @conda) gives it one, as `kubernetes step` runs it (core's Argo compiler ignores it)."""
    kube = _find(decorators, "kubernetes")
    value = kube.attributes.get("executable") if kube is not None else None
    return rules.executable(step, "kubernetes", value) if value else None


def _port(step: str, value) -> int | None:
    if not value:
        return None
    return rules.count(step, "kubernetes", "port", value, minimum=1, maximum=65535)


def _security_context(step: str, value) -> tuple:
    """Kubernetes' SecurityContext, checked against its schema (the one Argo's embeds, shipped
    in base/schemas): an unknown field or a wrong type is refused here, naming the step,
    not dropped or left to the API server. Keys may be snake_case, as Metaflow's own
    @kubernetes takes them (the kubernetes client's V1SecurityContext); the YAML has the
    API's camelCase."""
    context = rules.mapping(step, "kubernetes", "security_context", value)
    if not context:
        return ()  # the schema is loaded only for a context to check (a cached compile never loads it)
    from mfargo.base.validation.schema import definition_errors

    context = _api_keys(step, context, "kubernetes", "security_context")
    problems = definition_errors("io.k8s.api.core.v1.SecurityContext", context)
    if problems:
        path, message = min(problems, key=lambda p: (len(p[0]), p[1]))
        where = "".join(".%s" % p if isinstance(p, str) else "[%d]" % p for p in path)
        raise CompileError("security_context%s: %s" % (where, " ".join(message.split())[:200]), step, "kubernetes")
    return tuple(sorted(context.items()))


def _api_keys(step: str, value, decorator: str, attribute: str, camel: bool = True):
    """``value`` with string keys only (else refused), and with ``camel`` its snake_case keys as
    the API's camelCase (run_as_user -> runAsUser), at every level; lists as lists."""
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise CompileError("%s has a key %r that is not a string" % (attribute, key), step, decorator)
        return {(re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), k) if camel else k):
                _api_keys(step, v, decorator, attribute, camel) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_api_keys(step, v, decorator, attribute, camel) for v in value]
    return value


def retry(step: str, decorators, infrastructure: bool = True) -> ir.Retry:
    """User-code retries and error retries, as Metaflow's runtime counts them, and, when
    ``infrastructure`` (a step that is not a gang's), the infrastructure budget beside them."""
    user = error = 0
    minutes = None
    for deco in decorators:
        u, e = deco.step_task_retry_count()
        if deco.name == "retry":  # Metaflow's int() has already rounded 1.5 and True: read what was written
            u = deco.attributes.get("times") if deco.attributes.get("times") is not None else u
        user += rules.count(step, deco.name, "times", u or 0, maximum=rules.INT32_MAX)
        error += rules.count(step, deco.name, "retries", e or 0, maximum=rules.INT32_MAX)
        if user + error > rules.INT32_MAX:  # Argo's retryStrategy.limit is an int32
            raise CompileError("%d retries in all is more than %d" % (user + error, rules.INT32_MAX), step, deco.name)
        if deco.name == "retry":
            minutes = rules.count(step, "retry", "minutes_between_retries",
                                  deco.attributes.get("minutes_between_retries") or 0,
                                  maximum=rules.MAX_DURATION_MINUTES)
        if deco.name in ("catch", "gang_catch"):
            rules.python_identifier(step, deco.name, "var", deco.attributes.get("var"))
    infra = rules.infrastructure_retries(user + error) if infrastructure else 0
    return ir.Retry(user_retries=user, error_retries=error, minutes_between=2 if minutes is None else minutes,
                    infra_retries=infra)


def placement(step: str, decorators, compute: ir.Compute, default_priority: str | None = None) -> ir.GangPlacement:
    """@jobset of a gang step; ``compute`` is the step's pod, which the control may change;
    ``default_priority``: `create --gang-priority-class`, for a step naming none."""
    deco = _find(decorators, "jobset")
    wait = _control_wait(step, decorators)
    own = (deco.attributes.get("priority_class") if deco is not None else None) or None
    if own is not None:  # a label value on the JobSet, naming a cluster-wide WorkloadPriorityClass
        rules.labels(step, "jobset", "priority_class", {JobSetKey.KUEUE_PRIORITY_CLASS: own})
    priority = own or default_priority
    if deco is None:
        return ir.GangPlacement(control_wait_seconds=wait, priority_class=priority)
    queue, topology = deco.attributes.get("queue") or None, deco.attributes.get("exclusive_topology") or None
    if queue is not None:  # a label value on the JobSet (Kueue's queue-name label)
        rules.labels(step, "jobset", "queue", {JobSetKey.KUEUE_QUEUE: queue})
    if topology is not None:  # a node label key the JobSet controller places the gang by
        rules.labels(step, "jobset", "exclusive_topology", {topology: ""})
    max_restarts = rules.count(step, "jobset", "max_restarts", deco.attributes.get("max_restarts") or 0,
                               maximum=rules.INT32_MAX)
    rules.attempts(step, "jobset", retry(step, decorators).total, max_restarts)
    return ir.GangPlacement(
        queue=queue,
        priority_class=priority,
        exclusive_topology=topology,
        max_restarts=max_restarts,
        retry_on=_retry_on(deco),
        control=_control(step, deco, compute),
        control_wait_seconds=wait,
        start_window_seconds=_start_window(step, deco),
    )


def _start_window(step: str, deco) -> int:
    """@jobset(start_window=...): how long every rank has to start (pod_contract's default when unset)."""
    value = deco.attributes.get("start_window")
    return contract.START_WINDOW_DEFAULT if value is None else rules.start_window(step, value)


def _control_wait(step: str, decorators) -> int:
    """@kubernetes(hostname_resolution_timeout=...): how long a worker waits for its control."""
    deco = _find(decorators, "kubernetes")
    value = deco.attributes.get("hostname_resolution_timeout") if deco is not None else None
    if value is None:
        return contract.CONTROL_WAIT_SECONDS
    return rules.count(step, "kubernetes", "hostname_resolution_timeout", value, maximum=rules.INT32_MAX)


def _control(step: str, deco, compute: ir.Compute) -> ir.Compute | None:
    """The step's pod with @jobset(control=...)'s keys applied (None when there are none)."""
    from metaflow_extensions.mfargo.plugins.jobset_decorator import control

    attrs = control(deco.attributes.get("control"), step)
    if not attrs:
        return None
    changes: dict = {}
    if attrs.get("cpu") is not None:
        changes["cpu"] = rules.cpu(step, "jobset", "control.cpu", attrs["cpu"])
    if attrs.get("memory") is not None:
        changes["memory_mb"] = rules.megabytes(step, "jobset", "control.memory", attrs["memory"])
    if attrs.get("gpu") is not None:
        changes["gpu"] = rules.count(step, "jobset", "control.gpu", attrs["gpu"])
    if attrs.get("disk") is not None:
        changes["disk_mb"] = rules.megabytes(step, "jobset", "control.disk", attrs["disk"])
    if attrs.get("image") is not None:
        rules.image(step, "jobset", attrs["image"])
        changes["image"] = attrs["image"]
    if attrs.get("node_selector") is not None:
        node_selector = _as_dict(step, attrs["node_selector"])
        rules.labels(step, "jobset", "control.node_selector", node_selector)
        changes["node_selector"] = tuple(sorted(node_selector.items()))
    if attrs.get("tolerations") is not None:
        changes["tolerations"] = _tolerations(step, "jobset", attrs["tolerations"], "control.tolerations")
    return replace(compute, **changes)


def _retry_on(deco) -> tuple[str, ...]:
    from metaflow_extensions.mfargo.plugins.jobset_decorator import retry_on

    return retry_on(deco.attributes.get("retry_on"), "")


def timeout_seconds(step: str, decorators) -> int:
    from metaflow.plugins.timeout_decorator import get_run_time_limit_for_task

    deco = _find(decorators, "timeout")
    if deco is not None:
        for key in ("seconds", "minutes", "hours"):
            rules.count(step, "timeout", key, deco.attributes.get(key) or 0)
    seconds = int(get_run_time_limit_for_task(decorators))
    if seconds <= 0:
        raise CompileError("the time limit must be more than 0 seconds", step, "timeout")
    if seconds > rules.INT32_MAX:  # a pod's activeDeadlineSeconds: 1..MaxInt32
        raise CompileError("the time limit of %d seconds is more than Kubernetes' %d" % (seconds, rules.INT32_MAX),
                           step, "timeout")
    return seconds


def environment(step: str, decorators) -> tuple[tuple[str, str], ...]:
    env: dict[str, str] = {}
    for deco in _find_all(decorators, "environment"):
        for key, value in rules.mapping(step, "environment", "vars", deco.attributes.get("vars")).items():
            rules.env_name(step, "environment", key)
            env[key] = value if isinstance(value, str) else json.dumps(value)
    return tuple(sorted(env.items()))


def forwarded_specs(decorators) -> tuple[str, ...]:
    """Decorators added with --with at compile time: pods must add them too. Not those a
    mutator inserted (it runs again in the pod, as in core), nor an @environment without
    vars (what `create` attaches to every step: nothing to forward)."""
    specs = []
    for deco in decorators:
        if deco.statically_defined or getattr(deco, "inserted_by", None) is not None or deco.name in _NOT_FORWARDED \
                or deco.name.startswith("_") or (deco.name == "environment" and not deco.attributes.get("vars")):
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


def _tolerations(step: str, decorator: str, values, key: str = "tolerations") -> tuple[ir.Toleration, ...]:
    if not values:
        return ()
    if not isinstance(values, (list, tuple)):
        raise CompileError("%s must be a list of tolerations, not %r" % (key, values), step, decorator)
    out = []
    for value in values:
        k, operator, val, effect, seconds = rules.toleration(step, decorator, key, value)
        out.append(ir.Toleration(key=k, operator=operator, value=val, effect=effect, toleration_seconds=seconds))
    return tuple(out)
