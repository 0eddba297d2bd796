"""Execute an Argo resource template against the runner's JobSet controller.

What Argo's executor does with ``kubectl``: parse the (already substituted)
manifest, ``create`` it (a second create of the same name fails with
AlreadyExists), then watch the object until ``failureCondition`` (checked first,
any requirement matching fails the step) or ``successCondition`` (all
requirements must match) holds; no conditions = done right after create.
Conditions use Kubernetes label-selector syntax over gjson paths of the object
(mfargo writes ``status.terminalState == Completed``; comma = AND).

mfargo's resource templates create a JobSet and have no outputs (the preflight refuses
anything else).  Where a real step
would wait forever (the JobSet settled in a state no condition matches) the runner
fails the step with an explanation instead of hanging.
"""
from __future__ import annotations

import json
from typing import Any

from mfargo import k8s_syntax
from mfargo.k8s_syntax import Requirement

from . import bounded_yaml
from . import events as ev
from .jobset import GROUP, JobSetError, validate
from .jobset_controller import JobSetController


class ResourceError(Exception):
    """The resource step failed (message is what the node shows)."""


# ------------------------------------------------------------------ conditions

def parse_selector(text: str) -> list[Requirement]:
    """Argo reads success/failureCondition with Kubernetes' label-selector parser; so does
    mfargo's validation (k8s_syntax). A bad one fails the step, as in Argo at run time."""
    try:
        return k8s_syntax.parse_selector(text)
    except ValueError as e:
        raise ResourceError(f"unable to parse condition {text!r}: {e}") from None


_MISSING = object()


def gjson_get(obj: Any, path: str) -> Any:
    cur = obj
    for part in path.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return _MISSING
    return cur


def gjson_string(v: Any) -> str:
    if isinstance(v, str):
        return v
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"))
    return json.dumps(v)


def matches(req: Requirement, obj: dict) -> bool:
    v = gjson_get(obj, req.key)
    present = v is not _MISSING
    if req.op == "exists":
        return present
    if req.op == "!exists":
        return not present
    if req.op == "!=":
        return not present or gjson_string(v) != req.values[0]
    if req.op == "notin":
        return not present or gjson_string(v) not in req.values
    if not present:
        return False
    sv = gjson_string(v)
    if req.op == "==":
        return sv == req.values[0]
    if req.op == "in":
        return sv in req.values
    try:
        num = int(sv)
    except ValueError:
        return False
    return num > int(req.values[0]) if req.op == ">" else num < int(req.values[0])


# ------------------------------------------------------------------ execution

async def run_resource(resource: dict, controller: JobSetController, *, owner: dict | None,
                       on_event: ev.EventCallback, node: str, do_validate: bool = True) -> None:
    """Create the JobSet and wait for a condition; raises ResourceError if the step fails."""
    manifest = resource.get("manifest")
    if not isinstance(manifest, str) or not manifest.strip():
        raise ResourceError("resource.manifest is empty")
    try:
        docs = [d for d in bounded_yaml.load_all(manifest) if d is not None]
    except bounded_yaml.YamlError as e:
        raise ResourceError(f"error: error parsing manifest: {e}") from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ResourceError(f"the manifest must hold exactly one object, found {len(docs)}")
    obj = docs[0]
    api = str(obj.get("apiVersion", ""))
    if obj.get("kind") != "JobSet" or api.split("/")[0] != GROUP:
        raise ResourceError(f"resource kind {obj.get('kind')!r} ({api}) is not supported: "
                            "the local runner only plays the JobSet controller")
    if do_validate:
        problems = validate(obj, on_event)
        if problems:
            raise ResourceError("The JobSet is invalid: " + "; ".join(problems))
    owner_ref = owner if resource.get("setOwnerReference") else None
    try:
        js = controller.create(obj, owner_ref)
    except JobSetError as e:
        raise ResourceError(str(e)) from None

    success = parse_selector(resource["successCondition"]) if resource.get("successCondition") else []
    failure = parse_selector(resource["failureCondition"]) if resource.get("failureCondition") else []
    while True:
        version = js.version
        current = js.obj
        for req in failure:
            if matches(req, current):
                raise ResourceError(f"{js.name} failed: failure condition '{req}' matched "
                                    f"(terminalState={current.get('status', {}).get('terminalState')})")
        if not success or all(matches(req, current) for req in success):
            break
        if js.settled:
            raise ResourceError(
                f"JobSet {js.name} will not change any more (terminalState="
                f"{current.get('status', {}).get('terminalState')}) and successCondition "
                f"'{resource.get('successCondition')}' does not match: a real Argo step would wait forever")
        await js.wait_change(version)
