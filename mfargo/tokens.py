"""Production-token rules, as pure functions (Metaflow's contract, as core's Argo CLI applies it).

A deployed flow carries a production token: runs are tagged with its namespace, and only the
previous deployer or someone holding the token may replace, delete or stop it. The token
store (`new_token`, `load_token`) is Metaflow's; it is passed in so these rules stay pure.
"""

from __future__ import annotations

import base64
from hashlib import sha1
from typing import Callable

from mfargo.base.errors import UserError

PREFIX = "production:"


class TokenError(UserError):
    """A token rule refused the request (one line for the user)."""


def strip(token: str | None) -> str | None:
    """Users may paste the namespace (`production:<token>`) where the token is asked for."""
    if token and token.startswith(PREFIX):
        return token[len(PREFIX):]
    return token


def token_prefix(workflow_base_name: str, project: str | None, branch: str | None) -> str:
    """The key of Metaflow's token store: the name, or a digest of @project's project.branch."""
    if project:
        digest = base64.b32encode(sha1(("%s.%s" % (project, branch)).encode()).digest()).decode()
        return ("mfprj-%s" % digest[:16]).lower()
    return workflow_base_name.lower()


def authorized(deployed_token: str | None, deployed_by: str | None, me: str | None, my_token: str | None) -> bool:
    """Metaflow's rule: nothing deployed yet, the previous deployer, or anyone holding the token."""
    return deployed_token is None or deployed_by == me or my_token == deployed_token


def _given(given: str | None, project: str | None) -> str | None:
    given = strip(given)
    if given and project:
        raise TokenError("--new-token cannot be used with @project; use --generate-new-token")
    return given


def deploy_token(deployed: str | None, given: str | None, generate: bool, project: str | None,
                 new_token: Callable[[str | None], str | None]) -> str:
    """The token of a deployment: --new-token's, a fresh one (first deployment or
    --generate-new-token), else the deployed one. `new_token(previous)` mints one."""
    token = _given(given, project)
    if token:
        return token
    if deployed is None or generate:
        token = new_token(deployed)
        if token is None:
            raise TokenError("--generate-new-token cannot follow a token given with --new-token; use --new-token")
        return token
    return deployed


def offline_token(given: str | None, generate: bool, project: str | None,
                  new_token: Callable[[str | None], str | None]) -> str | None:
    """Compiling without a cluster: a token only when asked for."""
    token = _given(given, project)
    if token:
        return token
    return new_token(None) if generate else None

