"""What a template is once Argo has merged ``spec.templateDefaults`` into it.

Argo's controller merges the defaults into every template before it runs it, by Kubernetes'
strategic merge patch typed by its ``Template`` (workflow/controller/operator.go,
mergedTemplateDefaultsInto): maps merge key by key, so a template keeps every key of the
defaults it does not state; a list whose Go field names a merge key merges item by item on
it (``MERGE_KEYS``); any other value of the template replaces the default's. The template
keeps its own type: a default ``container`` never reaches a DAG or a resource template.

One function for the compile-time backstop (``validation.argo`` checks the pod each template
really gets) and for ``mfargo run``, which runs the same merged templates.
"""

from __future__ import annotations

import copy
from typing import Any

# The template types (Argo's TemplateType): a template is exactly one of them.
TEMPLATE_TYPES = ("container", "script", "resource", "dag", "steps", "suspend", "data", "containerSet", "http", "plugin")

# List fields with a patchMergeKey in Argo's Template/Inputs/Outputs or Kubernetes' Container.
MERGE_KEYS = {
    "env": "name", "volumeMounts": "mountPath", "ports": "containerPort", "volumeDevices": "devicePath",
    "volumes": "name", "initContainers": "name", "sidecars": "name", "tolerations": "key", "hostAliases": "ip",
    "parameters": "name", "artifacts": "name",
}


def merged(defaults: dict | None, template: dict) -> dict:
    """``template`` with ``defaults`` merged in, as Argo runs it."""
    if not defaults:
        return template
    own = [k for k in TEMPLATE_TYPES if template.get(k) is not None]
    applicable = {k: v for k, v in defaults.items() if k not in TEMPLATE_TYPES or k in own}
    return _merge(applicable, template, None)


def _merge(default: Any, value: Any, field: str | None) -> Any:
    if isinstance(default, dict) and isinstance(value, dict):
        # The defaults' keys in their order, then the template's own: each subtree copied once.
        out = {k: _merge(d, value[k], k) if k in value else copy.deepcopy(d) for k, d in default.items()}
        out.update((k, copy.deepcopy(v)) for k, v in value.items() if k not in default)
        return out
    key = MERGE_KEYS.get(field)
    if key and isinstance(default, list) and isinstance(value, list) \
            and all(isinstance(x, dict) and key in x for x in default + value):
        return _merge_list(default, value, key)
    return copy.deepcopy(value)


def _merge_list(default: list, value: list, key: str) -> list:
    """Items merged on ``key``, in the order a strategic merge patch gives them: the template's
    items in its order, each default it does not name placed before the first of the template's
    items that comes after it among the defaults (a new item of the template comes first)."""
    position = {x[key]: i for i, x in enumerate(default)}
    own = [_merge(default[position[x[key]]], x, None) if x[key] in position else copy.deepcopy(x) for x in value]
    named = {x[key] for x in value}
    rest = [copy.deepcopy(x) for x in default if x[key] not in named]
    out: list = []
    while rest or own:
        after = own and position.get(own[0][key])
        if rest and (not own or (after is not None and position[rest[0][key]] < after)):
            out.append(rest.pop(0))
        else:
            out.append(own.pop(0))
    return out
