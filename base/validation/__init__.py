"""Check the documents mfargo emits before they are written, offline.

Why: Argo's default CRDs don't validate a WorkflowTemplate's spec and its controller drops
unknown fields silently, and a bad JobSet manifest only fails when its step runs (`kubectl
create` validates strictly). So every emitted document is checked against the schemas shipped
in base/schemas/, strictly, plus the `argo lint` / JobSet-webhook rules a schema can't express.

Modules: `schema` (loading, strictness, fast paths, int32/int64), `report` (problem lines,
paths, Argo tags), `argo` and `jobset` (the rules), `pods` (what the API server checks in a pod
that no schema says); Kubernetes syntax is `mfargo.base.k8s_syntax`, Argo's cron `mfargo.base.cron_syntax`.
"""

from __future__ import annotations

from mfargo.base.versions import DEFAULT_ARGO_VERSION, DEFAULT_JOBSET_VERSION

from mfargo.base import cron_syntax, k8s_syntax
from mfargo.base.k8s_syntax import parse_selector  # noqa: F401 - part of this package's API

from .argo import check_argo
from .jobset import check_jobset
from .report import Doc, drop_nulls, get
from .schema import ARGO_KINDS, schemas

LIGHT_KINDS = ("Role", "RoleBinding", "ServiceAccount", "Sensor", "ConfigMap")  # no schema shipped
MAX_PROBLEMS = 50  # per document


def _check_light(doc: Doc, obj: dict) -> None:
    """Role, RoleBinding, ServiceAccount, Sensor, ConfigMap: no schema shipped, so only the envelope."""
    for field in ("apiVersion", "kind"):
        if not isinstance(obj.get(field), str) or not obj.get(field):
            doc.add([field], "is required")
    name = get(obj, "metadata").get("name")
    if not isinstance(name, str) or not name:
        doc.add(["metadata", "name"], "is required")
    doc.labels(get(obj, "metadata"), ["metadata"])
    for key, value in (obj.get("data") or {}).items():  # ConfigMap
        if not (isinstance(key, str) and k8s_syntax.is_config_map_key(key)) or not isinstance(value, str):
            doc.add(["data", key], "a ConfigMap's keys are [-._a-zA-Z0-9]+ and its values strings")
    for i, subject in enumerate(obj.get("subjects") or []):  # RoleBinding: the service account bound
        name = subject.get("name") if isinstance(subject, dict) else None
        if subject.get("kind") == "ServiceAccount" and not k8s_syntax.is_dns1123_subdomain(str(name)):
            doc.add(["subjects", i, "name"], "%r is not a service account name (lowercase DNS-1123 subdomain)" % name)
    for i, trigger in enumerate(get(obj, "spec").get("triggers") or []):  # Sensor: when its conditions reset
        for j, reset in enumerate(get(trigger, "template").get("conditionsReset") or []):
            by_time, path = get(reset, "byTime"), ["spec", "triggers", i, "template", "conditionsReset", j, "byTime"]
            problem = cron_syntax.cron_problem(by_time.get("cron"), descriptors=False) if "cron" in by_time else None
            problem = problem or (cron_syntax.timezone_problem(by_time["timezone"]) if by_time.get("timezone") else None)
            if problem:
                doc.add(path, problem)


def validate_documents(docs: list, argo_version: str = DEFAULT_ARGO_VERSION, jobset_version: str = DEFAULT_JOBSET_VERSION) -> list[str]:
    """One line per problem in `docs` (parsed YAML documents), `Kind/name: json.path: message`;
    an empty list means every document is valid for those Argo and JobSet versions (X.Y)."""
    shipped = schemas(argo_version, jobset_version)
    problems = []
    for n, raw in enumerate(docs):
        if not isinstance(raw, dict):
            problems.append("document %d: not a mapping (%s)" % (n, type(raw).__name__))
            continue
        obj = drop_nulls(raw)
        kind, meta = obj.get("kind"), get(obj, "metadata")
        doc = Doc("%s/%s" % (kind, meta.get("name") or meta.get("generateName") or "document-%d" % n))
        try:
            if kind in ARGO_KINDS:
                check_argo(doc, obj, kind, shipped)
            elif kind == "JobSet":
                check_jobset(doc, obj, [], shipped)
            elif kind in LIGHT_KINDS:
                _check_light(doc, obj)
            else:
                doc.add(["kind"], "%r is not a kind mfargo emits (%s)" % (kind, ", ".join(
                    ARGO_KINDS + ("JobSet",) + LIGHT_KINDS)))
        except (AttributeError, KeyError, IndexError, TypeError, ValueError) as e:  # malformed input
            doc.add([], "cannot check further (%s: %s)" % (type(e).__name__, e))
        extra = len(doc.problems) - MAX_PROBLEMS
        if extra > 0:
            doc.problems[MAX_PROBLEMS:] = ["%s: ... and %d more problems" % (doc.where, extra)]
        problems.extend(doc.problems)
    return problems
