"""Refuse, before anything runs, what the local runner does not play: anything mfargo's
compiler never writes.

The runner plays mfargo's dialect of Argo, not Argo: the objects and fields below are the
ones ``templates/`` emits (``templates/argo_models.py`` lists its kinds; the examples and
the tests' compiled flows hold every one). Any other field is refused in one line naming
the template (and task) and the field, so a run never fails halfway at a node it could
never have executed, and the runner carries no code for what mfargo never writes.
Checked for every template of the document (Argo's lint also covers all of them):

* every object's fields are among the ones mfargo writes (the ``*_FIELDS`` tables);
* a container has a ``command``: the image's entrypoint is unknown locally;
* every ``{{...}}`` simple tag is one mfargo writes (:data:`SIMPLE_TAGS`), and every
  ``{{= expression}}``, ``valueFrom.expression``, hook ``expression``, ``when`` and
  ``depends`` one of the shapes mfargo writes (:mod:`runner.expr`);
* a ``podSpecPatch`` holds only mfargo's fields (:data:`POD_SPEC_PATCH_FIELDS`);
* a ``daemon`` is a container run by a DAG task that no task depends on (the shape of
  mfargo's run heartbeat: the runner stops it when the rest of its DAG is done);
* names and paths that would leave the work directory (:func:`contain.check_document`).
"""
from __future__ import annotations

import graphlib
import re
from typing import Any, Iterator

import yaml

from . import contain
from .expr import DEPENDS, EXPRESSION, WHEN, ExprError, depends_tasks, parse
from .model import WorkflowDoc, WorkflowError, template_type
from .substitute import TAG_RE

# The fields mfargo writes, per object (templates/argo_models.py's kinds, as emitted).
SPEC_FIELDS = ("entrypoint", "templates", "arguments", "parallelism", "activeDeadlineSeconds", "hooks",
               "serviceAccountName", "priority", "podGC", "podMetadata", "templateDefaults", "ttlStrategy",
               "workflowMetadata")
TEMPLATE_FIELDS = ("name", "container", "dag", "steps", "resource", "inputs", "outputs", "metadata",
                   "activeDeadlineSeconds", "volumes", "retryStrategy", "serviceAccountName", "nodeSelector",
                   "tolerations", "podSpecPatch", "daemon")
CONTAINER_FIELDS = ("name", "image", "command", "args", "env", "envFrom", "resources", "volumeMounts",
                    "terminationMessagePath", "imagePullPolicy", "ports", "securityContext")
RESOURCE_FIELDS = ("action", "manifest", "setOwnerReference", "successCondition", "failureCondition")
RESOURCE_CONDITION = re.compile(r"status\.terminalState == \w+")  # templates/jobset.py SUCCESS, FAILURE
VOLUME_FIELDS = ("name", "emptyDir", "persistentVolumeClaim")
VOLUME_MOUNT_FIELDS = ("name", "mountPath")
ENV_FIELDS = ("name", "value", "valueFrom")
ENV_VALUE_FROM_FIELDS = ("fieldRef", "secretKeyRef")  # templates/common.py identity_env, hooks.py
ENV_FROM_FIELDS = ("secretRef",)  # templates/common.py env_from
DAG_FIELDS = ("tasks",)
TASK_FIELDS = ("name", "template", "depends", "arguments", "when", "withParam")
STEP_FIELDS = ("name", "template", "arguments", "when")
HOOK_FIELDS = ("template", "expression")
RETRY_FIELDS = ("limit", "retryPolicy", "backoff")
BACKOFF_FIELDS = ("duration",)
RETRY_POLICIES = ("Always",)
PARAMETERS_ONLY = ("parameters",)  # inputs, outputs, arguments: no artifacts
INPUT_PARAMETER_FIELDS = ("name",)
OUTPUT_PARAMETER_FIELDS = ("name", "valueFrom")
VALUE_FROM_FIELDS = ("path", "expression")
ARGUMENT_FIELDS = ("name", "value")
WORKFLOW_PARAMETER_FIELDS = ("name", "value", "description")
# The pod fields mfargo's podSpecPatch holds (templates/common.py pod_spec_patch). Each is a
# no-op here: imagePullSecrets only matter to a kubelet pulling an image.
POD_SPEC_PATCH_FIELDS = ("imagePullSecrets",)
# The simple tags mfargo writes (a name is [\w-]+): anything else, e.g. Argo's
# {{workflow.creationTimestamp.Y}} or {{item.key}}, is refused.
SIMPLE_TAGS = re.compile(r"""\s*(workflow\.(name|namespace|status) | retries | item
    | inputs\.parameters\.[\w-]+ | (tasks|steps)\.[\w-]+\.outputs\.parameters\.[\w-]+ | tasks\.[\w-]+\.status)\s*""",
                         re.X)


def _only(obj: Any, allowed: tuple[str, ...], where: str, path: str) -> None:
    """``obj`` is a mapping whose keys are all ``allowed``; ``path`` names it (``retryStrategy.``)."""
    if not isinstance(obj, dict):
        raise WorkflowError(f"{where}: {path.rstrip('.') or 'it'} must be a mapping")
    for key in obj:
        if key not in allowed:
            raise WorkflowError(f"{where}: {path}{key} is not supported by the local runner")


def _each(items: Any, where: str, path: str) -> list:
    if items is None:
        return []
    if not isinstance(items, list):
        raise WorkflowError(f"{where}: {path} must be a list")
    return items


def _check_parameters(section: Any, name: str, fields: tuple[str, ...], where: str) -> None:
    if section is None:
        return
    _only(section, PARAMETERS_ONLY, where, f"{name}.")
    for p in _each(section.get("parameters"), where, f"{name}.parameters"):
        _only(p, fields, where, f"{name} parameter {p.get('name') if isinstance(p, dict) else p!r}: ")
        vf = p.get("valueFrom")
        if vf is not None:
            _only(vf, VALUE_FROM_FIELDS, where, f"{name} parameter {p.get('name')!r}: valueFrom.")
            if vf.get("expression"):
                _check_expression(str(vf["expression"]), f"{where}, {name} parameter {p.get('name')!r}, "
                                  "valueFrom.expression")


def _strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, list):
        for x in obj:
            yield from _strings(x)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _strings(k)
            yield from _strings(v)


def _check_expression(src: str, where: str, mode: str = EXPRESSION) -> None:
    """``src`` parses in ``mode``; a ``when``'s tags (substituted before it is read) read as a word."""
    if mode == WHEN:
        src = TAG_RE.sub("x", src)
    try:
        parse(src.strip(), mode)
    except ExprError as e:
        raise WorkflowError(f"{where}: {e}") from None


def _check_tags(obj: Any, where: str) -> None:
    for text in _strings(obj):
        for m in TAG_RE.finditer(text):
            body = m.group(1)
            if body.startswith("="):
                _check_expression(body[1:], f"{where}, {{{{={body[1:].strip()}}}}}")
            elif not SIMPLE_TAGS.fullmatch(body):
                raise WorkflowError(f"{where}: tag {{{{{body}}}}} is not supported by the local runner")


def _check_container(c: Any, where: str) -> None:
    _only(c, CONTAINER_FIELDS, where, "container.")
    if not c.get("command"):
        raise WorkflowError(f"{where}: container {c.get('name') or 'main'!r} has no command: the image's "
                            "entrypoint is unknown to the local runner")
    for m in _each(c.get("volumeMounts"), where, "container.volumeMounts"):
        _only(m, VOLUME_MOUNT_FIELDS, where, f"volumeMount {m.get('name') if isinstance(m, dict) else m!r}: ")
    for e in _each(c.get("env"), where, "container.env"):
        _only(e, ENV_FIELDS, where, f"env {e.get('name') if isinstance(e, dict) else e!r}: ")
        if e.get("valueFrom") is not None:
            _only(e["valueFrom"], ENV_VALUE_FROM_FIELDS, where, f"env {e.get('name')!r}: valueFrom.")
    for e in _each(c.get("envFrom"), where, "container.envFrom"):
        _only(e, ENV_FROM_FIELDS, where, "envFrom: ")


def _check_pod_spec_patch(patch: Any, where: str) -> None:
    """Argo merges the patch (JSON or YAML text) into the pod; only mfargo's fields are read."""
    try:
        fields = yaml.safe_load(patch) if isinstance(patch, str) else patch
    except yaml.YAMLError:
        fields = None
    if not isinstance(fields, dict):
        raise WorkflowError(f"{where}: podSpecPatch is not a JSON or YAML object")
    for key in fields:
        if key not in POD_SPEC_PATCH_FIELDS:
            raise WorkflowError(f"{where}: podSpecPatch field {key!r} is not supported by the local runner "
                                f"(mfargo writes only {', '.join(POD_SPEC_PATCH_FIELDS)})")


def _check_hook(hook: Any, where: str) -> None:
    """mfargo's hooks (spec.hooks only) run a template when their expression holds."""
    _only(hook, HOOK_FIELDS, where, "")
    if not hook.get("expression"):
        raise WorkflowError(f"{where}: a hook without an expression is not supported by the local runner")
    _check_expression(str(hook["expression"]), f"{where}.expression")


def _check_task(task: Any, where: str, fields: tuple[str, ...], kind: str) -> None:
    tname = f"{where}, {kind} {task.get('name') if isinstance(task, dict) else task!r}"
    _only(task, fields, tname, "")
    if task.get("when") not in (None, ""):
        _check_expression(str(task["when"]), f"{tname}, when", WHEN)
    if task.get("depends") not in (None, ""):
        _check_expression(str(task["depends"]), f"{tname}, depends", DEPENDS)
    _check_parameters(task.get("arguments"), "arguments", ARGUMENT_FIELDS, tname)


def _check_graph(tasks: list, where: str) -> None:
    """Task names unique, every ``depends`` naming one of them, no cycle (graphlib)."""
    deps: dict[str, list[str]] = {}
    for t in tasks:
        if t.get("name") in deps:
            raise WorkflowError(f"{where}: duplicate task name {t.get('name')!r}")
        deps[t.get("name")] = depends_tasks(parse(str(t["depends"]), DEPENDS)) if t.get("depends") else []
    for name, needs in deps.items():
        for ref in needs:
            if ref not in deps:
                raise WorkflowError(f"{where}, task {name!r}: depends on unknown task {ref!r}")
    try:
        graphlib.TopologicalSorter(deps).prepare()
    except graphlib.CycleError as e:
        raise WorkflowError(f"{where}: dependency cycle {' -> '.join(map(str, e.args[1]))}") from None


def check_template(tmpl: dict) -> None:
    where = f"template {tmpl.get('name')!r}"
    _only(tmpl, TEMPLATE_FIELDS, where, "")
    kind = template_type(tmpl)
    if kind == "container":
        _check_container(tmpl["container"], where)
    if kind == "resource":
        _only(tmpl["resource"], RESOURCE_FIELDS, where, "resource.")
        if tmpl["resource"].get("action") != "create":
            raise WorkflowError(f"{where}: resource.action {tmpl['resource'].get('action')!r} is not supported by "
                                "the local runner (mfargo writes create)")
        if tmpl.get("outputs"):
            raise WorkflowError(f"{where}: outputs of a resource template are not supported by the local runner")
        for key in ("successCondition", "failureCondition"):
            condition = tmpl["resource"].get(key)
            if condition is not None and not RESOURCE_CONDITION.fullmatch(str(condition)):
                raise WorkflowError(f"{where}: resource.{key} {condition!r} is not supported by the local runner "
                                    "(mfargo writes status.terminalState == <state>)")
    for v in _each(tmpl.get("volumes"), where, "volumes"):
        _only(v, VOLUME_FIELDS, where, f"volume {v.get('name') if isinstance(v, dict) else v!r}: ")
    if tmpl.get("podSpecPatch"):
        _check_pod_spec_patch(tmpl["podSpecPatch"], where)
    retry = tmpl.get("retryStrategy")
    if retry is not None:
        _only(retry, RETRY_FIELDS, where, "retryStrategy.")
        _only(retry.get("backoff") or {}, BACKOFF_FIELDS, where, "retryStrategy.backoff.")
        if retry.get("retryPolicy", "Always") not in RETRY_POLICIES:
            raise WorkflowError(f"{where}: retryStrategy.retryPolicy {retry['retryPolicy']!r} is not supported "
                                "by the local runner (mfargo writes Always)")
    _check_parameters(tmpl.get("inputs"), "inputs", INPUT_PARAMETER_FIELDS, where)
    _check_parameters(tmpl.get("outputs"), "outputs", OUTPUT_PARAMETER_FIELDS, where)
    if kind == "dag":
        _only(tmpl["dag"], DAG_FIELDS, where, "dag.")
        for task in _each(tmpl["dag"].get("tasks"), where, "dag.tasks"):
            _check_task(task, where, TASK_FIELDS, "task")
        _check_graph(tmpl["dag"].get("tasks") or [], where)
    if kind == "steps":
        for group in _each(tmpl["steps"], where, "steps"):
            for step in _each(group, where, "steps[]"):
                _check_task(step, where, STEP_FIELDS, "step")
    _check_tags(tmpl, where)


def _check_daemons(doc: WorkflowDoc) -> None:
    """A daemon is a container that a DAG task starts and nothing waits for (runner/dag.py)."""
    daemons = {n for n in doc.template_names if doc.template(n).get("daemon")}
    for name in sorted(daemons):
        if template_type(doc.template(name)) != "container":
            raise WorkflowError(f"template {name!r}: only a container can be a daemon in the local runner")
    for name in doc.template_names:
        tmpl = doc.template(name)
        kind = template_type(tmpl)
        if kind == "steps":
            for group in tmpl["steps"] or []:
                for step in group:
                    if step.get("template") in daemons:
                        raise WorkflowError(f"template {name!r}, step {step.get('name')!r}: a daemon as a step is "
                                            "not supported by the local runner (only as a DAG task)")
        if kind != "dag":
            continue
        tasks = tmpl["dag"].get("tasks") or []
        started = {t.get("name") for t in tasks if t.get("template") in daemons}
        for t in tasks:
            if t.get("name") in started and t.get("withParam"):
                raise WorkflowError(f"template {name!r}, task {t.get('name')!r}: a daemon fanned out is not "
                                    "supported by the local runner")
            needs = set(depends_tasks(parse(str(t["depends"]), DEPENDS))) if t.get("depends") else set()
            if needs & started:
                raise WorkflowError(f"template {name!r}, task {t.get('name')!r}: a task depending on a daemon "
                                    "is not supported by the local runner")
    for h, hook in (doc.spec.get("hooks") or {}).items():
        if hook.get("template") in daemons:
            raise WorkflowError(f"spec.hooks.{h}: a daemon as a hook is not supported by the local runner")


def check(doc: WorkflowDoc) -> None:
    """Raise WorkflowError (one line) for the first thing mfargo never writes, or a name
    or path that would leave the work directory (:mod:`runner.contain`)."""
    _only(doc.spec, SPEC_FIELDS, "spec", "spec.")
    _check_parameters(doc.spec.get("arguments"), "arguments", WORKFLOW_PARAMETER_FIELDS, "spec")
    for name in doc.template_names:
        check_template(doc.template(name))
    hooks = doc.spec.get("hooks") or {}
    _only(hooks, tuple(hooks), "spec", "spec.hooks.")
    for hname, hook in hooks.items():
        _check_hook(hook, f"spec.hooks.{hname}")
    _check_daemons(doc)
    _check_tags({k: v for k, v in doc.spec.items() if k != "templates"}, "spec")
    contain.check_document(doc)
