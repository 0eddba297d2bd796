"""What the API server checks in a pod and its metadata that no shipped schema says: the
backstop under compiler/rules.py, so a value no compile-time rule caught (or one mfargo
itself got wrong) is refused before anything is written.

The rules are Kubernetes v1.34.2's (pkg/apis/core/validation/validation.go: ValidatePodSpec,
validateContainers, ValidateVolumeMounts, ValidateTolerations, validatePullPolicy,
ValidateResourceQuantityValue; apimachinery's objectmeta.go for annotations), through
`mfargo.base.k8s_syntax`. Argo tags (values known only at run time) are not judged. One walk,
linear in the size of what it checks.
"""

from __future__ import annotations

from mfargo.base import k8s_syntax as k8s

from .report import Doc, get, has_tag

ACTIVE_DEADLINE = (1, k8s.INT_RANGES["int32"][1])  # PodSpec.activeDeadlineSeconds: 1..MaxInt32 (ValidatePodSpec)


def _fixed(value) -> bool:
    """A value known now (not an Argo tag filled in at run time)."""
    return not has_tag(value)


def check_pod_spec(doc: Doc, spec: dict, path: list, containers: list[tuple[list, dict]], volumes: list) -> None:
    """A pod: its own fields, then each container against the pod's volumes. For an Argo
    template, ``spec`` is the template (it holds the pod fields) and ``volumes`` are the
    template's and the workflow's."""
    names = _volume_names(doc, volumes)
    for i, tol in enumerate(spec.get("tolerations") or []):
        if isinstance(tol, dict) and all(_fixed(v) for v in tol.values()):
            for problem in k8s.toleration_problems(tol.get("key"), tol.get("operator"), tol.get("value"),
                                                   tol.get("effect"), tol.get("tolerationSeconds")):
                doc.add(path + ["tolerations", i], problem)
    for key, value in (get(spec, "nodeSelector") or {}).items():
        problem = k8s.label_key_problem(key) if _fixed(key) else None
        problem = problem or (k8s.label_value_problem(value) if isinstance(value, str) and _fixed(value) else None)
        if problem:
            doc.add(path + ["nodeSelector", key], problem)
    account = spec.get("serviceAccountName")
    if isinstance(account, str) and _fixed(account) and not k8s.is_dns1123_subdomain(account):
        doc.add(path + ["serviceAccountName"], "%r is not a service account name (lowercase DNS-1123 subdomain)"
                % account)
    deadline = spec.get("activeDeadlineSeconds")
    if type(deadline) is int and not ACTIVE_DEADLINE[0] <= deadline <= ACTIVE_DEADLINE[1]:
        doc.add(path + ["activeDeadlineSeconds"], "%d is outside %d..%d" % ((deadline,) + ACTIVE_DEADLINE))
    seen: set = set()
    for cpath, container in containers:
        name = container.get("name")
        if isinstance(name, str) and _fixed(name):
            if not k8s.is_dns1123_label(name):
                doc.add(cpath + ["name"], "%r is not a container name (DNS-1123 label)" % name)
            elif name in seen:
                doc.add(cpath + ["name"], "duplicate container name %r" % name)
            seen.add(name)
        check_container(doc, container, cpath, names)


def _volume_names(doc: Doc, volumes: list) -> set | None:
    names: set = set()
    for vpath, volume in volumes:
        name = volume.get("name") if isinstance(volume, dict) else None
        if not isinstance(name, str) or not _fixed(name):
            return None  # not knowable now: mounts are not checked against them
        if not k8s.is_dns1123_label(name):
            doc.add(vpath + ["name"], "%r is not a volume name (DNS-1123 label)" % name)
        elif name in names:
            doc.add(vpath + ["name"], "duplicate volume name %r" % name)
        names.add(name)
    return names


def check_container(doc: Doc, c: dict, path: list, volumes: set | None) -> None:
    image = c.get("image")
    if image is not None and _fixed(image):
        problem = k8s.image_problem(image)
        if problem:
            doc.add(path + ["image"], problem)
    policy = c.get("imagePullPolicy")
    if policy is not None and _fixed(policy):
        problem = k8s.pull_policy_problem(policy)
        if problem:
            doc.add(path + ["imagePullPolicy"], problem)
    for i, env in enumerate(c.get("env") or []):
        name = env.get("name") if isinstance(env, dict) else None
        if isinstance(name, str) and _fixed(name) and not k8s.is_env_var_name(name):
            doc.add(path + ["env", i, "name"], "%r is not an environment variable name ([-._a-zA-Z][-._a-zA-Z0-9]*, "
                    "not starting with '..')" % name)
    for i, source in enumerate(c.get("envFrom") or []):
        secret = get(source, "secretRef").get("name")
        if isinstance(secret, str) and _fixed(secret) and not k8s.is_dns1123_subdomain(secret):
            doc.add(path + ["envFrom", i, "secretRef", "name"], "%r is not a Secret name" % secret)
    for i, port in enumerate(c.get("ports") or []):
        number = port.get("containerPort") if isinstance(port, dict) else None
        if type(number) is int and not 1 <= number <= 65535:
            doc.add(path + ["ports", i, "containerPort"], "%d is not a port (1-65535)" % number)
    for kind, resource, problem in k8s.resources_problems(get(c, "resources"), _fixed):
        doc.add(path + ["resources", kind, resource], problem)
    paths: set = set()
    for i, mount in enumerate(c.get("volumeMounts") or []):
        if not isinstance(mount, dict):
            continue
        where, name = mount.get("mountPath"), mount.get("name")
        if isinstance(where, str) and _fixed(where):
            if where in paths:
                doc.add(path + ["volumeMounts", i, "mountPath"], "%r: two volumes mounted at one path" % where)
            paths.add(where)
        if volumes is not None and isinstance(name, str) and _fixed(name) and name not in volumes:
            doc.add(path + ["volumeMounts", i, "name"], "no volume named %r in the pod" % name)
