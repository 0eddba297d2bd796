"""Execute an Argo resource template against the runner's JobSet controller.

What Argo's executor does with ``kubectl``: parse the (already substituted)
manifest, ``create`` it (a second create of the same name fails with
AlreadyExists), then watch the object until ``failureCondition`` (checked first,
any requirement matching fails the step) or ``successCondition`` (all
requirements must match) holds; no conditions = done right after create.
mfargo's conditions read the JobSet's ``status.terminalState`` (Completed / Failed).

mfargo's resource templates create a JobSet and have no outputs (the preflight refuses
anything else).  Where a real step
would wait forever (the JobSet settled in a state no condition matches) the runner
fails the step with an explanation instead of hanging.
"""
from __future__ import annotations

from . import bounded_yaml
from .jobset import GROUP, JobSetController, JobSetError, essential_problems, validate


class ResourceError(Exception):
    """The resource step failed (message is what the node shows)."""


def terminal_state(condition: str | None) -> str | None:
    """The state a condition waits for: mfargo writes ``status.terminalState == <state>``
    (templates/jobset.py; the preflight refuses any other condition)."""
    return condition.split("==")[1].strip() if condition else None


async def run_resource(resource: dict, controller: JobSetController, *, owner: dict | None,
                       do_validate: bool = True) -> None:
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
    # what the runner plays is always checked; the schema (mfargo.validation) unless --no-validate
    problems = validate(obj) if do_validate else essential_problems(obj)
    if problems:
        raise ResourceError("The JobSet is invalid: " + "; ".join(problems))
    owner_ref = owner if resource.get("setOwnerReference") else None
    try:
        js = controller.create(obj, owner_ref)
    except JobSetError as e:
        raise ResourceError(str(e)) from None

    success = terminal_state(resource.get("successCondition"))
    failure = terminal_state(resource.get("failureCondition"))
    while True:
        version = js.version
        state = js.obj.get("status", {}).get("terminalState")
        if failure is not None and state == failure:
            raise ResourceError(f"{js.name} failed: failure condition '{resource['failureCondition']}' matched "
                                f"(terminalState={state})")
        if success is None or state == success:
            break
        if js.settled:
            raise ResourceError(
                f"JobSet {js.name} will not change any more (terminalState={state}) and successCondition "
                f"'{resource.get('successCondition')}' does not match: a real Argo step would wait forever")
        await js.wait_change(version)
