"""Check the documents mfargo emits before they are written, offline.

Why: Argo's default CRDs don't validate a WorkflowTemplate's spec and its controller drops
unknown fields silently, and a bad JobSet manifest only fails when its step runs (`kubectl
create` validates strictly). So every emitted document is checked here against the schemas
shipped in mfargo/schemas/ (Argo v4.1.2, JobSet v0.12.0; see its README), strictly, plus the
`argo lint` / JobSet-webhook rules a schema can't express. Schemas load on first use.
"""
import difflib
import functools
import json
import re
from pathlib import Path

import yaml
from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.exceptions import best_match

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
ARGO = "io.argoproj.workflow.v1alpha1."
ARGO_KINDS = ("WorkflowTemplate", "Workflow", "CronWorkflow")
LIGHT_KINDS = ("Role", "RoleBinding", "ServiceAccount", "Sensor")  # no schema shipped
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
ACTIONS = ("get", "create", "apply", "delete", "replace", "patch")
MAX_PROBLEMS = 50  # per document

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")  # also label values, when non-empty
ARGO_FIELD_NAME = re.compile(r"^[a-zA-Z0-9][-a-zA-Z0-9]*$")  # template/task/step names, <= 128
PARAM_NAME = re.compile(r"^[-a-zA-Z0-9_]+$")
DEPENDS_REF = re.compile(r"([A-Za-z0-9][-A-Za-z0-9]*)(?:\.(\w+))?")
TASK_RESULTS = {"Succeeded", "Failed", "Errored", "Skipped", "Omitted", "Daemoned", "AnySucceeded", "AllFailed"}


# --- schemas: loaded once, made strict, refs inlined ------------------------------------------
def _widen_argo(defs):
    """Argo's generated schema types these as strings, but its Go types accept numbers too."""
    defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = {"type": ["integer", "string"]}
    defs["io.k8s.apimachinery.pkg.api.resource.Quantity"] = {"type": ["number", "string"]}
    scalar = {"type": ["string", "number", "boolean"]}  # wfv1.AnyString
    param = defs[ARGO + "Parameter"]["properties"]
    param.update(default=scalar, value=scalar, description=scalar)
    param["enum"] = {"type": "array", "items": scalar}
    defs[ARGO + "ValueFrom"]["properties"]["default"] = scalar


def _close(node):
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


def _inline_refs(node, defs):
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


def _unique_list(validator, list_type, instance, schema):
    """The API server's x-kubernetes-list-type rule for CRDs: map keys / set items are unique."""
    if list_type not in ("map", "set") or not isinstance(instance, list):
        return
    keys = schema.get("x-kubernetes-list-map-keys") or []
    defaults = {k: s.get("default") for k, s in schema.get("items", {}).get("properties", {}).items()}
    first = {}
    for i, item in enumerate(instance):
        if list_type == "map":
            if not isinstance(item, dict):
                continue
            ident = json.dumps([item.get(k, defaults.get(k)) for k in keys], default=str)
        else:
            ident = json.dumps(item, sort_keys=True, default=str)
        if ident in first:
            yield ValidationError("duplicate of [%d] (%s %s); x-kubernetes-list-type=%s lists must be unique"
                                  % (first[ident], "/".join(keys) or "value", ident, list_type), path=[i])
        first.setdefault(ident, i)


# Speed: jsonschema's descend() into a subschema costs ~5 us (it builds a new validator). Most
# subschemas only say {"type": "string"} or similar, so check those inline and descend only when
# the quick test fails (to get jsonschema's own error) or the subschema says more.
_TYPE_TESTS = {
    "string": lambda v: isinstance(v, str), "boolean": lambda v: v is True or v is False,
    "integer": lambda v: type(v) is int, "number": lambda v: type(v) in (int, float),
    "object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
}
_quick_tests = {}  # id(subschema) -> (subschema, test or None)


def _type_only_test(schema):
    if not isinstance(schema, dict) or not all(
            k in ("type", "format", "default", "$comment") or (k.startswith("x-") and k != "x-kubernetes-list-type")
            for k in schema):
        return None
    types = schema.get("type")
    tests = [_TYPE_TESTS.get(t) for t in ([types] if isinstance(types, str) else types or [])]
    if not tests or None in tests:
        return None
    return tests[0] if len(tests) == 1 else lambda v: any(t(v) for t in tests)


def _quick_ok(value, schema):
    entry = _quick_tests.get(id(schema))
    if entry is None:  # keep the schema referenced so its id is never reused
        entry = _quick_tests[id(schema)] = (schema, _type_only_test(schema))
    return entry[1] is not None and entry[1](value)


_BASE = Draft202012Validator.VALIDATORS


def _properties(validator, properties, instance, schema):
    if isinstance(instance, dict):
        for name, sub in properties.items():
            if name in instance and not _quick_ok(instance[name], sub):
                yield from validator.descend(instance[name], sub, path=name, schema_path=name)


def _items(validator, items, instance, schema):
    if not (isinstance(instance, list) and isinstance(items, dict) and "prefixItems" not in schema):
        yield from _BASE["items"](validator, items, instance, schema)
        return
    for i, value in enumerate(instance):
        if not _quick_ok(value, items):
            yield from validator.descend(value, items, path=i)


def _additional(validator, extra_schema, instance, schema):
    if not (isinstance(instance, dict) and isinstance(extra_schema, dict) and "patternProperties" not in schema):
        yield from _BASE["additionalProperties"](validator, extra_schema, instance, schema)
        return
    known = schema.get("properties", {})
    for name, value in instance.items():
        if name not in known and not _quick_ok(value, extra_schema):
            yield from validator.descend(value, extra_schema, path=name)


ArgoValidator = validators.extend(Draft202012Validator, {
    "properties": _properties, "items": _items, "additionalProperties": _additional})
JobSetValidator = validators.extend(ArgoValidator, {"x-kubernetes-list-type": _unique_list})


@functools.lru_cache(maxsize=None)
def _schemas():
    """(validators by kind, the JobSet schema, its version): built on the first call only."""
    argo = json.loads((SCHEMA_DIR / "argo-workflows.json").read_text())
    defs = argo["definitions"]
    _widen_argo(defs)
    _close(defs)
    _inline_refs(defs, defs)
    jobset = json.loads((SCHEMA_DIR / "jobset.json").read_text())
    _close(jobset)
    # The CRD leaves metadata free-form; kubectl's strict validation checks it as ObjectMeta.
    jobset["properties"]["metadata"] = defs["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]
    checkers = {kind: ArgoValidator(defs[ARGO + kind]) for kind in ARGO_KINDS}
    checkers["JobSet"] = JobSetValidator(jobset)
    return checkers, jobset, jobset["x-upstream"]["version"]


# --- Argo tags inside manifests ----------------------------------------------------------------
TAG = re.compile(r"{{.*?}}", re.S)
TOKEN = re.compile(r"__argo_tag_(\d+)__")


class Tag(str):
    """A whole unquoted YAML value that was an Argo tag: its type is only known at run time."""


class _ManifestLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """Safe YAML without timestamps (Go's YAML-to-JSON keeps them strings), tokens -> Tag."""
    yaml_implicit_resolvers = {c: [r for r in rs if r[0] != "tag:yaml.org,2002:timestamp"]
                               for c, rs in yaml.SafeLoader.yaml_implicit_resolvers.items()}


_ManifestLoader.add_implicit_resolver("!argo-tag", re.compile(r"^(__argo_tag_\d+__)+$"), ["_"])
_ManifestLoader.add_constructor("!argo-tag", lambda loader, node: Tag(loader.construct_scalar(node)))


def parse_manifest(text):
    """(documents, tags) for a resource manifest; `__argo_tag_<i>__` stands for tags[i]."""
    tags = []

    def token(m):
        tags.append(m.group(0))
        return "__argo_tag_%d__" % (len(tags) - 1)

    docs = yaml.load_all(TAG.sub(token, text), Loader=_ManifestLoader)
    return [_drop_nulls(d) for d in docs if d is not None], tags


def _has_tag(s):
    return isinstance(s, str) and ("{{" in s or "__argo_tag_" in s)


# --- helpers -------------------------------------------------------------------------------------
def _drop_nulls(x):
    """`key: null` means absent, as in Go decoding and CRD pruning."""
    if isinstance(x, dict):
        return {k: _drop_nulls(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_drop_nulls(v) for v in x]
    return x


def _get(x, *keys):
    """x[k1][k2]... if every step is a mapping, else {}: tolerates malformed documents."""
    for k in keys:
        x = x.get(k) if isinstance(x, dict) else None
    return x if isinstance(x, dict) else {}


IN_MANIFEST = " -> JobSet "  # path marker: what follows is inside resource.manifest


def _path(parts):
    out, dot = "", ""
    for p in parts:
        if p is IN_MANIFEST:
            out, dot = out + p, ""
        else:
            out, dot = out + ("[%d]" % p if isinstance(p, int) else dot + str(p)), "."
    return out or "(root)"


def _label_key_problem(key):
    prefix, _, name = str(key).rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return "prefix %r must be a lowercase DNS subdomain" % prefix
    if len(name) > 63 or not LABEL_NAME.match(name):
        return "name %r must be 1-63 chars of [A-Za-z0-9-_.], alphanumeric at both ends" % name
    return None


def _label_value_problem(value):
    if value and (len(value) > 63 or not LABEL_NAME.match(value)):
        return "label value %r must be <= 63 chars of [A-Za-z0-9-_.], alphanumeric at both ends" % value
    return None


# One selector requirement: [!]key, key op value, key in|notin (v1, v2).
REQUIREMENT = re.compile(r"\s*(!?)\s*([^\s!=(),<>]+)(?:\s*(==|=|!=|<|>)\s*([^\s!=(),<>]*)"
                         r"|\s+(in|notin)\s*\(([^()]*)\))?\s*")


def parse_selector(expr):
    """Parse an Argo success/failureCondition (a Kubernetes label selector whose keys are field
    paths). Returns [(key, op, values)]; raises ValueError saying what is wrong."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(expr + ","):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    reqs = []
    for part in parts:
        m = REQUIREMENT.fullmatch(part)
        if not m or (m.group(1) and m.group(3, 5) != (None, None)):
            raise ValueError("cannot parse %r (requirements are `key op value`, joined by ',')" % part.strip())
        neg, name, op, value, set_op, values = m.groups()
        vals = [v.strip() for v in values.split(",")] if set_op else [value] if op else []
        if set_op and not all(vals):
            raise ValueError("%s needs (value[, value...])" % set_op)
        if op in ("<", ">") and not re.fullmatch(r"[-+]?\d+", value):
            raise ValueError("%s %s needs an integer, got %r" % (name, op, value))
        problem = _label_key_problem(name) or next(filter(None, map(_label_value_problem, vals)), None)
        if problem:
            raise ValueError(problem)
        reqs.append((name, "!" if neg else op or set_op or "exists", vals))
    return reqs


def schema_has_field(schema, dotted):
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


# --- the checker ---------------------------------------------------------------------------------
class _Doc:
    """Problems found in one document, with paths and Argo tags put back into messages."""

    def __init__(self, where):
        self.where, self.problems, self.tags = where, [], []

    def add(self, path, msg):
        if self.tags:
            msg = TOKEN.sub(lambda m: self.tags[int(m.group(1))], msg)
        self.problems.append("%s: %s: %s" % (self.where, _path(path), msg))

    def schema(self, validator, instance, prefix):
        for e in sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path]):
            if isinstance(e.instance, Tag):
                continue
            if e.context:
                e = best_match(e.context)
            path = list(prefix) + list(e.absolute_path)
            if e.validator == "additionalProperties" and isinstance(e.instance, dict):
                known = list(e.schema.get("properties", {}))
                for k in e.instance:
                    if k not in known:
                        hint = difflib.get_close_matches(str(k), known, 1)
                        self.add(path + [k], "unknown field" + (" (did you mean %r?)" % hint[0] if hint else ""))
            else:
                self.add(path, e.message)

    def labels(self, meta, path):
        for field in ("labels", "annotations"):
            items = meta.get(field) if isinstance(meta, dict) else None
            for k, v in (items.items() if isinstance(items, dict) else ()):
                problem = None if _has_tag(k) else _label_key_problem(k)
                if problem:
                    self.add(path + [field, k], "invalid key: " + problem)
                problem = field == "labels" and isinstance(v, str) and not _has_tag(v) and _label_value_problem(v)
                if problem:
                    self.add(path + [field, k], problem)


def _check_name(doc, kind, meta, limit):
    name = meta.get("name") or meta.get("generateName")
    if not isinstance(name, str) or not name:
        doc.add(["metadata"], "metadata.name (or generateName) is required")
    elif not _has_tag(name):
        full = name if meta.get("name") else name + "xxxxx"  # generateName gets 5 random chars
        if len(full) > limit or not DNS1123_SUBDOMAIN.match(full):
            doc.add(["metadata", "name" if meta.get("name") else "generateName"],
                    "%r: %s names are lowercase DNS subdomains of at most %d chars" % (name, kind, limit))


def _check_argo(doc, obj, kind):
    checkers, jobset, version = _schemas()
    cron_spec = obj.get("spec") if kind == "CronWorkflow" else None
    if isinstance(cron_spec, dict) and isinstance(cron_spec.get("schedule"), str) and "schedules" not in cron_spec:
        # Argo < 3.6 spells `schedules: [x]` as `schedule: x` (removed in Argo 4, whose schema this is).
        spec_copy = dict(cron_spec, schedules=[cron_spec["schedule"]])
        del spec_copy["schedule"]
        obj = dict(obj, spec=spec_copy)
    doc.schema(checkers[kind], obj, [])
    meta = _get(obj, "metadata")
    _check_name(doc, kind, meta, 52 if kind == "CronWorkflow" else 63)  # Cron adds an 11-char suffix
    doc.labels(meta, ["metadata"])
    base = ["spec", "workflowSpec"] if kind == "CronWorkflow" else ["spec"]
    spec = _get(obj, *base)
    templates = [t if isinstance(t, dict) else {} for t in spec.get("templates") or []]
    names = [t.get("name") for t in templates]
    template_names = {n for n in names if isinstance(n, str)}
    seen = set()
    for i, (t, name) in enumerate(zip(templates, names)):
        tp = base + ["templates", i]
        if name in seen:
            doc.add(tp + ["name"], "duplicate template name %r" % name)
        elif not (isinstance(name, str) and len(name) <= 128 and ARGO_FIELD_NAME.match(name)):
            doc.add(tp + ["name"], "%r: template names are 1-128 chars of [a-zA-Z0-9-], alphanumeric first" % name)
        seen.add(name)
        for io in ("inputs", "outputs"):
            for j, par in enumerate(_get(t, io).get("parameters") or []):
                pname = par.get("name") if isinstance(par, dict) else None
                if not (isinstance(pname, str) and PARAM_NAME.match(pname)):
                    doc.add(tp + [io, "parameters", j, "name"], "%r: parameter names are [-a-zA-Z0-9_]+" % pname)
        _check_tasks(doc, t, tp, template_names)
        if isinstance(t.get("resource"), dict):
            _check_resource(doc, t, tp, jobset, version)
    for ref_path in (["entrypoint"], ["onExit"]):
        ref = spec.get(ref_path[0])
        if ref and not _has_tag(ref) and ref not in template_names and not spec.get("workflowTemplateRef"):
            doc.add(base + ref_path, "no template named %r" % ref)
    for hook_name, hook in (spec.get("hooks") or {}).items():
        ref = hook.get("template") if isinstance(hook, dict) else None
        if ref and not _has_tag(ref) and ref not in template_names:
            doc.add(base + ["hooks", hook_name, "template"], "no template named %r" % ref)
    if not spec.get("entrypoint") and not spec.get("workflowTemplateRef") and kind != "WorkflowTemplate":
        doc.add(base, "entrypoint is required")


def _check_tasks(doc, t, tp, template_names):
    """DAG tasks and steps: names, template references, dependencies / depends."""
    tasks = [(tp + ["dag", "tasks", j], s) for j, s in enumerate(_get(t, "dag").get("tasks") or [])]
    steps = [(tp + ["steps", j, k], s) for j, group in enumerate(t.get("steps") or [])
             for k, s in enumerate(group if isinstance(group, list) else [])]
    task_names = {s.get("name") for _, s in tasks if isinstance(s, dict)}
    uses_depends = any(isinstance(s, dict) and s.get("depends") for _, s in tasks)
    seen = set()
    for sp, s in tasks + steps:
        if not isinstance(s, dict):
            continue
        name = s.get("name")
        if not (isinstance(name, str) and len(name) <= 128 and ARGO_FIELD_NAME.match(name)):
            doc.add(sp + ["name"], "%r: task/step names are 1-128 chars of [a-zA-Z0-9-], alphanumeric first" % name)
        elif sp[len(tp)] == "dag" and name in seen:
            doc.add(sp + ["name"], "duplicate task name %r" % name)
        elif sp[len(tp)] == "dag" and uses_depends and name[0].isdigit():
            doc.add(sp + ["name"], "%r: task names can't start with a digit when `depends` is used" % name)
        seen.add(name)
        for field in ("template", "onExit"):
            ref = s.get(field)
            if isinstance(ref, str) and ref and not _has_tag(ref) and ref not in template_names:
                doc.add(sp + [field], "no template named %r" % ref)
        if sp[len(tp)] != "dag":
            continue
        for dep in s.get("dependencies") or []:
            if dep not in task_names:
                doc.add(sp + ["dependencies"], "no task named %r" % dep)
        depends = s.get("depends")
        if isinstance(depends, str) and not _has_tag(depends):
            for m in DEPENDS_REF.finditer(depends):
                if m.group(1) not in task_names:
                    doc.add(sp + ["depends"], "no task named %r" % m.group(1))
                elif m.group(2) and m.group(2) not in TASK_RESULTS:
                    doc.add(sp + ["depends"], "%r: unknown task result .%s" % (m.group(0), m.group(2)))


def _check_resource(doc, t, tp, jobset, version):
    res, rp = t["resource"], tp + ["resource"]
    action = res.get("action")
    if action not in ACTIONS and not _has_tag(action):
        doc.add(rp + ["action"], "%r: must be one of %s" % (action, ", ".join(ACTIONS)))
    if res.get("manifest") and res.get("manifestFrom"):
        doc.add(rp, "manifest and manifestFrom are exclusive")
    elif action not in ("get", "delete") and not (res.get("manifest") or res.get("manifestFrom")):
        doc.add(rp, "manifest or manifestFrom is required")
    outputs = _get(t, "outputs").get("parameters") or []
    for j, out in enumerate(outputs):
        vf = _get(out, "valueFrom")
        if vf and not (vf.get("jsonPath") or vf.get("jqFilter")):
            doc.add(tp + ["outputs", "parameters", j, "valueFrom"], "resource templates need jsonPath or jqFilter")
    if action == "delete" and (res.get("successCondition") or res.get("failureCondition") or outputs):
        doc.add(rp, "delete supports no successCondition, failureCondition or outputs")
    obj = None
    if isinstance(res.get("manifest"), str) and res["manifest"].strip():
        try:
            objs, doc.tags = parse_manifest(res["manifest"])
            if len(objs) == 1 and isinstance(objs[0], dict):
                obj = objs[0]
            else:
                doc.add(rp + ["manifest"], "must hold exactly one object (a resource template manages one)")
        except yaml.YAMLError as e:
            doc.add(rp + ["manifest"], "not valid YAML: " + " ".join(str(e).split()))
    if obj is not None and not (obj.get("apiVersion") and obj.get("kind")):
        doc.add(rp + ["manifest"], "the object needs apiVersion and kind")
    is_jobset = obj is not None and obj.get("kind") == "JobSet"
    for cond in ("successCondition", "failureCondition"):
        expr = res.get(cond)
        if not isinstance(expr, str) or not expr.strip() or _has_tag(expr):
            continue
        try:
            reqs = parse_selector(expr)
        except ValueError as e:
            doc.add(rp + [cond], "%r is not a valid label selector: %s" % (expr, e))
            continue
        for key, _, _ in reqs if is_jobset else ():
            if not schema_has_field(jobset, key):
                doc.add(rp + [cond], "JobSet %s has no field %s: this condition never matches" % (version, key))
    if obj is not None:
        if is_jobset:
            _check_jobset(doc, obj, rp + ["manifest", IN_MANIFEST])
        elif not (_get(obj, "metadata").get("name") or _get(obj, "metadata").get("generateName")):
            doc.add(rp + ["manifest", "metadata"], "the object needs metadata.name or generateName")
    doc.tags = []


def _check_jobset(doc, js, prefix):
    """Schema (strict, list-type uniqueness) plus the JobSet webhook's reference and name rules."""
    checkers, _, _ = _schemas()
    if js.get("apiVersion") != JOBSET_API:
        doc.add(prefix + ["apiVersion"], "JobSet is served as %s, not %r" % (JOBSET_API, js.get("apiVersion")))
    doc.schema(checkers["JobSet"], js, prefix)
    meta, spec = _get(js, "metadata"), _get(js, "spec")
    doc.labels(meta, prefix + ["metadata"])
    if not (meta.get("name") or meta.get("generateName")):
        doc.add(prefix + ["metadata"], "the JobSet needs metadata.name or generateName")
    name = str(meta.get("name") or "%sxxxxx" % meta.get("generateName"))  # generateName: + 5 chars
    rjobs = [r if isinstance(r, dict) else {} for r in spec.get("replicatedJobs") or []]
    rnames = [r.get("name") for r in rjobs]
    for i, r in enumerate(rjobs):
        rp = prefix + ["spec", "replicatedJobs", i]
        doc.labels(_get(r, "template", "metadata"), rp + ["template", "metadata"])
        pod_meta = ["template", "spec", "template", "metadata"]
        doc.labels(_get(r, *pod_meta), rp + pod_meta)
        if r.get("name") in rnames[:i]:
            doc.add(rp + ["name"], "duplicate replicatedJob name %r" % r.get("name"))
        for d in r.get("dependsOn") or []:
            if isinstance(d, dict) and d.get("name") not in rnames[:i]:
                doc.add(rp + ["dependsOn"], "%r is not an earlier replicatedJob" % d.get("name"))
        replicas = r.get("replicas", 1)
        if isinstance(r.get("name"), str) and isinstance(replicas, int) and not _has_tag(name + r["name"]):
            job = "%s-%s-%d" % (name, r["name"], max(replicas - 1, 0))
            if len(job) > 63 or not DNS1035.match(job):
                doc.add(rp + ["name"], "child Job name %r must be a DNS-1035 label of at most 63 chars" % job)
    for policy in ("successPolicy", "failurePolicy"):
        pol = _get(spec, policy)
        targets = [([policy], pol.get("targetReplicatedJobs"))]
        targets += [([policy, "rules", j], rule.get("targetReplicatedJobs"))
                    for j, rule in enumerate(pol.get("rules") or []) if isinstance(rule, dict)]
        for path, names in targets:
            for n in names or []:
                if n not in rnames:
                    doc.add(prefix + ["spec"] + path + ["targetReplicatedJobs"], "no replicatedJob named %r" % n)
    coordinator = _get(spec, "coordinator")
    if coordinator and coordinator.get("replicatedJob") not in rnames:
        doc.add(prefix + ["spec", "coordinator"], "no replicatedJob named %r" % coordinator.get("replicatedJob"))


def _check_light(doc, obj):
    """Role, RoleBinding, ServiceAccount, Sensor: no schema shipped, so only the envelope."""
    for field in ("apiVersion", "kind"):
        if not isinstance(obj.get(field), str) or not obj.get(field):
            doc.add([field], "is required")
    name = _get(obj, "metadata").get("name")
    if not isinstance(name, str) or not name:
        doc.add(["metadata", "name"], "is required")


def validate_documents(docs):
    """One line per problem in `docs` (parsed YAML documents), `Kind/name: json.path: message`;
    an empty list means every document is valid."""
    problems = []
    for n, raw in enumerate(docs):
        if not isinstance(raw, dict):
            problems.append("document %d: not a mapping (%s)" % (n, type(raw).__name__))
            continue
        obj = _drop_nulls(raw)
        kind, meta = obj.get("kind"), _get(obj, "metadata")
        doc = _Doc("%s/%s" % (kind, meta.get("name") or meta.get("generateName") or "document-%d" % n))
        try:
            if kind in ARGO_KINDS:
                _check_argo(doc, obj, kind)
            elif kind == "JobSet":
                _check_jobset(doc, obj, [])
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
