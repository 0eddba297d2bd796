"""mfargo's dialect: the fields of every object mfargo's compiler writes, as one table.

The runner plays these and nothing else ("Only what mfargo writes runs", runner/README.md):
the preflight walks the workflow with :func:`problems` before any pod starts, and a JobSet
manifest is walked when it is created. A few fields also have the values mfargo writes
(:class:`OneOf`); what other fields hold is checked where they are used. The table follows
``templates/``; the examples and the tests' compiled flows hold every field.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator

from . import job_policy

ANY = None  # any value: free text, or checked where it is used
NOT_HERE = "is not supported by the local runner"


@dataclass(frozen=True)
class Items:
    """A list of ``shape``; with a ``label`` an item is named by its ``name`` in messages
    (``template 'main', env 'HOME': valueFrom.x``), else by its index (``rules[0].x``)."""

    shape: Any
    label: str = ""


@dataclass(frozen=True)
class Values:
    """A mapping of names the user chose (``spec.hooks``) to values of ``shape``."""

    shape: Any


@dataclass(frozen=True)
class OneOf:
    """A value mfargo writes: one of ``values``, or text matching ``pattern`` (``shown`` in
    messages); ``required``: the field must be there (no default to fall back on)."""

    values: tuple = ()
    pattern: str = ""
    shown: str = ""
    required: bool = False

    def allows(self, value: Any) -> bool:
        return value in self.values or bool(self.pattern) and re.fullmatch(self.pattern, str(value)) is not None

    def __str__(self) -> str:
        return self.shown or ", ".join(map(str, self.values))


def fields(names: str = "", **shapes: Any) -> dict[str, Any]:
    """A mapping that may hold ``names`` (any value) and ``shapes`` (their own shape)."""
    return {**dict.fromkeys(names.split(), ANY), **shapes}


def _parameters(label: str, names: str = "", **shapes: Any) -> dict[str, Any]:
    """inputs, outputs, arguments: named parameters (no artifacts)."""
    return {"parameters": Items(fields("name " + names, **shapes), label)}


CONTAINER = fields(
    "name image command args resources terminationMessagePath imagePullPolicy ports securityContext",
    env=Items(fields("name value", valueFrom=fields("fieldRef secretKeyRef")), "env"),
    envFrom=Items(fields("secretRef"), "envFrom"),
    volumeMounts=Items(fields("name mountPath"), "volumeMount"),
)
TERMINAL_STATE = OneOf(pattern=r"status\.terminalState == \w+", shown="status.terminalState == <state>")
ARGUMENTS = _parameters("arguments parameter", "value")
TEMPLATE = fields(
    "name metadata activeDeadlineSeconds serviceAccountName nodeSelector tolerations podSpecPatch daemon "
    "priorityClassName affinity",  # where the pod runs: nothing to a local run
    container=CONTAINER,
    dag=fields(tasks=Items(fields("name template depends when withParam", arguments=ARGUMENTS), "task")),
    steps=Items(Items(fields("name template when", arguments=ARGUMENTS), "step")),
    resource=fields("manifest setOwnerReference", action=OneOf(("create",), required=True), successCondition=TERMINAL_STATE,
                    failureCondition=TERMINAL_STATE),
    inputs=_parameters("inputs parameter"),
    outputs=_parameters("outputs parameter", valueFrom=fields("path expression")),
    volumes=Items(fields("name emptyDir persistentVolumeClaim"), "volume"),
    retryStrategy=fields("limit", retryPolicy=OneOf(("Always",)), backoff=fields("duration"),
                         expression=OneOf(pattern=r'lastRetry\.exitCode != "\d+"', shown='lastRetry.exitCode != "<code>"')),
)
WORKFLOW_SPEC = fields(
    "entrypoint templates parallelism activeDeadlineSeconds serviceAccountName priority podGC podMetadata "
    "templateDefaults ttlStrategy workflowMetadata",
    # How many runs of a deployment run at once: one run is all `mfargo run` has.
    synchronization=fields(semaphores=Items(fields(configMapKeyRef=fields("name key")), "semaphore")),
    arguments=_parameters("arguments parameter", "value description"),
    hooks=Values(fields("template expression")),
)
JOB = fields(  # one pod per Job; a failed pod fails its Job, or is counted (job_policy.py)
    "activeDeadlineSeconds template", completions=OneOf((1,)), parallelism=OneOf((1,)), backoffLimit=OneOf((0,)),
    podFailurePolicy=fields(rules=Items(fields("onExitCodes onPodConditions", action=OneOf(job_policy.POD_ACTIONS)))))
JOBSET_SPEC = fields(
    "network ttlSecondsAfterFinished",
    successPolicy=fields(operator=OneOf(("All",))),  # every Job must complete
    failurePolicy=fields("maxRestarts", rules=Items(fields("name onJobFailureReasons",
                                                           action=OneOf(job_policy.JOBSET_ACTIONS)))),
    replicatedJobs=Items(fields("name replicas", template=fields("metadata", spec=JOB))),
)


def problems(obj: Any, shape: Any, path: str = "") -> Iterator[str]:
    """Each way ``obj`` leaves ``shape``, as ``<path> is not supported ...`` or ``<path> must
    be a mapping`` (a list). ``path`` names ``obj``; one ending in ``": "`` is a prefix
    (``template 'main': ``) that labelled items extend (``template 'main', task 'a': ``).
    A field that is absent or null is a problem only where its rule is ``required``; a null
    list item or hook is one."""
    if shape is ANY:
        return
    if isinstance(shape, OneOf):
        if not shape.allows(obj):
            yield f"{path} {obj!r} {NOT_HERE} (mfargo writes {shape})"
        return
    if isinstance(shape, Items):
        if not isinstance(obj, list):
            yield f"{path.rstrip(': ') or 'it'} must be a list"
            return
        head = path[:path.rfind(": ")] if ": " in path else path.split(".")[0]  # the prefix, not the path
        for i, item in enumerate(obj):
            name = item.get("name") if isinstance(item, dict) else item
            label = ", ".join(filter(None, (head, shape.label))) + (f" {name!r}: " if name is not None else ": ")
            yield from problems(item, shape.shape, label if shape.label else f"{path}[{i}]")
        return
    if not isinstance(obj, dict):
        yield f"{path.rstrip(': ') or 'it'} must be a mapping"
        return
    if isinstance(shape, dict):
        yield from (f"{_join(path, key)}: required (mfargo writes {rule})" for key, rule in shape.items()
                    if isinstance(rule, OneOf) and rule.required and obj.get(key) is None)
    for key, value in obj.items():
        where = _join(path, key)
        if isinstance(shape, Values):
            yield from problems(value, shape.shape, where)
        elif key not in shape:
            yield f"{where} {NOT_HERE}"
        elif value is not None:
            yield from problems(value, shape[key], where)


def _join(path: str, key: str) -> str:
    return f"{path}{key}" if not path or path.endswith(": ") else f"{path}.{key}"
