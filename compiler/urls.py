"""No secret in a URL that mfargo writes into the YAML.

Every URL-valued setting that reaches the pods as text (Metaflow config such as
METAFLOW_SERVICE_URL, METAFLOW_S3_ENDPOINT_URL, METAFLOW_ARGO_EVENTS_WEBHOOK_URL, the
datastore and datatools roots) is read by anyone who can read the WorkflowTemplate. The
parts of a URL where a credential goes are refused outright rather than guessed at: the
user info (``user:pass@``), any query string (``?token=...``, ``?X-Amz-Signature=...``) and
any fragment. None of these endpoints needs one to be reached; credentials go to the pods
from a Kubernetes Secret instead.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from .errors import CompileError

HOW = ("give the pods the credentials from a Kubernetes Secret instead (METAFLOW_KUBERNETES_SECRETS or "
       "@kubernetes(secrets=[...]), e.g. keys METAFLOW_SERVICE_HEADERS or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) "
       "and keep the URL without them")


def no_secret(name: str, value: str) -> None:
    """Refuse a URL ``value`` of setting ``name`` with user info, a query string or a fragment."""
    try:
        parts = urlsplit(value)
        has_user = bool(parts.username or parts.password)
    except ValueError:  # not a URL (an invalid port or IPv6 literal): nothing to look at
        return
    if not (parts.scheme and parts.netloc):
        return
    found = [what for what, there in (("a user name/password", has_user), ("a query string", parts.query),
                                       ("a fragment", parts.fragment)) if there]
    if found:
        raise CompileError("%s holds %s (%s://%s/...); the YAML would carry it: %s"
                           % (name, " and ".join(found), parts.scheme, parts.hostname or "", HOW))
