"""Refuse, before anything runs, what the local runner cannot play.

Argo validates a workflow when it is submitted; the runner does the same for the
features it does not implement, so a run never fails halfway at a node it could
never have executed.  Each refusal is one line naming the template (and task).
Checked for every template of the document (Argo's lint also covers all of them):

* template kinds other than container/script/resource/suspend/dag/steps (``http``,
  ``containerSet``, ``data``, ``plugin``);
* a container (main, init, sidecar) with ``args`` but no ``command``, or neither: the
  image's entrypoint is unknown locally;
* every ``{{= expression}}`` tag, ``valueFrom.expression``, hook ``expression``, ``when``
  and ``depends`` must be one of the shapes mfargo writes (:mod:`runner.expr`);
* tasks/steps using ``templateRef`` or ``inline`` templates (also in hooks);
* a ``podSpecPatch`` with fields other than mfargo's (:data:`POD_SPEC_PATCH_FIELDS`);
* fields mfargo never writes: artifacts (inputs, outputs, arguments), ``memoize``, ``synchronization``, ``metrics``, ``retryStrategy.expression``, a task's
  ``withSequence`` or legacy ``dependencies``, a ``suspend`` without ``duration``;
* a ``daemon`` other than a container run by a DAG task that no task depends on (the
  shape of mfargo's run heartbeat: the runner stops it when the rest of its DAG is done);
* names and paths that would leave the work directory (:func:`contain.check_document`);
* a fan-out past :data:`limits.MAX_FANOUT` that the YAML alone shows (a literal ``withItems``
  list).
"""
from __future__ import annotations

from typing import Any, Iterator

import yaml

from . import contain, limits
from .expr import DEPENDS, EXPRESSION, WHEN, ExprError, depends_tasks, parse
from .model import WorkflowDoc, WorkflowError, template_type
from .scheduler import KINDS
from .substitute import TAG_RE


# Template fields whose semantics the runner does not play (ignoring them would change
# what the workflow does).
UNSUPPORTED_FIELDS = ("memoize", "synchronization", "metrics")
# The pod fields mfargo's podSpecPatch holds (templates/common.py pod_spec_patch). Each is a
# no-op here: imagePullSecrets only matter to a kubelet pulling an image.
POD_SPEC_PATCH_FIELDS = ("imagePullSecrets",)
UNSUPPORTED_TASK_FIELDS = ("templateRef", "inline", "withSequence", "dependencies")


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
        if "{{=" not in text:
            continue
        for m in TAG_RE.finditer(text):
            if m.group(1).startswith("="):
                _check_expression(m.group(1)[1:], f"{where}, {{{{={m.group(1)[1:].strip()}}}}}")


def _check_container(c: dict, where: str) -> None:
    name = c.get("name") or "main"
    if c.get("args") and not c.get("command"):
        raise WorkflowError(f"{where}: container {name!r} has args but no command: the image's "
                            "entrypoint is unknown to the local runner")
    if not c.get("command") and not c.get("args"):
        raise WorkflowError(f"{where}: container {name!r} has no command: the image's entrypoint "
                            "is unknown to the local runner")


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


def _check_fanout(task: dict, tname: str) -> None:
    """A fan-out the YAML alone shows to be past limits.MAX_FANOUT (a literal list); one
    from tags is checked when it is expanded (fanout.py)."""
    items = task.get("withItems")
    if isinstance(items, list) and len(items) > limits.MAX_FANOUT:
        raise WorkflowError(f"{tname}: " + limits.over("withItems", len(items), limits.MAX_FANOUT, "items"))


def _check_task(task: dict, where: str) -> None:
    tname = f"{where}, task {task.get('name')!r}"
    for key in UNSUPPORTED_TASK_FIELDS:
        if task.get(key):
            raise WorkflowError(f"{tname}: {key} is not supported by the local runner")
    if task.get("when") not in (None, ""):
        _check_expression(str(task["when"]), f"{tname}, when", WHEN)
    if task.get("depends") not in (None, ""):
        _check_expression(str(task["depends"]), f"{tname}, depends", DEPENDS)
    if (task.get("arguments") or {}).get("artifacts"):
        raise WorkflowError(f"{tname}: artifact arguments are not supported by the local runner")
    _check_fanout(task, tname)
    for hname, hook in (task.get("hooks") or {}).items():
        if isinstance(hook, dict) and hook.get("templateRef"):
            raise WorkflowError(f"{tname}, hook {hname!r}: templateRef is not supported by the local runner")
        if isinstance(hook, dict) and hook.get("expression"):
            _check_expression(str(hook["expression"]), f"{tname}, hooks.{hname}.expression")


def check_template(tmpl: dict) -> None:
    where = f"template {tmpl.get('name')!r}"
    kind = template_type(tmpl)
    if kind not in KINDS:
        raise WorkflowError(f"{where}: {kind} templates are not supported by the local runner")
    for key in UNSUPPORTED_FIELDS:
        if tmpl.get(key):
            raise WorkflowError(f"{where}: {key} is not supported by the local runner")
    if tmpl.get("podSpecPatch"):
        _check_pod_spec_patch(tmpl["podSpecPatch"], where)
    for section in ("inputs", "outputs"):
        if (tmpl.get(section) or {}).get("artifacts"):
            raise WorkflowError(f"{where}: {section} artifacts are not supported by the local runner")
    if kind == "suspend" and not (tmpl["suspend"] or {}).get("duration"):
        raise WorkflowError(f"{where}: a suspend without a duration cannot be resumed in the local runner")
    if kind in ("container", "script"):
        main = tmpl[kind]
        if kind == "container" or not main.get("command"):
            _check_container(main, where)
    for c in (tmpl.get("initContainers") or []) + (tmpl.get("sidecars") or []):
        _check_container(c, where)
    if (tmpl.get("retryStrategy") or {}).get("expression"):
        raise WorkflowError(f"{where}: retryStrategy.expression is not supported by the local runner")
    for section in ("outputs", "inputs"):
        for p in (tmpl.get(section) or {}).get("parameters") or []:
            vf = p.get("valueFrom") or {}
            if vf.get("expression"):
                _check_expression(str(vf["expression"]), f"{where}, {section} parameter {p.get('name')!r}, "
                                  "valueFrom.expression")
    if kind == "dag":
        for task in tmpl["dag"].get("tasks") or []:
            _check_task(task, where)
    if kind == "steps":
        for group in tmpl["steps"] or []:
            for step in (group if isinstance(group, list) else [group]):
                _check_task(step, where)
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
                for step in (group if isinstance(group, list) else [group]):
                    if step.get("template") in daemons:
                        raise WorkflowError(f"template {name!r}, step {step.get('name')!r}: a daemon as a step is "
                                            "not supported by the local runner (only as a DAG task)")
        if kind != "dag":
            continue
        tasks = tmpl["dag"].get("tasks") or []
        started = {t.get("name") for t in tasks if t.get("template") in daemons}
        for t in tasks:
            if t.get("name") in started and (t.get("withItems") or t.get("withParam")):
                raise WorkflowError(f"template {name!r}, task {t.get('name')!r}: a daemon fanned out is not "
                                    "supported by the local runner")
            needs = set(depends_tasks(parse(str(t["depends"]), DEPENDS))) if t.get("depends") else set()
            if needs & started:
                raise WorkflowError(f"template {name!r}, task {t.get('name')!r}: a task depending on a daemon "
                                    "is not supported by the local runner")
    for where, hook in [("spec.onExit", {"template": doc.spec.get("onExit")})] + [
            (f"spec.hooks.{h}", v) for h, v in (doc.spec.get("hooks") or {}).items() if isinstance(v, dict)]:
        if hook.get("template") in daemons:
            raise WorkflowError(f"{where}: a daemon as a hook is not supported by the local runner")


def check(doc: WorkflowDoc) -> None:
    """Raise WorkflowError (one line) for the first thing the runner cannot run, or a name
    or path that would leave the work directory (:mod:`runner.contain`)."""
    contain.check_document(doc)
    for key in ("synchronization", "artifactGC"):
        if doc.spec.get(key):
            raise WorkflowError(f"spec.{key} is not supported by the local runner")
    for name in doc.template_names:
        check_template(doc.template(name))
    _check_daemons(doc)
    for hname, hook in (doc.spec.get("hooks") or {}).items():
        if isinstance(hook, dict) and hook.get("expression"):
            _check_expression(str(hook["expression"]), f"spec.hooks.{hname}.expression")
    _check_tags({k: v for k, v in doc.spec.items() if k != "templates"}, "spec")

