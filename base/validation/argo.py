"""Argo rules: the schema (strict) plus what `argo lint` checks and a schema cannot say:
names, references between templates and tasks, `depends` expressions, resource templates."""

from __future__ import annotations

import re

import yaml

from mfargo.base import cron_syntax, k8s_syntax, template_defaults

from .jobset import check_jobset
from .pods import check_pod_spec
from .report import IN_MANIFEST, Doc, get, has_tag, parse_manifest, with_plausible_values
from .schema import Schemas, schema_has_field

ACTIONS = ("get", "create", "apply", "delete", "replace", "patch")
PARAM_NAME = re.compile(r"^[-a-zA-Z0-9_]+$")
DEPENDS_REF = re.compile(r"([A-Za-z0-9][-A-Za-z0-9]*)(?:\.(\w+))?")
TASK_RESULTS = {"Succeeded", "Failed", "Errored", "Skipped", "Omitted", "Daemoned", "AnySucceeded", "AllFailed"}


def check_name(doc: Doc, kind: str, meta: dict, limit: int) -> None:
    name = meta.get("name") or meta.get("generateName")
    if not isinstance(name, str) or not name:
        doc.add(["metadata"], "metadata.name (or generateName) is required")
    elif not has_tag(name):
        full = name if meta.get("name") else name + "xxxxx"  # generateName gets 5 random chars
        if not k8s_syntax.is_dns1123_subdomain(full, limit):
            doc.add(["metadata", "name" if meta.get("name") else "generateName"],
                    "%r: %s names are lowercase DNS subdomains of at most %d chars" % (name, kind, limit))


def check_argo(doc: Doc, obj: dict, kind: str, shipped: Schemas) -> None:
    """`shipped`: the schemas of the target Argo and JobSet versions (Argo 3.7's CronWorkflow has
    the single-string `schedule` that Argo 4 removed)."""
    doc.schema(shipped.checkers[kind], obj, [])
    meta = get(obj, "metadata")
    check_name(doc, kind, meta, 52 if kind == "CronWorkflow" else 63)  # Cron adds an 11-char suffix
    doc.labels(meta, ["metadata"])
    base = ["spec", "workflowSpec"] if kind == "CronWorkflow" else ["spec"]
    spec = get(obj, *base)
    templates = [t if isinstance(t, dict) else {} for t in spec.get("templates") or []]
    names = [t.get("name") for t in templates]
    template_names = {n for n in names if isinstance(n, str)}
    _check_spec(doc, kind, obj, spec, base)
    shared_volumes = [(base + ["volumes", j], v) for j, v in enumerate(spec.get("volumes") or [])]
    defaults = spec.get("templateDefaults")
    seen = set()
    for i, (t, name) in enumerate(zip(templates, names)):
        tp = base + ["templates", i]
        doc.template = name if isinstance(name, str) else None
        doc.labels(t.get("metadata"), tp + ["metadata"])
        # The pod Argo runs: the template with templateDefaults merged in.
        pod = template_defaults.merged(defaults, t) if isinstance(name, str) and isinstance(defaults, dict) else t
        containers = [(tp + [k], pod[k]) for k in ("container", "script") if isinstance(pod.get(k), dict)]
        volumes = shared_volumes + [(tp + ["volumes", j], v) for j, v in enumerate(pod.get("volumes") or [])]
        check_pod_spec(doc, pod, tp, containers, volumes)
        if name in seen:
            doc.add(tp + ["name"], "duplicate template name %r" % name)
        elif not k8s_syntax.is_argo_field_name(name):
            doc.add(tp + ["name"], "%r: template names are 1-128 chars of [a-zA-Z0-9-], alphanumeric first" % name)
        seen.add(name)
        for io in ("inputs", "outputs"):
            for j, par in enumerate(get(t, io).get("parameters") or []):
                pname = par.get("name") if isinstance(par, dict) else None
                if not (isinstance(pname, str) and PARAM_NAME.match(pname)):
                    doc.add(tp + [io, "parameters", j, "name"], "%r: parameter names are [-a-zA-Z0-9_]+" % pname)
        _check_tasks(doc, t, tp, template_names)
        if isinstance(t.get("resource"), dict):
            _check_resource(doc, t, tp, shipped)
    doc.template = None
    for ref_path in (["entrypoint"], ["onExit"]):
        ref = spec.get(ref_path[0])
        if ref and not has_tag(ref) and ref not in template_names and not spec.get("workflowTemplateRef"):
            doc.add(base + ref_path, "no template named %r" % ref)
    for hook_name, hook in (spec.get("hooks") or {}).items():
        ref = hook.get("template") if isinstance(hook, dict) else None
        if ref and not has_tag(ref) and ref not in template_names:
            doc.add(base + ["hooks", hook_name, "template"], "no template named %r" % ref)
    if not spec.get("entrypoint") and not spec.get("workflowTemplateRef") and kind != "WorkflowTemplate":
        doc.add(base, "entrypoint is required")


def _check_spec(doc: Doc, kind: str, obj: dict, spec: dict, base: list) -> None:
    """The workflow's own fields Argo or the API server would refuse: parameter names given
    twice, the service account, the pod defaults, a CronWorkflow's schedules and timezone."""
    seen = set()
    for j, par in enumerate(get(spec, "arguments").get("parameters") or []):
        name = par.get("name") if isinstance(par, dict) else None
        if name in seen:
            doc.add(base + ["arguments", "parameters", j, "name"], "duplicate parameter name %r" % name)
        seen.add(name)
    account = spec.get("serviceAccountName")
    if isinstance(account, str) and not has_tag(account) and not k8s_syntax.is_dns1123_subdomain(account):
        doc.add(base + ["serviceAccountName"], "%r is not a service account name (lowercase DNS-1123 subdomain)"
                % account)
    doc.labels(spec.get("podMetadata"), base + ["podMetadata"])
    defaults = get(spec, "templateDefaults")
    if isinstance(defaults.get("container"), dict):
        check_pod_spec(doc, {}, base + ["templateDefaults"],
                       [(base + ["templateDefaults", "container"], defaults["container"])], [])
    if kind == "CronWorkflow":
        cron = get(obj, "spec")
        schedules = cron.get("schedules") or ([cron["schedule"]] if cron.get("schedule") else [])
        for j, schedule in enumerate(schedules):
            problem = None if has_tag(schedule) else cron_syntax.cron_problem(schedule)
            if problem:
                doc.add(["spec", "schedules", j], problem)
        if cron.get("timezone"):
            problem = cron_syntax.timezone_problem(cron["timezone"])
            if problem:
                doc.add(["spec", "timezone"], problem)


def _check_tasks(doc: Doc, t: dict, tp: list, template_names: set) -> None:
    """DAG tasks and steps: names, template references, dependencies / depends."""
    tasks = [(tp + ["dag", "tasks", j], s) for j, s in enumerate(get(t, "dag").get("tasks") or [])]
    steps = [(tp + ["steps", j, k], s) for j, group in enumerate(t.get("steps") or [])
             for k, s in enumerate(group if isinstance(group, list) else [])]
    task_names = {s.get("name") for _, s in tasks if isinstance(s, dict)}
    uses_depends = any(isinstance(s, dict) and s.get("depends") for _, s in tasks)
    seen = set()
    for sp, s in tasks + steps:
        if not isinstance(s, dict):
            continue
        name = s.get("name")
        if not k8s_syntax.is_argo_field_name(name):
            doc.add(sp + ["name"], "%r: task/step names are 1-128 chars of [a-zA-Z0-9-], alphanumeric first" % name)
        elif sp[len(tp)] == "dag" and name in seen:
            doc.add(sp + ["name"], "duplicate task name %r" % name)
        elif sp[len(tp)] == "dag" and uses_depends and name[0].isdigit():
            doc.add(sp + ["name"], "%r: task names can't start with a digit when `depends` is used" % name)
        seen.add(name)
        for field in ("template", "onExit"):
            ref = s.get(field)
            if isinstance(ref, str) and ref and not has_tag(ref) and ref not in template_names:
                doc.add(sp + [field], "no template named %r" % ref)
        if sp[len(tp)] != "dag":
            continue
        for dep in s.get("dependencies") or []:
            if dep not in task_names:
                doc.add(sp + ["dependencies"], "no task named %r" % dep)
        depends = s.get("depends")
        if isinstance(depends, str) and not has_tag(depends):
            for m in DEPENDS_REF.finditer(depends):
                if m.group(1) not in task_names:
                    doc.add(sp + ["depends"], "no task named %r" % m.group(1))
                elif m.group(2) and m.group(2) not in TASK_RESULTS:
                    doc.add(sp + ["depends"], "%r: unknown task result .%s" % (m.group(0), m.group(2)))


def _check_resource(doc: Doc, t: dict, tp: list, shipped: Schemas) -> None:
    res, rp = t["resource"], tp + ["resource"]
    action = res.get("action")
    if action not in ACTIONS and not has_tag(action):
        doc.add(rp + ["action"], "%r: must be one of %s" % (action, ", ".join(ACTIONS)))
    if res.get("manifest") and res.get("manifestFrom"):
        doc.add(rp, "manifest and manifestFrom are exclusive")
    elif action not in ("get", "delete") and not (res.get("manifest") or res.get("manifestFrom")):
        doc.add(rp, "manifest or manifestFrom is required")
    outputs = get(t, "outputs").get("parameters") or []
    for j, out in enumerate(outputs):
        vf = get(out, "valueFrom")
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
        if not isinstance(expr, str) or not expr.strip() or has_tag(expr):
            continue
        try:
            reqs = k8s_syntax.parse_selector(expr)
        except ValueError as e:
            doc.add(rp + [cond], "%r is not a valid label selector: %s" % (expr, e))
            continue
        for req in reqs if is_jobset else ():
            if not schema_has_field(shipped.jobset, req.key):
                doc.add(rp + [cond], "JobSet %s has no field %s: this condition never matches"
                        % (shipped.jobset_version, req.key))
    if obj is not None:
        if is_jobset:
            check_jobset(doc, with_plausible_values(obj), rp + ["manifest", IN_MANIFEST], shipped)
        elif not (get(obj, "metadata").get("name") or get(obj, "metadata").get("generateName")):
            doc.add(rp + ["manifest", "metadata"], "the object needs metadata.name or generateName")
    doc.tags = []
