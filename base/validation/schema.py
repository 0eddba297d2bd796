"""The shipped schemas (Argo v4.1.2 and v3.7.18, JobSet v0.6.0, v0.8.2 and v0.12.0; see
base/schemas/README.md), made strict.

Why not plain jsonschema: Argo's generated schema is too loose for some Go types and too
open (unknown keys pass, the controller then drops them silently), and resolving `$ref`s
doubles validation time. So the schemas are widened where Go accepts more, closed, their refs
inlined once, and validated with a few fast paths. Loaded on first use only; a document the
quick test (quick.py) finds valid never imports jsonschema, which only words the problems.
"""

from __future__ import annotations

from mfargo.base.versions import DEFAULT_ARGO_VERSION, DEFAULT_JOBSET_VERSION

from .quick import INT_FORMATS, list_identities

import functools
import json
from pathlib import Path
from typing import Any, Callable, Iterator


SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"
ARGO = "io.argoproj.workflow.v1alpha1."
ARGO_KINDS = ("WorkflowTemplate", "Workflow", "CronWorkflow")


def _widen_argo(defs: dict) -> None:
    """Argo's generated schema types these as strings, but its Go types accept numbers too."""
    defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = {"type": ["integer", "string"], "format": "int32"}
    defs["io.k8s.apimachinery.pkg.api.resource.Quantity"] = {"type": ["number", "string"]}
    scalar = {"type": ["string", "number", "boolean"]}  # wfv1.AnyString
    param = defs[ARGO + "Parameter"]["properties"]
    param.update(default=scalar, value=scalar, description=scalar)
    param["enum"] = {"type": "array", "items": scalar}
    defs[ARGO + "ValueFrom"]["properties"]["default"] = scalar


def _close(node: Any) -> None:
    """Strict mode: an object schema that lists properties rejects any other key (run before
    _inline_refs, while the schema is still a tree)."""
    if isinstance(node, dict):
        if "properties" in node and "additionalProperties" not in node \
                and not node.get("x-kubernetes-preserve-unknown-fields"):
            node["additionalProperties"] = False
        for v in node.values():
            _close(v)
    elif isinstance(node, list):
        for v in node:
            _close(v)


def _inline_refs(node: Any, defs: dict) -> None:
    """Replace {"$ref": "#/definitions/X", ...annotations} by the (shared) definition object.
    The graph may become cyclic; jsonschema only walks it as deep as the instance, and skipping
    ref resolution roughly halves validation time."""
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, dict) and "$ref" in v:
                node[k] = defs[v["$ref"].rsplit("/", 1)[-1]]
            else:
                _inline_refs(v, defs)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            if isinstance(v, dict) and "$ref" in v:
                node[i] = defs[v["$ref"].rsplit("/", 1)[-1]]
            else:
                _inline_refs(v, defs)


def _unique_list(validator, list_type: str, instance: Any, schema: dict) -> Iterator:
    """The API server's x-kubernetes-list-type rule for CRDs: map keys / set items are unique."""
    if list_type not in ("map", "set") or not isinstance(instance, list):
        return
    keys = schema.get("x-kubernetes-list-map-keys") or []
    first: dict[str, int] = {}
    for i, ident in list_identities(instance, list_type, schema):
        if ident in first:
            from jsonschema import ValidationError

            yield ValidationError("duplicate of [%d] (%s %s); x-kubernetes-list-type=%s lists must be unique"
                                  % (first[ident], "/".join(keys) or "value", ident, list_type), path=[i])
        first.setdefault(ident, i)


# Speed: jsonschema's descend() into a subschema costs ~5 us (it builds a new validator). Most
# subschemas only say {"type": "string"} or similar, so check those inline and descend only when
# the quick test fails (to get jsonschema's own error) or the subschema says more.
_TYPE_TESTS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str), "boolean": lambda v: v is True or v is False,
    "integer": lambda v: type(v) is int, "number": lambda v: type(v) in (int, float),
    "object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
}
_quick_tests: dict[int, tuple[Any, Callable[[Any], bool] | None]] = {}  # id(subschema) -> (subschema, test)


def _int_format(validator, fmt: str, instance: Any, schema: dict) -> Iterator:
    """OpenAPI's int32/int64: a number the Go field cannot hold (jsonschema ignores formats)."""
    if type(instance) is int and fmt in INT_FORMATS and not INT_FORMATS[fmt][0] <= instance <= INT_FORMATS[fmt][1]:
        from jsonschema import ValidationError

        yield ValidationError("%d is outside %s (%d..%d)" % ((instance, fmt) + INT_FORMATS[fmt]))


def _type_only_test(schema: Any) -> Callable[[Any], bool] | None:
    if not isinstance(schema, dict) or schema.get("format") in INT_FORMATS or not all(
            k in ("type", "format", "default", "$comment") or (k.startswith("x-") and k != "x-kubernetes-list-type")
            for k in schema):
        return None
    types = schema.get("type")
    tests = [_TYPE_TESTS.get(t) for t in ([types] if isinstance(types, str) else types or [])]
    if not tests or None in tests:
        return None
    return tests[0] if len(tests) == 1 else lambda v: any(t(v) for t in tests)


def _quick_ok(value: Any, schema: Any) -> bool:
    entry = _quick_tests.get(id(schema))
    if entry is None:  # keep the schema referenced so its id is never reused
        entry = _quick_tests[id(schema)] = (schema, _type_only_test(schema))
    return entry[1] is not None and entry[1](value)


def _properties(validator, properties, instance, schema):
    if isinstance(instance, dict):
        for name, sub in properties.items():
            if name in instance and not _quick_ok(instance[name], sub):
                yield from validator.descend(instance[name], sub, path=name, schema_path=name)


def _items(validator, items, instance, schema):
    if not (isinstance(instance, list) and isinstance(items, dict) and "prefixItems" not in schema):
        yield from _base()["items"](validator, items, instance, schema)
        return
    for i, value in enumerate(instance):
        if not _quick_ok(value, items):
            yield from validator.descend(value, items, path=i)


def _additional(validator, extra_schema, instance, schema):
    if not (isinstance(instance, dict) and isinstance(extra_schema, dict) and "patternProperties" not in schema):
        yield from _base()["additionalProperties"](validator, extra_schema, instance, schema)
        return
    known = schema.get("properties", {})
    for name, value in instance.items():
        if name not in known and not _quick_ok(value, extra_schema):
            yield from validator.descend(value, extra_schema, path=name)


def _base() -> dict:
    from jsonschema import Draft202012Validator

    return Draft202012Validator.VALIDATORS


@functools.lru_cache(maxsize=None)
def _validator_classes() -> tuple[type, type]:
    """(Argo's, JobSet's) jsonschema validator classes, made when a document first needs them."""
    from jsonschema import Draft202012Validator, validators

    argo = validators.extend(Draft202012Validator, {
        "properties": _properties, "items": _items, "additionalProperties": _additional, "format": _int_format})
    return argo, validators.extend(argo, {"x-kubernetes-list-type": _unique_list})


class Checker:
    """One kind's schema: the quick test (quick.py) first, jsonschema's validator to explain."""

    def __init__(self, schema: dict, list_types: bool):
        self.schema, self.list_types = schema, list_types  # list_types: the CRD's uniqueness rule
        self._validator = None

    @property
    def validator(self):
        if self._validator is None:
            argo, jobset = _validator_classes()
            self._validator = (jobset if self.list_types else argo)(self.schema)
        return self._validator


class Schemas:
    """Validators by kind, the JobSet schema (for field lookups) and its release, and the
    targeted JobSet X.Y (whose admission webhook rules apply: `validation.jobset`)."""

    def __init__(self, checkers: dict, jobset: dict, jobset_version: str, jobset_target: str = DEFAULT_JOBSET_VERSION):
        self.checkers, self.jobset, self.jobset_version = checkers, jobset, jobset_version
        self.jobset_target = jobset_target


def _release(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in path.stem.split("-v", 1)[1].split("."))


def jobset_release(major_minor: str) -> Path:
    """The shipped CRD for JobSet X.Y: the newest shipped release at or below it (each release
    only adds fields, so a field the older CRD lacks is one a cluster of that version may lack)."""
    wanted = tuple(int(p) for p in major_minor.split("."))
    shipped = sorted(SCHEMA_DIR.glob("jobset-v*.json"), key=_release)
    usable = [p for p in shipped if _release(p)[:2] <= wanted]
    if not usable:
        raise ValueError("no JobSet CRD shipped for v%s (oldest: %s)" % (major_minor, shipped[0].stem))
    return usable[-1]


@functools.lru_cache(maxsize=None)
def argo_definitions(argo_version: str = DEFAULT_ARGO_VERSION) -> dict:
    """Argo's schema definitions (with the Kubernetes types it embeds), widened, closed, refs inlined."""
    defs = json.loads((SCHEMA_DIR / ("argo-workflows-%s.json" % argo_version)).read_text())["definitions"]
    _widen_argo(defs)
    _close(defs)
    _inline_refs(defs, defs)
    return defs


def definition_errors(name: str, instance: Any) -> list[tuple[list, str]]:
    """(path, message) of each way ``instance`` breaks definition ``name`` of Argo's schema,
    e.g. io.k8s.api.core.v1.SecurityContext for a value checked on its own."""
    checker = Checker(argo_definitions()[name], list_types=False)
    return [(list(e.absolute_path), e.message) for e in checker.validator.iter_errors(instance)]


def pod_spec_errors(fields: dict) -> list[tuple[list, str]]:
    """(path, message) of each way ``fields``, some fields of a pod's spec, break Kubernetes'
    PodSpec schema: the one the default JobSet release's CRD embeds (Argo's schema has none)."""
    checker = _pod_spec_checker()
    return [(list(e.absolute_path), e.message) for e in checker.validator.iter_errors(fields)]


@functools.lru_cache(maxsize=None)
def _pod_spec_checker() -> Checker:
    node = json.loads(jobset_release(DEFAULT_JOBSET_VERSION).read_text())
    _close(node)
    for key in ("spec", "replicatedJobs", None, "template", "spec", "template", "spec"):
        node = node["items"] if key is None else node["properties"][key]
    return Checker({k: v for k, v in node.items() if k != "required"}, list_types=True)  # a part of a spec


@functools.lru_cache(maxsize=None)
def schemas(argo_version: str = DEFAULT_ARGO_VERSION, jobset_version: str = DEFAULT_JOBSET_VERSION) -> Schemas:
    """Built on the first call for each pair of versions only."""
    defs = argo_definitions(argo_version)
    jobset = json.loads(jobset_release(jobset_version).read_text())
    _close(jobset)
    # The CRD leaves metadata free-form; kubectl's strict validation checks it as ObjectMeta.
    jobset["properties"]["metadata"] = defs["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]
    checkers = {kind: Checker(defs[ARGO + kind], list_types=False) for kind in ARGO_KINDS}
    checkers["JobSet"] = Checker(jobset, list_types=True)
    return Schemas(checkers, jobset, jobset["x-upstream"]["version"], jobset_version)


def schema_has_field(schema: dict, dotted: str) -> bool:
    """Can the gjson-style path a.b.0.c exist in objects matching `schema`?"""
    node = schema
    for part in dotted.split("."):
        if node.get("type") == "array":
            if not part.isdigit():
                return False
            node = node.get("items", {})
        elif part in node.get("properties", {}):
            node = node["properties"][part]
        elif "properties" in node:
            return isinstance(node.get("additionalProperties"), dict)
        else:
            return True  # free-form object or map
    return True
