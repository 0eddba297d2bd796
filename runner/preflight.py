"""Refuse, before anything runs, what mfargo's compiler never writes, in one line naming
the template (and task) and the field: a run never fails halfway at a node it could never
have executed, and the runner carries no code for it. What is refused, object by object,
is listed in runner/README.md ("Only what mfargo writes runs"); the fields are the table
of :mod:`runner.dialect`, checked here with what a field may hold (tags, expressions,
``podSpecPatch``, daemons, the DAG's graph) and the names that become paths
(:func:`contain.check_document`).
"""
from __future__ import annotations

import graphlib
import re
from typing import Any, Iterator

import yaml

from mfargo.base import k8s_syntax

from . import contain, dialect
from .expr import DEPENDS, EXPRESSION, WHEN, ExprError, depends_tasks, parse
from .model import WorkflowDoc, WorkflowError, template_type
from .substitute import TAG_RE

# The pod fields of mfargo's podSpecPatch (templates/pod.py) the local runner can ignore: pull
# secrets only matter to a kubelet pulling an image, spread constraints to a scheduler placing
# pods. @pod_spec(patch=...)'s fields change how a pod runs: refused.
POD_SPEC_PATCH_FIELDS = ("imagePullSecrets", "topologySpreadConstraints")
# The simple tags mfargo writes (a name is [\w-]+): anything else, e.g. Argo's
# {{workflow.creationTimestamp.Y}} or {{item.key}}, is refused.
SIMPLE_TAGS = re.compile(r"""\s*(workflow\.(name|namespace|status) | retries | item
    | inputs\.parameters\.[\w-]+ | (tasks|steps)\.[\w-]+\.outputs\.parameters\.[\w-]+ | tasks\.[\w-]+\.status)\s*""",
                         re.X)


def _refuse_unknown(obj: Any, shape: Any, path: str) -> None:
    """The first field of ``obj`` mfargo never writes (:mod:`runner.dialect`), in one line."""
    for problem in dialect.problems(obj, shape, path):
        raise WorkflowError(problem)


def _check_output_expressions(outputs: Any, where: str) -> None:
    for p in (outputs or {}).get("parameters") or []:
        expression = (p.get("valueFrom") or {}).get("expression")
        if expression:
            _check_expression(str(expression), f"{where}, outputs parameter {p.get('name')!r}, valueFrom.expression")


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


def _check_container(c: dict, where: str) -> None:
    """``c`` as Argo runs it (templateDefaults merged in)."""
    if not c.get("command"):
        raise WorkflowError(f"{where}: container {c.get('name') or 'main'!r} has no command: the image's "
                            "entrypoint is unknown to the local runner")
    for kind, resource, problem in k8s_syntax.resources_problems(c.get("resources")):
        # The API server would refuse this pod: the run would fail on the cluster too.
        raise WorkflowError(f"{where}: resources.{kind}.{resource}: {problem} (Kubernetes refuses the pod)")


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


def _check_hook(hook: dict, where: str) -> None:
    """mfargo's hooks (spec.hooks only) run a template when their expression holds."""
    if not hook.get("expression"):
        raise WorkflowError(f"{where}: a hook without an expression is not supported by the local runner")
    _check_expression(str(hook["expression"]), f"{where}.expression")


def _check_task(task: dict, where: str, kind: str) -> None:
    """A DAG task's or a step's ``when`` and ``depends`` are shapes mfargo writes."""
    tname = f"{where}, {kind} {task.get('name')!r}"
    if task.get("when") not in (None, ""):
        _check_expression(str(task["when"]), f"{tname}, when", WHEN)
    if task.get("depends") not in (None, ""):
        _check_expression(str(task["depends"]), f"{tname}, depends", DEPENDS)


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
    _refuse_unknown(tmpl, dialect.TEMPLATE, where + ": ")
    kind = template_type(tmpl)
    if kind == "container":
        _check_container(tmpl["container"], where)
    if kind == "resource" and tmpl.get("outputs"):
        raise WorkflowError(f"{where}: outputs of a resource template are not supported by the local runner")
    if tmpl.get("podSpecPatch"):
        _check_pod_spec_patch(tmpl["podSpecPatch"], where)
    _check_output_expressions(tmpl.get("outputs"), where)
    if kind == "dag":
        for task in tmpl["dag"].get("tasks") or []:
            _check_task(task, where, "task")
        _check_graph(tmpl["dag"].get("tasks") or [], where)
    if kind == "steps":
        for group in tmpl["steps"]:  # each a list (the dialect's walk refused a null one)
            for step in group:
                _check_task(step, where, "step")
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
    _refuse_unknown(doc.spec, dialect.WORKFLOW_SPEC, "spec")  # its templates: check_template
    for name in doc.template_names:
        check_template(doc.template(name))
    for hname, hook in (doc.spec.get("hooks") or {}).items():
        _check_hook(hook, f"spec.hooks.{hname}")
    _check_daemons(doc)
    _check_tags({k: v for k, v in doc.spec.items() if k != "templates"}, "spec")
    contain.check_document(doc)
