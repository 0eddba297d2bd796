"""Kubernetes name and value syntax, as pure functions (no I/O, nothing imported but `re`, `decimal`).

Why one module: the document checker (`mfargo.base.validation`), the decorator checks of the
compiler and the local runner all need the same rules; each rule lives here once, written
from the API server's validation (k8s.io/apimachinery/pkg/util/validation, labels.Parse).
Predicates return a bool; `*_problem` functions return None or a sentence saying what is wrong.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import NamedTuple

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")  # also label values, when non-empty
ENV_VAR_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# A resource quantity: a signed decimal, then a binary-SI, decimal-SI or exponent suffix.
QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
INTEGER = re.compile(r"^[-+]?\d+$")
CONFIG_MAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
LABEL_MAX = 63
SUBDOMAIN_MAX = 253
# Facts from Kubernetes v1.34.2's API server validation (pkg/apis/core/validation/validation.go:
# supportedPullPolicies, ValidateTolerations, validateTaintEffect) and apimachinery v0.34.2
# (pkg/api/validation/objectmeta.go TotalAnnotationSizeLimitB; pkg/api/resource/quantity.go).
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
TOLERATION_OPERATORS = ("Equal", "Exists")  # "" means Equal
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")  # "" means every effect
# Pods of one gang (@parallel's num_parallel, one per JobSet Job): a JobSet this size is already far
# past what a cluster schedules at once. The compiler refuses a larger num_parallel, `mfargo run` a
# larger JobSet.
MAX_GANG_SIZE = 1_000
ANNOTATIONS_TOTAL_MAX = 256 * 1024
# OpenAPI's integer formats, as Go holds them.
INT_RANGES = {"int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}
QUANTITY_SUFFIXES = {
    "": 1, "n": Decimal("1e-9"), "u": Decimal("1e-6"),
    "m": Decimal("1e-3"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
    "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
ARGO_FIELD_NAME = re.compile(r"^[a-zA-Z0-9][-a-zA-Z0-9]*$")  # Argo's template/task/step names
ARGO_FIELD_NAME_MAX = 128


def is_dns1123_label(name: str, limit: int = LABEL_MAX) -> bool:
    """Names of most objects and of pods' hostnames: lowercase alphanumerics and '-'."""
    return len(name) <= limit and bool(DNS1123_LABEL.match(name))


def is_dns1123_subdomain(name: str, limit: int = SUBDOMAIN_MAX) -> bool:
    """Names of most objects (WorkflowTemplates, JobSets...): dot-separated DNS-1123 labels."""
    return len(name) <= limit and bool(DNS1123_SUBDOMAIN.match(name))


def is_dns1035_label(name: str, limit: int = LABEL_MAX) -> bool:
    """Names that become Services or Jobs under a JobSet: a DNS-1123 label starting with a letter."""
    return len(name) <= limit and bool(DNS1035_LABEL.match(name))


def is_argo_field_name(name: object) -> bool:
    """Argo's template, task and step names: 1-128 chars of [a-zA-Z0-9-], alphanumeric first."""
    return isinstance(name, str) and len(name) <= ARGO_FIELD_NAME_MAX and bool(ARGO_FIELD_NAME.match(name))


def path_problem(path: object, absolute: bool) -> str | None:
    """A volume path: ``mountPath``/``hostPath.path`` (absolute) or ``subPath`` (relative),
    never stepping back with a ``..`` element (the API server's validatePathNoBacksteps,
    validateLocalDescendingPath)."""
    if not isinstance(path, str) or not path:
        return "%r must be a non-empty path" % (path,)
    if path.startswith("/") != absolute:
        return "%r must be %s path" % (path, "an absolute" if absolute else "a relative")
    if ".." in path.split("/"):
        return "%r must not contain '..'" % path
    if "\0" in path:
        return "%r must not contain a NUL character" % path
    return None


def is_env_var_name(name: str) -> bool:
    """validation.IsEnvVarName: the pattern, and not '.', '..' nor starting with '..'."""
    return bool(ENV_VAR_NAME.match(name)) and not name.startswith("..") and name != "."


def is_config_map_key(key: str) -> bool:
    """validation.IsConfigMapKey (keys of Secrets too): [-._a-zA-Z0-9]+, at most 253 chars,
    not '.', '..' nor starting with '..'."""
    return len(key) <= SUBDOMAIN_MAX and bool(CONFIG_MAP_KEY.match(key)) and not key.startswith("..") \
        and key != "."


def image_problem(image: object) -> str | None:
    """The API server refuses an empty image or one with leading/trailing whitespace
    (validateContainers); a reference with whitespace inside never parses as an image
    (the distribution reference grammar has none), so it is refused here too."""
    if not isinstance(image, str) or not image:
        return "an image is required"
    if any(c.isspace() for c in image):
        return "image %r has whitespace; an image reference has none" % (image,)
    return None


def pull_policy_problem(policy: object) -> str | None:
    if policy not in PULL_POLICIES:
        return "imagePullPolicy %r is not one of %s" % (policy, ", ".join(PULL_POLICIES))
    return None


def toleration_problems(key, operator, value, effect, seconds) -> list[str]:
    """ValidateTolerations: what the API server refuses in one toleration (None = unset)."""
    problems = []
    if key:
        problem = label_key_problem(key) if isinstance(key, str) else "must be a string"
        if problem:
            problems.append("key %r: %s" % (key, problem))
    if not key and operator != "Exists":
        problems.append("operator must be Exists when key is empty (it matches every taint)")
    if seconds is not None and effect != "NoExecute":
        problems.append("effect must be NoExecute when tolerationSeconds is set")
    if operator in ("Equal", "", None):
        problem = label_value_problem(value or "") if isinstance(value or "", str) else "value must be a string"
        if problem:
            problems.append(problem)
    elif operator == "Exists":
        if value:
            problems.append("value must be empty when operator is Exists")
    else:
        problems.append("operator %r is not one of %s" % (operator, ", ".join(TOLERATION_OPERATORS)))
    if effect and effect not in TAINT_EFFECTS:
        problems.append("effect %r is not one of %s" % (effect, ", ".join(TAINT_EFFECTS)))
    return problems


def quantity_problem(text: str, whole: bool = False) -> str | None:
    """A resource quantity the API server stores as given: parseable, >= 0 (ValidateNonnegativeQuantity),
    at most 2^63-1 and with at most 3 decimal places in base units (larger or finer ones it
    caps or rounds: resource/quantity.go), a whole number for integer resources such as GPUs
    (ValidateResourceQuantityValue)."""
    value = quantity_value(text)
    if value is None:
        return "%r is not a resource quantity" % (text,)
    if value < 0:
        return "%r is negative" % text
    if value > INT_RANGES["int64"][1]:
        return "%r is more than 2^63-1 (Kubernetes would cap it)" % text
    if value != value.quantize(Decimal("0.001"), rounding="ROUND_DOWN"):
        return "%r has more than 3 decimal places (Kubernetes would round it up)" % text
    if whole and value != value.to_integral_value():
        return "%r must be a whole number" % text
    return None


# A container's own resources (IsStandardContainerResourceName); hugepages-<size> too.
STANDARD_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
HUGEPAGES_PREFIX = "hugepages-"


def container_resource_problem(name: str) -> str | None:
    """A resource name a container may request (validateContainerResourceName): a standard one,
    or an extended one, ``<domain>/<name>`` outside kubernetes.io, that is still a qualified
    name with ``requests.`` before it (IsExtendedResourceName)."""
    if not isinstance(name, str) or not name:
        return "%r is not a resource name" % (name,)
    if "/" not in name:
        if name in STANDARD_CONTAINER_RESOURCES or is_hugepages(name):
            return None
        return "%r is not a container resource: an extended resource is <domain>/<name>, e.g. example.com/device" % name
    problem = label_key_problem(name) or label_key_problem("requests." + name)
    if problem or name.startswith("requests.") or "kubernetes.io/" in name:
        return "%r is not an extended resource name: <domain>/<name>, the domain not kubernetes.io" % name
    return None


def is_hugepages(name: str) -> bool:
    size = name[len(HUGEPAGES_PREFIX):] if name.startswith(HUGEPAGES_PREFIX) else ""
    return bool(size) and quantity_problem(size) is None


def is_whole_units(name: str) -> bool:
    """Extended resources (a domain other than kubernetes.io, e.g. nvidia.com/gpu) count whole
    units (ValidateResourceQuantityValue); hugepages and the standard ones need not."""
    return "/" in name and not name.startswith("kubernetes.io/")


def is_overcommittable(name: str) -> bool:
    """Requests may be below limits only for cpu, memory, ephemeral-storage (IsOvercommitAllowed):
    every other resource (extended, hugepages) is requested and limited alike."""
    return name in STANDARD_CONTAINER_RESOURCES


def resources_problems(resources: dict, known=lambda value: True) -> list[tuple[str, str, str]]:
    """(requests|limits, resource, problem) of a container's resources as the API server judges
    them (ValidateResourceRequirements): names, quantities, a request above its limit, and a
    resource that cannot be overcommitted (extended, hugepages) requested as much as it is
    limited. Only names and values ``known`` holds (not Argo tags, known at run time) are judged."""
    problems, values = [], {"requests": {}, "limits": {}}
    for kind in values:
        for resource, quantity in ((resources or {}).get(kind) or {}).items():
            if isinstance(quantity, bool) or not (known(quantity) and known(resource)):
                continue
            problem = container_resource_problem(resource) or quantity_problem(str(quantity), is_whole_units(resource))
            if problem:
                problems.append((kind, resource, problem))
            else:
                values[kind][resource] = quantity_value(str(quantity))
    for resource, request in values["requests"].items():
        limit = values["limits"].get(resource)
        if limit is not None and request > limit:
            problems.append(("requests", resource, "the request %s is more than the limit %s"
                             % (resources["requests"][resource], resources["limits"][resource])))
        elif not is_overcommittable(resource) and limit != request:
            problems.append(("requests", resource, "%s cannot be overcommitted: its request must equal its limit"
                             % resource))
    return problems


def quantity_value(text: str) -> Decimal | None:
    """A quantity's value in base units, or None when it is not one."""
    m = QUANTITY.match(text) if isinstance(text, str) else None
    if not m:
        return None
    number = Decimal(text[:m.start(3)] if m.group(3) else text)
    suffix = m.group(3) or ""
    return number.scaleb(int(suffix[1:])) if suffix not in QUANTITY_SUFFIXES else number * QUANTITY_SUFFIXES[suffix]


def annotations_size_problem(annotations: dict) -> str | None:
    """ValidateAnnotationsSize: keys and values together at most 256 KiB."""
    total = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if total > ANNOTATIONS_TOTAL_MAX:
        return "annotations total %s bytes, over Kubernetes' %s" % (format(total, ","), format(ANNOTATIONS_TOTAL_MAX, ","))
    return None


def is_quantity(text: str) -> bool:
    """'500m', '1.5Gi', '2', '1e3'... as resources.requests/limits accept them."""
    return bool(QUANTITY.match(text))


def label_key_problem(key: str) -> str | None:
    """A label/annotation key is [prefix/]name: a DNS subdomain, then a 1-63 char name."""
    prefix, _, name = str(key).rpartition("/")
    if prefix and not is_dns1123_subdomain(prefix):
        return "prefix %r must be a lowercase DNS subdomain" % prefix
    if len(name) > LABEL_MAX or not LABEL_NAME.match(name):
        return "name %r must be 1-63 chars of [A-Za-z0-9-_.], alphanumeric at both ends" % name
    return None


def label_value_problem(value: str) -> str | None:
    if value and (len(value) > LABEL_MAX or not LABEL_NAME.match(value)):
        return "label value %r must be <= 63 chars of [A-Za-z0-9-_.], alphanumeric at both ends" % value
    return None


def jobset_child_job_name(jobset: str, replicated_job: str, index: int) -> str:
    """The JobSet controller names the Jobs of a replicatedJob `<jobset>-<rjob>-<index>`."""
    return "%s-%s-%d" % (jobset, replicated_job, index)


def child_job_problem(jobset: str, replicated_job: str, replicas: int) -> str | None:
    """The longest child Job name of a replicatedJob must be a DNS-1035 label (the webhook's rule)."""
    job = jobset_child_job_name(jobset, replicated_job, max(replicas - 1, 0))
    if not is_dns1035_label(job):
        return "child Job name %r must be a DNS-1035 label of at most 63 chars" % job
    return None


class Requirement(NamedTuple):
    """One label-selector requirement. `op` is one of == != in notin exists !exists > <
    ('=' is read as '==')."""

    key: str
    op: str
    values: list[str]

    def __str__(self) -> str:
        if self.op == "exists":
            return self.key
        if self.op == "!exists":
            return "!" + self.key
        if self.op in ("in", "notin"):
            return "%s %s (%s)" % (self.key, self.op, ",".join(self.values))
        return "%s %s %s" % (self.key, self.op, self.values[0])


# One requirement: [!]key, key op value, key in|notin (v1, v2).
_REQUIREMENT = re.compile(r"\s*(!?)\s*([^\s!=(),<>]+)(?:\s*(==|=|!=|<|>)\s*([^\s!=(),<>]*)"
                          r"|\s+(in|notin)\s*\(([^()]*)\))?\s*")


def parse_selector(expr: str) -> list[Requirement]:
    """Parse a Kubernetes label selector (also Argo's resource success/failureCondition, whose
    keys are field paths). Raises ValueError saying what is wrong."""
    if not expr.strip():
        raise ValueError("empty selector")
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(expr + ","):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    reqs = []
    for part in parts:
        m = _REQUIREMENT.fullmatch(part)
        if not m or (m.group(1) and m.group(3, 5) != (None, None)):
            raise ValueError("cannot parse %r (requirements are `key op value`, joined by ',')" % part.strip())
        neg, name, op, value, set_op, values = m.groups()
        vals = [v.strip() for v in values.split(",")] if set_op else [value] if op else []
        if set_op and not all(vals):
            raise ValueError("%s needs (value[, value...])" % set_op)
        if op in ("<", ">") and not INTEGER.match(value):
            raise ValueError("%s %s needs an integer, got %r" % (name, op, value))
        problem = label_key_problem(name) or next(filter(None, map(label_value_problem, vals)), None)
        if problem:
            raise ValueError(problem)
        kind = "!exists" if neg else {"=": "=="}.get(op, op) if op else set_op or "exists"
        reqs.append(Requirement(name, kind, vals))
    return reqs
