"""The one rule for user text in the YAML: it stays text, never Argo or Kubernetes code.

Argo substitutes ``{{...}}`` (and evaluates ``{{=...}}``) in every string of a template,
in several passes: the template with the workflow's globals, again with its inputs, and
the whole pod spec once more just before the pod is created (the controller's
``substitutePodParams``). A value pasted in by one pass is read as a tag by the next, so
no escaping of ``{{`` survives: user text holding ``{{`` is **refused** at compile time,
wherever it would land (tags, parameter names/defaults/help, env names and values,
labels, annotations, node selectors, images, secret names, names, project/branch,
Metaflow config and Config values, decorator specs, schedules, triggers).

Kubernetes expands ``$(VAR)`` and turns ``$$`` into ``$`` in a container's ``command``,
``args`` and env ``value``s. Text written there goes through :func:`kubernetes_literal`,
which doubles each ``$`` that Kubernetes would read (one before ``$`` or ``(``), so the
pod sees exactly the text (our own bash included).

Run-time values (flow parameters, event payloads) never enter template text: the IR holds
them as ``ir.ParameterBase64`` and pods get the parameter base64-encoded by Argo
(``templates.expr.parameter_base64``), text that is inert for every later Argo pass and
for Kubernetes; they decode it themselves.
"""

from __future__ import annotations

import dataclasses
import re

from .errors import CompileError

ARGO_TAG_OPEN = "{{"
_KUBERNETES_DOLLAR = re.compile(r"\$(?=[$(])")

# Fields of a Step and the decorator the user wrote them with.
_STEP_FIELDS = (
    ("compute", "kubernetes"),
    ("environment", "environment"),
    ("gang", "jobset"),
    ("decorator_specs", "with"),
)


def kubernetes_literal(text: str) -> str:
    """``text`` as Kubernetes must read it in command/args/env values to yield ``text``."""
    return _KUBERNETES_DOLLAR.sub("$$", text)


def refuse_argo_tags(text, what: str, step: str | None = None, decorator: str | None = None) -> None:
    """Raise a CompileError when user text would be read by Argo as a tag."""
    if isinstance(text, str) and ARGO_TAG_OPEN in text:
        raise CompileError(
            "%s %r contains '{{', which Argo Workflows would substitute as a template tag; "
            "remove it" % (what, _short(text)),
            step,
            decorator,
        )


def refuse_uncarriable(text, what: str, step: str | None = None, decorator: str | None = None) -> None:
    """Raise a CompileError for text no container or YAML can carry exactly: NUL (a C string
    ends there: env values and argv lose what follows) and lone surrogates (not encodable
    as UTF-8, so not writable at all)."""
    if not isinstance(text, str):
        return
    if "\x00" in text:
        raise CompileError("%s %r contains a NUL character, which no container's env or arguments can "
                           "carry; remove it" % (what, _short(text)), step, decorator)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise CompileError("%s %r contains a lone surrogate (not valid Unicode text, not writable as UTF-8); "
                           "remove it" % (what, _short(text)), step, decorator) from None


def _check_text(text, what: str, step: str | None = None, decorator: str | None = None) -> None:
    refuse_uncarriable(text, what, step, decorator)
    refuse_argo_tags(text, what, step, decorator)


def check_workflow(wf) -> None:
    """Refuse ``{{``, NUL and lone surrogates in every user-supplied string of the IR (run-time values mfargo
    writes are ``ir.WorkflowField``/``ir.ParameterBase64`` objects, not strings)."""
    for step in wf.steps.values():
        for field, decorator in _STEP_FIELDS:
            for where, text in _strings(getattr(step, field), field):
                _check_text(text, where, step.name, decorator)
    for param in wf.parameters:
        for where, text in _strings(param, "parameter %s" % param.name):
            _check_text(text, where)
    for key, value in wf.env:
        _check_text(key, "env name")
        _check_text(value, "env %s" % key)
    for field in ("name", "flow_name", "script", "namespace", "description", "step_args",
                  "top_level_args", "annotations", "labels"):
        for where, text in _strings(getattr(wf, field), _OPTION_NAMES.get(field, field)):
            _check_text(text, where)
    for where, text in _strings(wf.deployment, "deployment"):
        _check_text(text, where)


_OPTION_NAMES = {"step_args": "--tag/--namespace", "top_level_args": "option", "annotations": "annotation"}


def _strings(value, where: str):
    """(where, text) for every string inside a dataclass / tuple / dict / str."""
    if isinstance(value, str):
        yield where, value
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield from _strings(getattr(value, f.name), "%s %s" % (where, f.name) if where else f.name)
    elif isinstance(value, dict) or _is_pairs(value):
        for k, v in dict(value).items():
            yield from _strings(k, where)
            yield from _strings(v, "%s %s" % (where, k))
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _strings(item, where)


def _is_pairs(value) -> bool:
    return isinstance(value, tuple) and bool(value) and all(
        isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) for v in value
    )


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."
