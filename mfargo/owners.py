"""Whose a deployed object is: the (flow, @project, branch) its Metaflow annotations name.

`create` refuses to replace an object another flow, @project or branch deployed (two of them
may compile to one name), unless `create --replace-other`. `mfargo.deploy` stamps these
annotations on every object of a bundle; objects without them are refused for the
WorkflowTemplate only (deploys before the stamping did not mark the rest).
"""

from __future__ import annotations

from mfargo.compiler.constants import Label
from mfargo.base.errors import UserError

REPLACE_OTHER = "--replace-other"  # the option of `create` that allows replacing another owner's objects
KEYS = (Label.FLOW_NAME, Label.PROJECT_NAME, Label.BRANCH_NAME)

Owner = tuple  # (flow, project or None, branch or None)


class OwnerConflict(UserError):
    """An object of the bundle's name belongs to another owner (one line)."""


def owner(flow: str, project: str | None, branch: str | None) -> Owner:
    return flow, project, branch if project else None


def owner_of(obj: dict) -> Owner:
    """(flow, @project, branch) a deployed object names in its annotations."""
    ann = (obj.get("metadata") or {}).get("annotations") or {}
    return tuple(ann.get(k) for k in KEYS)


def describe(who: Owner) -> str:
    flow, project, branch = who
    return "flow %s" % flow + (" (@project %s, branch %s)" % (project, branch) if project else "")


def check(kind: str, live: dict | None, mine: Owner, namespace: str, replace_other: bool) -> None:
    """Refuse to replace ``live`` if another owner deployed it, unless ``replace_other``."""
    if live is None or replace_other:
        return
    name = live["metadata"]["name"]
    theirs = owner_of(live)
    if theirs[0] is None:
        if kind == "WorkflowTemplate":
            raise not_metaflow(name, namespace)
        return
    if theirs != mine:
        raise OwnerConflict(
            "nothing deployed: %s %s in namespace %s belongs to %s, not to this %s; pass `create %s` to replace it"
            % (kind, name, namespace, describe(theirs), describe(mine), REPLACE_OTHER))


def not_metaflow(name: str, namespace: str) -> OwnerConflict:
    return OwnerConflict("a WorkflowTemplate named %s that was not deployed by Metaflow exists in namespace %s: "
                         "delete it, choose another name with `argo-workflows --name`, or pass `create %s` to "
                         "replace it" % (name, namespace, REPLACE_OTHER))
